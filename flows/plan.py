"""The run plan: what a release run takes from its config, computed once by :func:`plan_run` (issue 53).

The config (:class:`flows.config.ReleaseFlowConfig`) is read here and at the flow's entry, nowhere below:
:func:`flows.release.release_flow` plans first and hands on only the :class:`RunPlan` and the store; the
stages' loop, the privacy door (:mod:`flows.door`), the officer's approval (:mod:`flows.approval`), the task
runner (:mod:`flows.runner`), the side runs, the manifest and retention read plan fields. ``mdp-release
check`` (:mod:`flows.check`) calls the same :func:`plan_run`, so the check and the run decide on one plan.

:func:`plan_run` is pure apart from reading the files the config names (the content hashes of the dataset's
input files and of a public prior file, which are in the stages' parameters): no store, no Prefect. Each
stage's parameters are byte for byte what they were before the plan existed (they are the stages' cache
keys: ``tests/test_cache*.py`` pin them).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from flows.config import (
    DEFAULT_APPROVAL_TIMEOUT,
    ReleaseFlowConfig,
    approval_mode,
    config_hash,
    effective_epsilon,
    release_name,
    store_root,
)
from mdp_core.declarations import contract, dataset_kinds
from mdp_core.release.door import Settings
from mdp_core.runtime.files import file_sha256

SECRET_TABLE = "secret-table"  # what a run's title hashes in place of the secret table's path or sealed tag


@dataclass(frozen=True)
class PrivacyTerms:
    """What the privacy door and the measuring stage read of ``[privacy]`` and ``[release]``: the door's
    :class:`~mdp_core.release.door.Settings` but the instance's epsilon and eta (:meth:`settings`), the
    secret table's path (``microdata``: in this process only, never in a published file, a log or a flow
    run's parameters) and the cap the config asks for."""

    epsilon: float | None  # [privacy] epsilon; None: the instance's (per distance unit)
    protection_radius: float | None  # distance unit; None: eta
    max_stretch: float
    allow_unprotected: bool
    max_distance: float | None  # distance unit
    eps_counts: float
    eps_prior: float | None  # the DP prior's budget; None: the prior is not a DP histogram
    eps_error: float | None  # [release] eps_error: the people's mean error's budget; None: auto (0: not measured)
    population: str | None  # the secret table's population; None: simulated people
    all_pairs: bool  # [solve] all_pairs: certified over every pair of a component (issue 51)
    microdata: str | None  # the secret table's path; None: simulated people
    max_total_epsilon: float | None  # the population's cap the config asks for

    def error_epsilon(self, n_people: int | None) -> float | None:
        """The budget of the people's mean-error measurement (:func:`mdp_core.release.people.measured_error`) for
        ``n_people`` (public under the counts' relation; None: not known yet, then the cap
        :data:`mdp_core.release.people.ERROR_EPS_CAP` bounds it): ``eps_error`` when set (0: None, not measured);
        unset (auto): :func:`mdp_core.release.people.auto_error_epsilon` with a DP prior, else None."""
        from mdp_core.release import people

        if self.eps_error is not None:
            return float(self.eps_error) or None
        if self.eps_prior is None:
            return None
        return people.ERROR_EPS_CAP if n_people is None else people.auto_error_epsilon(n_people)

    def settings(self, epsilon: float, eta: float, n_people: int | None = None) -> Settings:
        """The door's settings (``epsilon``, ``eta``: the instance's, after the config's; distance unit;
        ``n_people``: the secret table's size once the door read it, for ``eps_error`` = auto)."""
        return Settings(
            epsilon=float(epsilon),
            eta=float(eta),
            protection_radius=self.protection_radius,
            max_distance=self.max_distance,
            eps_counts=self.eps_counts,
            eps_prior=self.eps_prior,
            eps_error=self.error_epsilon(n_people),
            max_stretch=self.max_stretch,
            allow_unprotected=self.allow_unprotected,
            population=self.population,
            all_pairs=self.all_pairs,
        )


@dataclass(frozen=True)
class Approval:
    """What the officer's approval (:mod:`flows.approval`) reads: the release's name, its approval mode in a
    run started by hand and in a deployed or scheduled one (:func:`flows.config.approval_mode`), how long a
    run waits for the decision (s) and the cap the config asks for."""

    release: str
    by_hand: str
    deployed: str
    timeout: int  # s
    max_total_epsilon: float | None

    def mode(self, deployed: bool) -> str:
        """The approval mode of a run (``deployed``: a deployment's or a schedule's)."""
        return self.deployed if deployed else self.by_hand


