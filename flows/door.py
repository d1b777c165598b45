"""The config resolved into the privacy door's inputs, once, for every route: ``mdp-release check`` and the
run (before its first charge) call :func:`plan_for`; the stage that measures the secret table calls
:func:`mdp_core.release.door.plan_privacy` with the same settings (:meth:`~mdp_core.release.door.Settings.as_params`). The rules
themselves live in :mod:`mdp_core.release.door` (pure); this module only reads: the config, the public
instance and its mDP graph (the stretch recomputed here, never read from a stage's file), the secret
table (validated: counts only leave this module, and its people in memory for the population's sketch)
and, read only, which other population of the store shares most of its people (the private sketches).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flows.config import ReleaseFlowConfig, store_root
from mdp_core.errors import InputError
from mdp_core.release.door import GraphFacts, PrivacyPlan, Settings, TableFacts, plan_privacy

if TYPE_CHECKING:
    from mdp_core.release.similarity import People


@dataclass(frozen=True)
class Figures:
    """The public instance's figures the door decides on: its epsilon and eta and its mDP graph's
    :class:`GraphFacts` (recomputed from its records and edges by :meth:`of`) at the protection ``radius``.
    Public (a record count, component sizes, stretches, a unit: what a release states); for a release without a
    secret table they are all the door reads, so the run memoises them (:func:`tasks.common.door_figures`)."""

    epsilon: float
    eta: float
    radius: float
    graph: GraphFacts

    @classmethod
    def of(cls, inst: Any, radius: float) -> Figures:
        """The figures of ``inst`` (the instance with its mDP graph's edges) at ``radius``."""
        graph, _ = GraphFacts.recomputed(inst, radius)
        return cls(float(inst.epsilon), float(inst.eta), float(radius), graph)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON values (:meth:`parse` reads them back: the same figures)."""
        return {"epsilon": self.epsilon, "eta": self.eta, "radius": self.radius, "graph": asdict(self.graph)}

    @classmethod
    def parse(cls, d: Any) -> Figures | None:
        """The figures :meth:`as_dict` wrote; None for anything else (no figures: the door reads the instance)."""
        try:
            g = dict(d["graph"])
            g["component_sizes"] = tuple(int(n) for n in g["component_sizes"])
            return cls(float(d["epsilon"]), float(d["eta"]), float(d["radius"]), GraphFacts(**g))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Door:
    """What the door decided for a config: the plan, and for an agency's table its people (secret, memory only:
    their keyed sketch is kept in the store's private part when the population claims them) and the located
    people (for ``check``'s terminal-only figures); the public figures it was decided on."""

    plan: PrivacyPlan
    people: People | None = None
    located: Any = None
    figures: Figures | None = None


def settings(cfg: ReleaseFlowConfig, epsilon: float, eta: float) -> Settings:
    """The door's :class:`Settings` of ``cfg`` (``epsilon``, ``eta``: the instance's, after the config's)."""
    r, p = cfg.release, cfg.privacy
    return Settings(
        epsilon=float(epsilon),
        eta=float(eta),
        protection_radius=p.protection_radius,
        max_distance=r.max_distance,
        eps_counts=r.eps_counts,
        eps_prior=r.eps_prior if r.prior_source == "dp" else None,
        max_stretch=p.max_stretch,
        allow_unprotected=p.allow_unprotected,
        population=r.population if r.microdata is not None else None,
    )


def universe_has_table(cfg: ReleaseFlowConfig, table_sha256: str) -> bool:
    """Whether the secret table's bytes are one of the dataset's input files."""
    from mdp_core.declarations import dataset_kinds
    from mdp_core.problem.microdata import sha256_regular

    for path in dataset_kinds.input_files(cfg.dataset.kind, cfg.dataset.params):
        try:
            if sha256_regular(path, "dataset input") == table_sha256:
                return True
        except InputError:
            continue
    return False


def similar_population(root: Path, people: People, population: str | None) -> tuple[str, float] | None:
    """(population, share) of another population of the store at ``root`` sharing most of ``people`` (read
    only), or None."""
    if not (root / "private").is_dir():
        return None
    from artifacts.private import PrivateStore

    return PrivateStore(root).similar_population(people, population)


def read_secret_table(cfg: ReleaseFlowConfig, inst: Any, limit: float) -> tuple[TableFacts, People, Any]:
    """Read and validate the secret table against ``inst``: (its facts for the door, its people, the located
    people). InputError when the file cannot be read at all (a message with no value in it)."""
    from mdp_core.declarations import dataset_kinds
    from mdp_core.problem import microdata
    from mdp_core.release.door import table_facts, table_people, universe_facts

    path = str(cfg.release.microdata)
    table = microdata.read_table(path)
    loc = microdata.locate(table.frame, inst)
    people = table_people(table.frame, inst, loc)
    user_universe = dataset_kinds.user_universe(cfg.dataset.kind, cfg.dataset.params)
    facts = table_facts(
        loc,
        inst.n_records,
        limit,
        universe_bytes=universe_has_table(cfg, microdata.sha256_regular(path)),
        other=similar_population(store_root(cfg), people, cfg.release.population),
        universe=universe_facts(people, inst) if user_universe else None,
    )
    return facts, people, loc


def plan_for(cfg: ReleaseFlowConfig, inst: Any) -> Door:
    """The door for ``cfg`` over ``inst`` (the instance with the mDP graph's edges at the release's eta):
    the plan, with the secret table read and validated when the release has one. Without a secret table
    ``inst`` may be the instance's :class:`Figures` at the release's radius (an earlier door's, memoised):
    the same plan, without the instance."""
    s = settings(cfg, float(cfg.privacy.epsilon if cfg.privacy.epsilon is not None else inst.epsilon), inst.eta)
    figures = inst if isinstance(inst, Figures) else Figures.of(inst, s.radius)
    if figures.radius != s.radius:
        raise ValueError(f"the figures are at radius {figures.radius:g}, the release's is {s.radius:g}")
    if cfg.release.microdata is None:
        return Door(plan_privacy(s, figures.graph), figures=figures)
    if isinstance(inst, Figures):
        raise ValueError("a secret table is read against the instance itself, not its figures")
    facts, people, loc = read_secret_table(cfg, inst, s.distance_limit)
    return Door(plan_privacy(s, figures.graph, facts), people, loc, figures)


__all__ = ["Door", "Figures", "plan_for", "read_secret_table", "settings"]
