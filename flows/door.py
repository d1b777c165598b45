"""The run plan (:class:`flows.plan.RunPlan`) resolved into the privacy door's inputs, once, for every route:
``mdp-release check`` and the run (before its first charge) call :func:`plan_for`; the stage that measures the secret table calls
:func:`mdp_core.release.door.plan_privacy` with the same settings (:meth:`~mdp_core.release.door.Settings.as_params`). The rules
themselves live in :mod:`mdp_core.release.door` (pure); this module only reads: the plan, the public
instance and its mDP graph (the stretch recomputed here, never read from a stage's file), the secret
table (validated: counts only leave this module, and its people in memory for the population's sketch)
and, read only, which other population of the store shares most of its people (the private sketches).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flows.config import ReleaseFlowConfig, store_root
from flows.plan import RunPlan
from mdp_core.errors import InputError, SecretTableError
from mdp_core.release.door import GraphFacts, PrivacyPlan, TableFacts, plan_privacy

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
    def of(cls, inst: Any, radius: float, all_pairs: bool = False) -> Figures:
        """The figures of ``inst`` (the instance with its mDP graph's edges) at ``radius`` (``all_pairs``: for a
        mechanism certified over every pair of a component, ``[solve] all_pairs``)."""
        graph, _ = GraphFacts.recomputed(inst, radius, all_pairs)
        return cls(float(inst.epsilon), float(inst.eta), float(radius), graph)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON values (:meth:`parse` reads them back: the same figures); ``all_pairs`` only when set."""
        graph = {k: v for k, v in asdict(self.graph).items() if k != "all_pairs" or v}
        return {"epsilon": self.epsilon, "eta": self.eta, "radius": self.radius, "graph": graph}

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
    their keyed sketch is kept in the store's private part when the population claims them), the located
    people (for ``check``'s terminal-only figures) and its sealed rows (the run's snapshot); the public
    figures it was decided on."""

    plan: PrivacyPlan
    people: People | None = None
    located: Any = None
    figures: Figures | None = None
    rows: Any = None  # the secret table's sealed rows (secret, in memory: the run seals them in private/)


def universe_has_table(inputs: tuple[str, ...], table_sha256: str) -> bool:
    """Whether the secret table's bytes (``table_sha256``: their sha256) are one of the dataset's input files
    (``inputs``: :attr:`flows.plan.RunPlan.dataset_inputs`)."""
    from mdp_core.problem.microdata import sha256_regular

    for path in inputs:
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


def read_secret_table(plan: RunPlan, inst: Any, limit: float) -> tuple[TableFacts, People, Any, Any]:
    """Read the secret table ONCE and validate it against ``inst`` (the ingested instance, with its user file's
    ids): (its facts for the door, its people, the located people, its sealed rows --
    :func:`mdp_core.problem.microdata.sealed_rows`, a key of the user's file resolved into generated record ids
    by :func:`mdp_core.release.door.resolved_rows`: what the run seals and every later step reads against the
    published instance). A SecretTableError (no value, no path in its message) when the file cannot be
    read at all."""
    from mdp_core.declarations.dataset_kinds import published_instance
    from mdp_core.problem import microdata
    from mdp_core.release.door import resolved_rows, table_facts, table_people, universe_facts

    table, file_sha = microdata.read_secret(str(plan.privacy.microdata))
    try:  # keyed by the user's file ids (osmid): resolved here into the generated record ids, never published
        rows = resolved_rows(microdata.sealed_rows(table.frame, inst), inst)
    except SecretTableError:
        raise
    except InputError as exc:  # the columns do not fit the instance: a problem of the secret table
        raise SecretTableError(str(exc)) from None
    public = published_instance(inst)  # what the measure stage maps the sealed rows against
    loc = microdata.locate(rows, public)
    people = table_people(rows, public, loc)
    facts = table_facts(
        loc,
        inst.n_records,
        limit,
        universe_bytes=universe_has_table(plan.dataset_inputs, file_sha),
        other=similar_population(plan.store_root, people, plan.privacy.population),
        universe=universe_facts(people, inst) if plan.user_universe else None,
    )
    return facts, people, loc, rows


SEALED_PATH = "private-path:"  # [release] microdata in a flow run's parameters: "private-path:<keyed tag>"


def sealed_config(cfg: ReleaseFlowConfig) -> ReleaseFlowConfig:
    """``cfg`` as a flow run's parameter may carry it: ``[release] microdata`` (the secret table's path) replaced
    by ``private-path:<tag>``, the path kept in the store's private part under its keyed tag
    (:meth:`artifacts.private.PrivateStore.register_table_path`). Prefect's database, UI and logs then never see
    the path; the run finds it again in its own store (:func:`unsealed_config`). Configs without a table, or
    already sealed: unchanged."""
    path = cfg.release.microdata
    if path is None or path.startswith(SEALED_PATH):
        return cfg
    from artifacts.private import PrivateStore

    handle = PrivateStore(store_root(cfg)).register_table_path(path)
    return cfg.model_copy(update={"release": cfg.release.model_copy(update={"microdata": SEALED_PATH + handle})})


def unsealed_config(cfg: ReleaseFlowConfig) -> ReleaseFlowConfig:
    """``cfg`` with a ``private-path:<tag>`` microdata (:func:`sealed_config`) resolved to the path its store keeps
    (InputError when that store has none); any other config unchanged. Inside the run's process only."""
    path = cfg.release.microdata
    if path is None or not path.startswith(SEALED_PATH):
        return cfg
    from artifacts.private import PrivateStore

    real = PrivateStore(store_root(cfg)).table_path(path[len(SEALED_PATH) :])
    return cfg.model_copy(update={"release": cfg.release.model_copy(update={"microdata": real})})


def plan_for(plan: RunPlan, inst: Any) -> Door:
    """The door for the run ``plan`` over ``inst`` (the instance with the mDP graph's edges at the release's eta):
    the plan, with the secret table read and validated when the release has one. Without a secret table
    ``inst`` may be the instance's :class:`Figures` at the release's radius (an earlier door's, memoised):
    the same plan, without the instance."""
    p = plan.privacy
    s = p.settings(float(p.epsilon if p.epsilon is not None else inst.epsilon), inst.eta)
    figures = inst if isinstance(inst, Figures) else Figures.of(inst, s.radius, s.all_pairs)
    if figures.radius != s.radius or figures.graph.all_pairs != s.all_pairs:
        raise ValueError(f"the figures are at radius {figures.radius:g}, the release's is {s.radius:g} (or all_pairs)")
    if p.microdata is None:
        return Door(plan_privacy(s, figures.graph), figures=figures)
    if isinstance(inst, Figures):
        raise ValueError("a secret table is read against the instance itself, not its figures")
    facts, people, loc, rows = read_secret_table(plan, inst, s.distance_limit)
    s = p.settings(
        s.epsilon, s.eta, facts.n_people or None
    )  # eps_error = auto is sized from n, public (docs/privacy.md)
    return Door(plan_privacy(s, figures.graph, facts), people, loc, figures, rows)


__all__ = [
    "Door",
    "Figures",
    "plan_for",
    "read_secret_table",
    "sealed_config",
    "unsealed_config",
]