@dataclass(frozen=True)
class Runner:
    """``[run]``'s task runner: ``thread`` or ``dask`` (``dask_address``: a remote scheduler's; empty: a local
    cluster) with ``max_workers`` threads or worker processes (:func:`flows.runner.task_runner`)."""

    task_runner: str
    dask_address: str
    max_workers: int


@dataclass(frozen=True)
class RunPlan:
    """Everything a run takes from its config (:func:`plan_run`). ``stage_params``: each cached stage's
    parameters known before the secret draw (copy them with :meth:`params`: the run adds the release's at the
    draw, :func:`flows.release.release_params`); ``steps``: :func:`stage_plan`; ``reads``: each stage's task
    keyword -> the stage whose output it takes, None when the stage does not take it for this config;
    ``secret_params`` / ``measure_params``: the config's part of the secret-reading stages' parameters;
    ``config_json``: the config's JSON, as the manifest publishes it (the secret table's path replaced by its
    role: :func:`flows.manifest.public_config`)."""

    release_name: str
    title: str
    tags: tuple[str, ...]
    store_root: Path
    steps: tuple[str, ...]
    stage_params: dict[str, dict[str, Any]]
    reads: dict[str, dict[str, str | None]]
    privacy: PrivacyTerms
    approval: Approval
    prior_source: str
    public_prior: dict[str, Any] | None
    secret_params: dict[str, Any]
    measure_params: dict[str, Any]
    simulated_individuals: int | None
    dataset_inputs: tuple[str, ...]
    user_universe: bool
    timeouts: dict[str, float | None]
    runner: Runner
    keep_releases: int | None
    config_json: dict[str, Any]

    def params(self) -> dict[str, dict[str, Any]]:
        """A fresh copy of :attr:`stage_params` (what a run adds to at the draw)."""
        return copy.deepcopy(self.stage_params)

    def upstream(self, stage: str, outputs: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments of ``stage``'s task: each read's output in ``outputs`` ({stage: output}; None
        for a stage that did not run, or a read this config leaves out)."""
        return {kw: None if source is None else outputs.get(source) for kw, source in self.reads[stage].items()}


def plan_run(config: ReleaseFlowConfig) -> RunPlan:
    """The plan of a run of ``config`` (module docstring). InputError for a store root that is no place for a
    store; OSError when a file the config names cannot be read."""
    r, p, run = config.release, config.privacy, config.run
    name = release_name(config)
    privacy = PrivacyTerms(
        epsilon=p.epsilon,
        protection_radius=p.protection_radius,
        max_stretch=p.max_stretch,
        allow_unprotected=p.allow_unprotected,
        max_distance=r.max_distance,
        eps_counts=r.eps_counts,
        eps_prior=r.eps_prior if r.prior_source == "dp" else None,
        eps_error=r.eps_error,
        population=r.population if r.microdata is not None else None,
        all_pairs=all_pairs(config),
        microdata=r.microdata,
        max_total_epsilon=r.max_total_epsilon,
    )
    approval = Approval(
        release=name,
        by_hand=approval_mode(config, deployed=False),
        deployed=approval_mode(config, deployed=True),
        timeout=r.approval_timeout or DEFAULT_APPROVAL_TIMEOUT,
        max_total_epsilon=r.max_total_epsilon,
    )
    # the config's part of what every stage given the secret draw takes, and of the measuring stage's own
    # parameters (flows.release.release_params: key order kept, they are in the stages' cache keys)
    secret = {
        "max_distance": r.max_distance,
        "max_total_epsilon": r.max_total_epsilon,
        "require_cap": r.microdata is not None,  # real people: a population's first release sets its cap
        "release_key": release_key(config),
    }
    measure = {
        "n_individuals": r.simulated_individuals,
        "eps_counts": r.eps_counts,
        "eps_prior": r.eps_prior,
        "prior_source": r.prior_source,
        "protection_radius": p.protection_radius,
        "max_stretch": p.max_stretch,
        "allow_unprotected": p.allow_unprotected,
    }
    params = stage_params(config)
    return RunPlan(
        release_name=name,
        title=run_title(config),
        tags=tuple(run_tags(config)),
        store_root=store_root(config),
        steps=tuple(stage_plan(config)),
        stage_params=params,
        # each read named by its stage (the declaration's own rule, Stage.upstream, over {stage: stage})
        reads={st.name: st.upstream(config, {s: s for s in st.inputs.values()}) for st in contract.STAGES},
        privacy=privacy,
        approval=approval,
        prior_source=r.prior_source,
        public_prior=copy.deepcopy(params.get("prior")),  # None: the prior reads the secret table, or none runs
        secret_params=secret,
        measure_params=measure,
        simulated_individuals=r.simulated_individuals,
        dataset_inputs=tuple(str(f) for f in dataset_kinds.input_files(config.dataset.kind, config.dataset.params)),
        user_universe=bool(dataset_kinds.user_universe(config.dataset.kind, config.dataset.params)),
        timeouts={st.name: getattr(run.timeouts, st.name, None) for st in contract.STAGES},
        runner=Runner(run.task_runner, run.dask_address, run.max_workers),
        keep_releases=run.keep_releases,
        config_json=config.model_dump(mode="json"),
    )


def all_pairs(cfg: ReleaseFlowConfig) -> bool:
    """``[solve] all_pairs``: the mechanism is certified over every pair of a component in the metric (issue 51)."""
    return bool(cfg.solve.solver_settings().get("all_pairs", False))


def run_title(config: ReleaseFlowConfig) -> str:
    """The flow run's name: ``<release name>-<hash8 of the config>``, e.g. grid-eps10-benders-1a2b3c4d; the secret
    table hashed as its role, not its path: the flow run's parameter holds it sealed (``private-path:<tag>``,
    :func:`flows.door.sealed_config`), the run's process holds the path, and both name one title."""
    if config.release.microdata is not None:
        release = config.release.model_copy(update={"microdata": SECRET_TABLE})
        config = config.model_copy(update={"release": release})
    return f"{release_name(config)}-{config_hash(config)[:8]}"


def run_tags(config: ReleaseFlowConfig) -> list[str]:
    """The run's tags: its dataset kind, method, release name and epsilon (``auto``: the data's)."""
    value = effective_epsilon(config)
    eps = "auto" if value is None else f"{value:g}"
    return [
        f"dataset:{config.dataset.kind}",
        f"method:{config.solve.method}",
        f"release:{release_name(config)}",
        f"eps:{eps}",
    ]


def _solve_section(cfg: ReleaseFlowConfig) -> dict[str, Any]:
    """[solve]: the method, HiGHS's and the repair's settings, the options of the chosen method set in [solve]."""
    s = cfg.solve
    return {"method": s.method, "solver": s.solver_settings(), **s.repair_settings(), "method_args": s.method_args()}


def _evaluate_section(cfg: ReleaseFlowConfig) -> dict[str, Any]:
    """[evaluate], and the solve it compares against (its own solves run with [solve]'s settings)."""
    s = cfg.solve
    return cfg.evaluate.model_dump() | {
        "method": s.method,
        "method_args": s.method_args(),
        "solver": s.solver_settings(),
        **s.repair_settings(),
    }


def _dataset_section(cfg: ReleaseFlowConfig) -> dict[str, Any]:
    """[dataset], and the content hash of each input file its parameters name."""
    inputs = {str(p): file_sha256(p) for p in dataset_kinds.input_files(cfg.dataset.kind, cfg.dataset.params)}
    return {"kind": cfg.dataset.kind, "params": cfg.dataset.params, "inputs": inputs}


def _file_columns(cfg: ReleaseFlowConfig) -> dict[str, Any]:
    """``{"drop_columns": [...]}``: the kind's :attr:`~mdp_core.declarations.dataset_kinds.Kind.file_columns`
    (sorted), or ``{}`` for a kind that has none (its export key as before)."""
    from mdp_core.declarations.dataset_kinds import DECLARED

    kind = DECLARED.get(cfg.dataset.kind)
    cols = sorted(kind.file_columns) if kind is not None else []
    return {"drop_columns": cols} if cols else {}


# How a config section becomes a stage's parameters (:attr:`mdp_core.declarations.contract.Stage.params`); any other
# section: its ``model_dump()``; ``"section.key"``: ``{key: value}``.
SECTION_PARAMS: dict[str, Callable[[ReleaseFlowConfig], dict[str, Any]]] = {
    "dataset": _dataset_section,
    "solve": _solve_section,
    "evaluate": _evaluate_section,
    # the release settings; the flow replaces them with release_params (and adds "prior") at the secret draw
    "release": lambda cfg: cfg.release.model_dump(mode="json", exclude_unset=True, exclude={"microdata"}),
    # eta as written, and the protection radius when eta is unset (the graph's eta is then at most the radius)
    # and [solve] all_pairs when set (the stretch is then 1 by certificate: graph.json's protection says so)
    # the dataset's epsilon, and the columns of a user's universe file the export stage never publishes (its kind's
    # file_columns: the export reads them here, not from every kind's declaration, so adding a kind moves no key)
    "privacy.epsilon": lambda cfg: {"epsilon": cfg.privacy.epsilon} | _file_columns(cfg),
    "privacy.eta": lambda cfg: cfg.privacy.graph_params() | ({"all_pairs": True} if all_pairs(cfg) else {}),
}


def section_params(cfg: ReleaseFlowConfig, section: str) -> dict[str, Any]:
    """The parameters a stage takes from config ``section`` (its declared ``params``: :data:`SECTION_PARAMS`)."""
    build = SECTION_PARAMS.get(section)
    if build is not None:
        return build(cfg)
    name, _, key = section.partition(".")
    if key:
        return {key: getattr(getattr(cfg, name), key)}
    return cast(dict[str, Any], getattr(cfg, name).model_dump())


def stage_params(cfg: ReleaseFlowConfig) -> dict[str, dict[str, Any]]:
    """Each cached stage's own parameters (what goes into its cache key besides upstream hashes), from the config
    section it declares (:attr:`mdp_core.declarations.contract.Stage.params`); a stage declaring none: ``{}``, but a
    stage that reads the secret table has its parameters set at the draw (:func:`flows.release.release_params`),
    except a prior that reads nothing secret (:func:`public_prior_params`)."""
    params = {
        st.name: section_params(cfg, st.params) if st.params else {}
        for st in contract.STAGES
        if st.cached and (st.params or not st.reads_secret)
    }
    if (prior := public_prior_params(cfg)) is not None:  # simulated people are drawn after it runs
        params["prior"] = prior
    return params


def public_prior_params(cfg: ReleaseFlowConfig) -> dict[str, Any] | None:
    """The ``prior`` stage's parameters when the prior reads nothing secret (``uniform`` or a public file):
    known before any draw, so the stage can run before the simulated people are drawn. None otherwise."""
    r = cfg.release
    if r.prior_source == "file":
        from mdp_core.problem.microdata import sha256_regular  # numpy / pandas: only for a prior file

        return {"source": "file", "file": r.prior, "file_sha256": sha256_regular(r.prior, "prior")}
    if r.prior_source == "uniform":
        return {"source": "uniform"}
    return None


def release_key(cfg: ReleaseFlowConfig) -> str:
    """What identifies a release of a draw for the budget's early check: the config without the parts that
    cannot change what is measured (run, name, store, evaluate, who approves, where the secret table was read
    from: the sealed table is the draw's)."""
    exclude: dict[str, Any] = {"run": True, "name": True, "store": True, "evaluate": True}
    exclude["release"] = {"approval", "approval_timeout", "microdata"}
    data = cfg.model_dump(mode="json", exclude=exclude)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def stage_plan(config: ReleaseFlowConfig) -> list[str]:
    """The steps of a run, in order, from the declarations (:data:`mdp_core.declarations.contract.STAGES`): each
    cached stage that runs for ``config`` (:meth:`~mdp_core.declarations.contract.Stage.runs`); ``"door"`` before
    the first stage that reads the secret table (the privacy door, the officer's approval, for real people the
    draw and the budget's early check); ``"draw"`` after the stage whose output defines the simulated table (the
    ``instance`` the secret-reading stages read: the draw of simulated people); then ``"points"`` (the side
    runs, :data:`~mdp_core.declarations.contract.SIDE_RUNS`: the evaluate stage's own solves, started on the task
    runner beside the stages that follow and collected for the stage that reads them)."""
    door = next(st.name for st in contract.STAGES if st.reads_secret)
    instance = instance_stage()
    steps: list[str] = []
    for st in contract.STAGES:
        if not st.cached:
            continue
        if st.name == door:
            steps.append("door")
        if st.runs(config):
            steps.append(st.name)
        if st.name == instance:
            steps += ["draw", "points"]
    return steps


def instance_stage() -> str:
    """The stage whose output the secret-reading stages read as ``instance`` (export)."""
    return next(st.inputs["instance"] for st in contract.STAGES if st.reads_secret and "instance" in st.inputs)


def as_plan(given: Any) -> RunPlan:
    """``given`` when it is a plan; a config planned (:func:`plan_run`): the stage loop
    (:func:`flows.release.run_stages`) is also called with a config by the tests' shared fixtures."""
    return given if isinstance(given, RunPlan) else plan_run(given)
