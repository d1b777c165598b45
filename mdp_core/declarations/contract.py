"""The release contract, declared once: the pipeline's stages and every file a release publishes.

Plain Python (no numerical import): the config (``flows/config.py``: ``StageName``, ``[run.timeouts]``), the
flow (``flows/release.py``: its stage order, the manifest's ``solve`` summary), the publication
(:func:`tasks.publish.released_files`), the audit (:mod:`mdp_core.release.audit`: which files a release
must carry, which it may publish, their allowed columns and keys, which stage wrote each) and the docs all
read these declarations. ``tests/test_contract.py`` builds a real release and checks that every file the
writers produce is exactly what is declared here (columns, Arrow types, JSON keys), and that nothing
undeclared sits in a release folder.

The privacy contract behind the declarations: a published file holds only public values -- no column or key
names a seed, a secret, a true value or a secret record id (:data:`FORBIDDEN`, checked by the audit on
every publication); the stages that read the agency's secret table are marked ``reads_secret`` (their
outputs are owner-only until published; docs/privacy.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mdp_core.declarations import dataset_kinds
from mdp_core.declarations.methods import REGISTRY, PartitionOptions, needs_partition
from mdp_core.declarations.options import specs
from mdp_core.declarations.solver_options import RepairOptions, SolverOptions
from mdp_core.declarations.tables import (  # noqa: F401  (re-exported: the contract's columns and files)
    AGGREGATE_COLUMNS,
    AGGREGATE_COLUMNS_BEFORE_41,
    AGGREGATES,
    COORDINATE,
    COSTS,
    COUNT_ERROR,
    EDGES,
    EVALUATION,
    INSTANCE_DIR,
    INSTANCE_TABLES,
    MECHANISM,
    MICRODATA,
    OUTPUTS,
    SECONDS,
    TRACE,
    TRACE_COLUMNS,
    UTILITY,
    Column,
    PublishedFile,
    cols,
)


# ----------------------------------------------------------------------------- stages
def _prior_released(config: Any) -> bool:
    """The prior stage runs unless the mechanism is optimised for the dataset's own prior."""
    return bool(config.release.prior_source != "dataset")


def _method_needs_partition(config: Any) -> bool:
    """The solve stage reads the partition only for a method that solves on one (benders)."""
    return needs_partition(config.solve.method)


SIDE_RUNS: tuple[str, ...] = ("evaluate_point",)  # the evaluate stage's own solves: cached task runs beside the stages


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: ``name`` (its ``[run.timeouts]`` key, ``refresh_from`` value and task name),
    ``doc`` (one line), ``reads_secret`` (reads the agency's secret microdata table: the privacy door is
    passed before the first such stage, and its parameters are set at the secret draw,
    ``flows.release.release_params``), ``cached`` (a cached Prefect task whose output the store keeps;
    ``release``, the publication, is not), ``task`` (its Prefect task, ``"module:attribute"``, imported by
    the flow: :data:`flows.release._TASKS`).

    What the flow derives from it (``flows.release.run_stages``): ``reads``, the upstream outputs its task
    takes, ``"keyword=stage"`` separated by spaces (``"partition"``: keyword and stage alike; a
    :data:`SIDE_RUNS` name: those runs' outputs, a list); ``params``, the config section its parameters come
    from (``"partition"``: the section, ``"privacy.eta"``: ``{"eta": ...}`` of it; ``""``: none; sections
    shaped by ``flows.plan.SECTION_PARAMS``); ``when``, the configs it runs for (None: every config; a
    stage that does not run gives None to its readers); ``reads_when``, reads given only for the configs
    where their predicate holds (else None)."""

    name: str
    doc: str
    reads_secret: bool = False
    cached: bool = True
    task: str = ""
    reads: str = ""
    params: str = ""
    when: Callable[[Any], bool] | None = None
    reads_when: tuple[tuple[str, Callable[[Any], bool]], ...] = ()

    def __post_init__(self) -> None:
        if not self.task:
            object.__setattr__(self, "task", f"tasks.{self.name}:{self.name}")

    @property
    def inputs(self) -> dict[str, str]:
        """{keyword of its task: the stage (or side runs) whose output it takes}, from ``reads``."""
        return {kw: source or kw for kw, _, source in (r.partition("=") for r in self.reads.split())}

    def runs(self, config: Any) -> bool:
        """Whether the stage runs for ``config`` (``when``)."""
        return self.when is None or bool(self.when(config))

    def upstream(self, config: Any, outputs: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments of its task: each read's output in ``outputs`` ({stage: output}; None for a
        stage that did not run, or a read ``reads_when`` leaves out for ``config``)."""
        given = dict(self.reads_when)
        return {
            kw: outputs.get(source) if kw not in given or given[kw](config) else None
            for kw, source in self.inputs.items()
        }


def check_stages(stages: tuple[Stage, ...]) -> None:
    """Every stage is named once and reads only earlier stages' outputs or a side run; its conditional reads are
    reads. ValueError otherwise (checked at import for :data:`STAGES`)."""
    seen: list[str] = []
    for st in stages:
        if st.name in seen or st.name in SIDE_RUNS:
            raise ValueError(f"stage {st.name!r} is declared twice")
        late = [s for s in st.inputs.values() if s not in seen and s not in SIDE_RUNS]
        if late:
            raise ValueError(f"stage {st.name!r} reads {late}: not an earlier stage")
        unknown = [kw for kw, _ in st.reads_when if kw not in st.inputs]
        if unknown:
            raise ValueError(f"stage {st.name!r}: reads_when names {unknown}, not among its reads")
        seen.append(st.name)


_DATASET, _GRAPH = "dataset=ingest", "graph"
STAGES: tuple[Stage, ...] = (
    Stage("ingest", "load the dataset kind's public universe of records and outputs", params="dataset"),
    Stage(
        "graph",
        "the eta-graph of records and its protection (components, stretch)",
        reads=_DATASET,
        params="privacy.eta",
    ),
    Stage(
        "prior",
        "the prior the mechanism is optimised for (uniform, a file, or a DP histogram)",
        True,
        reads=f"{_DATASET} {_GRAPH}",
        when=_prior_released,
    ),
    Stage(
        "partition",
        "the partition of the records (benders; the counts' zones)",
        reads=f"{_DATASET} {_GRAPH}",
        params="partition",
    ),
    Stage(
        "export",
        "the instance the mechanism is certified against (instance.json + 4 tables)",
        reads=f"{_DATASET} {_GRAPH} prior",
        params="privacy.epsilon",
    ),
    Stage(
        "solve",
        "the optimal mechanism, its certificate and bounds",
        reads="instance=export partition",
        params="solve",
        reads_when=(("partition", _method_needs_partition),),
    ),
    Stage(
        "measure",
        "perturbed microdata, DP counts and the release's provenance (the secret draw)",
        True,
        reads="instance=export mechanism=solve graph partition",
        params="release",
    ),
    Stage(
        "evaluate",
        "utility, baselines, the count-error curve and report.md",
        reads="instance=export mechanism=solve partition measure points=evaluate_point",
        params="evaluate",
    ),
    Stage(  # tasks.publish:publish; reads: the published outputs (tasks.publish.released_files)
        "publish",
        "sign, check at the door and publish runs/<run>/",
        cached=False,
        reads="mechanism=solve measure evaluate instance=export",
    ),
)
check_stages(STAGES)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)  # in run order
CACHED_STAGES: tuple[str, ...] = tuple(s.name for s in STAGES if s.cached)


# A stage's former names (the manifests, configs and command lines written before a rename keep working):
# ``postprocess`` is where the secret table is *measured* (in differential privacy, post-processing is what
# costs nothing), so it was renamed ``measure``; ``release`` (one of three modules of that name) is ``publish``
# (issue 42).
FORMER_STAGE_NAMES: dict[str, str] = {"postprocess": "measure", "release": "publish"}


def stage_name(name: str) -> str:
    """The current name of stage ``name`` (a former name maps to its stage's current one; others unchanged)."""
    return FORMER_STAGE_NAMES.get(name, name)


def stage_entry(stages: Any, name: str) -> Any:
    """A manifest's ``stages`` entry of stage ``name``, under its current name or a former one (None: absent)."""
    if not isinstance(stages, dict):
        return None
    if name in stages:
        return stages[name]
    return next((stages[old] for old, new in FORMER_STAGE_NAMES.items() if new == name and old in stages), None)


def stage(name: str) -> Stage:
    """The declared stage ``name`` (KeyError for an undeclared one)."""
    for s in STAGES:
        if s.name == name:
            return s
    raise KeyError(f"no stage {name!r} (one of {', '.join(STAGE_NAMES)})")


PROVENANCE = "release_provenance.json"
PROVENANCE_FORMAT = "mdp-release-provenance"
PROVENANCE_VERSION = 3  # what the pipeline writes: population, protection, the v3 guarantee and ledger
PROVENANCE_VERSIONS = (2, 3)  # v2: releases made before populations (still audited, with the v2 formulas)
FORBIDDEN = ("seed", "secret", "true_", "record_id")  # in no published column or provenance key
PRIOR_FILE = "file"  # the prior_source of a public prior file
PRIOR_SOURCES: tuple[str, ...] = ("dataset", "uniform", "dp", PRIOR_FILE)  # provenance prior_source values
MICRODATA_SOURCES = frozenset({"file", "simulated"})

SOLVE_KEYS = frozenset(
    "method status objective lower_bound upper_bound gap relative_gap iterations seconds solver options repair "
    "extra certificate mechanism_sha256 n_records n_outputs".split()
)
# the manifest's ``solve`` summary (flows.release.release_fields; plus ``auto``): these keys of solve.json
MANIFEST_SOLVE_KEYS = ("method", "status", "objective", "lower_bound", "upper_bound", "gap", "iterations", "seconds")
GUARANTEE_KEYS_V2 = frozenset({"epsilon_per_unit", "additive_epsilon", "distance_unit", "statement"})
GUARANTEE_KEYS = GUARANTEE_KEYS_V2 | {"stretch", "metric_epsilon_per_unit", "protection_radius"}
# optional (releases before issue 40 have none): the stretch over the pairs within the protection radius
GUARANTEE_KEYS_OPTIONAL = frozenset({"stretch_within_radius"})
LEDGER_KEYS_V2 = frozenset({"this_release", "total_so_far", "releases_so_far", "max_total_epsilon"})
LEDGER_KEYS = frozenset("population this_release total_so_far max_total_epsilon left ledger_seq ledger_head".split())
# optional (releases before issue 39 have none): the budget's decisions up to this release
LEDGER_KEYS_OPTIONAL = frozenset({"history"})
# each entry of the ledger's ``history`` (artifacts.private.PrivateStore.history): a cap, raise, lower or new budget
LEDGER_HISTORY_KEYS = frozenset("seq kind at by why cap spent_before spent_all_budgets".split())
PROTECTION_KEYS = frozenset(
    "n_components component_sizes stretch connected records_outside_largest worst_pair protection_radius "
    "max_stretch allow_unprotected unprotected_individuals snap_mean snap_max max_distance".split()
)
PROVENANCE_KEYS_V2 = frozenset(
    "format version mechanism_sha256 instance_json_sha256 microdata_sha256 aggregates_sha256 n_individuals "
    "microdata_source eps_counts counts_sensitivity eps_prior prior_source draw_commitment guarantee ledger".split()
)
PROVENANCE_KEYS = PROVENANCE_KEYS_V2 | {"population", "protection"}
# optional (releases before issue 49 have none): the sealed table's keyed handle, the plan figures' "table"
# and (issue 50) the budget and result of the DP mean of the people's error (people.measured_error; null: none)
PROVENANCE_KEYS_OPTIONAL = frozenset({"table", "eps_error", "people_error"})
PEOPLE_ERROR_KEYS = frozenset("estimate noise_scale epsilon lo hi step unit people_at".split())
# the manifest's ``privacy`` block (flows.release.release_fields); v3 adds the optional keys
PRIVACY_KEYS = frozenset(
    "mechanism_epsilon eta distance_unit certificate counts_epsilon prior_epsilon prior_source microdata_source "
    "n_individuals draw_commitment guarantee ledger".split()
)
PRIVACY_KEYS_V3_OPTIONAL = frozenset({"population", "protection"})
INSTANCE_KEYS = frozenset(
    "format schema_version epsilon eta distance_unit metric n_records n_outputs n_edges tables provenance".split()
)
# flows.manifest.new_manifest + the release flow's fields + released_files (publish_run)
MANIFEST_KEYS = frozenset(
    "format version run_name flow_run_id created_at config stages code_versions started_at refresh_from "
    "package_versions privacy solve released_files".split()
)
# optional: the officer's approval of the plan (flows/approval.py; [release] approval)
MANIFEST_KEYS_OPTIONAL = frozenset({"approval"})
APPROVAL_KEYS = frozenset("mode by at note plan_sha256 plan".split())  # plan: flows.approval.plan_figures
SIGNATURE_KEYS = frozenset("format version algorithm key_fingerprint signature signed_file signed_sha256".split())
# mdp_core.solvers.verify.Certificate.as_dict(): solve.json's and the manifest's privacy ``certificate``
CERTIFICATE_KEYS = frozenset(
    "passed epsilon max_realised_epsilon max_ratio_excess max_abs_violation worst_pair n_pairs n_violations "
    "n_infinite n_negative max_row_sum_error row_tol ratio_tol graph_check missing_edges distance_mismatches pairs "
    "n_metric_pairs".split()
)
# flows.manifest.stage_entry: one entry of the manifest's ``stages`` per stage the run used
STAGE_ENTRY_KEYS = frozenset("cache_key cache_hit artifact files wall_seconds compute_seconds".split())
# the distributions whose versions the manifest records (``package_versions``; flows.release.PACKAGES)
MANIFEST_PACKAGES = (
    "mdp-release",
    "prefect",
    "numpy",
    "scipy",
    "highspy",
    "pandas",
    "pyarrow",
    "osmnx",
    "gensim",
    "pydantic",
)
# solve.json: ``solver`` (HiGHS's name and version), ``repair`` (mdp_core.solvers.verify.RepairReport) and
# ``options`` (SolverOptions.as_dict() + the repair limit + the method's options: mdp_core.solvers.solve.solve)
SOLVER_KEYS = frozenset({"name", "version"})
REPAIR_KEYS = frozenset("applied max_mix components_mixed objective_before objective_after".split())
SOLVE_OPTION_KEYS = frozenset(
    s.name for cls in (SolverOptions, RepairOptions, *(m.options for m in REGISTRY.values())) for s in specs(cls)
)
# instance.json's ``provenance`` (mdp_core.problem.datasets: each loader's description of its public inputs)
INSTANCE_PROVENANCE_KEYS = frozenset("dataset generator parameters source road_graph seed cost".split())

# The Arrow type of every public records.parquet column a dataset kind may declare. Which columns exist is
# declared once, with the kinds (mdp_core.declarations.dataset_kinds.public_record_columns); a declared column
# without a type here is an error at import.
_RECORD_TYPES = {
    c.name: c
    for c in cols(
        "record_id:int64 prior:double lat:double lon:double row:int64 col:int64 road_osmid:int64 snap_km:double "
        "osmid:int64 word:large_string id:any n_merged:int64"
    )
}
_untyped = dataset_kinds.public_record_columns() - set(_RECORD_TYPES)
if _untyped:
    raise TypeError(f"records.parquet columns declared by a dataset kind without an Arrow type: {sorted(_untyped)}")
RECORD_COLUMNS = tuple(c for n, c in _RECORD_TYPES.items() if n in dataset_kinds.public_record_columns())

# ----------------------------------------------------------------------------- the JSON files' objects
ANY_KEY = "*"  # in a block's keys: a map whose keys are data (file names, sha256 per file)
FREE_FORM_DOC = (
    "computed from public inputs only and described where they are made, their keys not enumerated here: "
    "solve.json's extra (each method's diagnostics on the public instance; the manifest's solve.auto repeats "
    "its auto entry) and instance.json's provenance parameters, source and road_graph (each dataset loader's "
    "description of its public inputs)"
)
_PRIVACY_PARAMETERS = ("epsilon", "eta")  # dataset parameters set in [privacy], not dataset.params


def _solve_config_keys() -> frozenset[str]:
    """[solve]: the method, the shared HiGHS and repair options, every method's options (a partition method's
    partitioner options are [partition]'s): flows.config.SolveConfig."""
    keys = {"method"} | {s.name for cls in (SolverOptions, RepairOptions) for s in specs(cls) if s.exposed}
    partition = {s.name for s in specs(PartitionOptions)}
    for m in REGISTRY.values():
        keys |= {s.name for s in specs(m.options) if s.exposed and not (m.needs_partition and s.name in partition)}
    return frozenset(keys)


# The manifest's ``config`` (flows.config.ReleaseFlowConfig.model_dump(mode="json")), section by section;
# ``config.dataset.params``: DATASET_PARAMETER_KEYS of the config's dataset kind.
CONFIG_KEYS: dict[str, frozenset[str]] = {
    "config": frozenset("name dataset privacy partition solve release evaluate store run".split()),
    "config.dataset": frozenset({"kind", "params"}),
    "config.privacy": frozenset("epsilon eta protection_radius max_stretch allow_unprotected".split()),
    "config.partition": frozenset(s.key for s in specs(PartitionOptions) if s.exposed),
    "config.solve": _solve_config_keys(),
    "config.release": frozenset(
        "microdata population simulate max_distance n_individuals eps_counts prior eps_prior eps_error "
        "max_total_epsilon approval approval_timeout".split()
    ),
    "config.evaluate": frozenset("baselines eps_factors counts_eps counts_seeds".split()),
    "config.run": frozenset("task_runner dask_address max_workers timeouts keep_releases".split()),
    "config.run.timeouts": frozenset(STAGE_NAMES) | frozenset(FORMER_STAGE_NAMES),
}
# [dataset] params per kind: the kind's declared parameters but epsilon and eta (flows.config.DATASET_PARAMS)
DATASET_PARAMETER_KEYS: dict[str, frozenset[str]] = {
    kind: frozenset(s.name for s in specs(dataset_kinds.PARAMETERS[kind]) if s.name not in _PRIVACY_PARAMETERS)
    for kind in dataset_kinds.KINDS
}
_MAP = frozenset({ANY_KEY})
_ANY_STAGE = frozenset(STAGE_NAMES) | frozenset(FORMER_STAGE_NAMES)
MANIFEST_BLOCKS: dict[str, frozenset[str]] = {
    "": MANIFEST_KEYS | MANIFEST_KEYS_OPTIONAL,
    "approval": APPROVAL_KEYS,
    **CONFIG_KEYS,
    "stages": _ANY_STAGE,  # a manifest written before a rename names the stage as it was then
    **{f"stages.{s}": STAGE_ENTRY_KEYS for s in _ANY_STAGE},
    **{f"stages.{s}.files": _MAP for s in _ANY_STAGE},
    "code_versions": _ANY_STAGE,
    "package_versions": frozenset(MANIFEST_PACKAGES),
    "privacy": PRIVACY_KEYS | PRIVACY_KEYS_V3_OPTIONAL,
    "privacy.certificate": CERTIFICATE_KEYS,
    "privacy.guarantee": GUARANTEE_KEYS | GUARANTEE_KEYS_OPTIONAL,
    "privacy.ledger": LEDGER_KEYS | LEDGER_KEYS_V2 | LEDGER_KEYS_OPTIONAL,
    "privacy.ledger.history[]": LEDGER_HISTORY_KEYS,
    "privacy.protection": PROTECTION_KEYS,
    "solve": frozenset({*MANIFEST_SOLVE_KEYS, "auto"}),
    "released_files": _MAP,
}

PUBLISHED: tuple[PublishedFile, ...] = (
    MECHANISM,
    PublishedFile(
        "solve.json",
        "solve",
        True,
        keys=SOLVE_KEYS,
        volatile=SECONDS,
        doc="the solve and certificate",
        blocks={
            "": SOLVE_KEYS,
            "certificate": CERTIFICATE_KEYS,
            "solver": SOLVER_KEYS,
            "repair": REPAIR_KEYS,
            "options": SOLVE_OPTION_KEYS,
        },
        free=frozenset({"extra"}),
    ),
    MICRODATA,
    AGGREGATES,
    PublishedFile(
        PROVENANCE,
        "measure",
        True,
        keys=PROVENANCE_KEYS | PROVENANCE_KEYS_OPTIONAL,
        nested={
            "guarantee": GUARANTEE_KEYS | GUARANTEE_KEYS_OPTIONAL,
            "ledger": LEDGER_KEYS | LEDGER_KEYS_OPTIONAL,
            "protection": PROTECTION_KEYS,
        },
        doc="the release's provenance, guarantee and ledger (format v3)",
        blocks={
            "": PROVENANCE_KEYS | PROVENANCE_KEYS_OPTIONAL,
            "guarantee": GUARANTEE_KEYS | GUARANTEE_KEYS_OPTIONAL,
            "ledger": LEDGER_KEYS | LEDGER_KEYS_V2 | LEDGER_KEYS_OPTIONAL,
            "ledger.history[]": LEDGER_HISTORY_KEYS,
            "protection": PROTECTION_KEYS,
        },
    ),
    PublishedFile(
        f"{INSTANCE_DIR}/instance.json",
        "export",
        True,
        keys=INSTANCE_KEYS,
        doc="the certified instance's header",
        blocks={"": INSTANCE_KEYS, "tables": frozenset(INSTANCE_TABLES), "provenance": INSTANCE_PROVENANCE_KEYS},
        free=frozenset({"provenance.parameters", "provenance.source", "provenance.road_graph"}),
    ),
    TRACE,
    EVALUATION,
    UTILITY,
    COUNT_ERROR,
    PublishedFile(
        "report.md",
        "evaluate",
        True,
        volatile=SECONDS | {"approval"},  # a later approval of the same plan: approvals.json (issue 52)
        doc="the officer's page (claims: report_version 3; the officer's approval)",
    ),
    PublishedFile(
        f"{INSTANCE_DIR}/records.parquet",
        "export",
        True,
        RECORD_COLUMNS,
        all_columns=False,
        coordinates=True,
        name_exceptions=frozenset({"record_id"}),
        doc="the public universe of records",
    ),
    OUTPUTS,
    EDGES,
    COSTS,
    PublishedFile("*.png", "evaluate", False, doc="figures (top level)"),
    PublishedFile(
        "manifest.json",
        "publish",
        True,
        keys=MANIFEST_KEYS | MANIFEST_KEYS_OPTIONAL,
        volatile=frozenset({"run_name", "flow_run_id", "created_at", "started_at", "stages", "approval"}),
        listed=False,
        doc="the run manifest (every released file's sha256)",
        blocks=MANIFEST_BLOCKS,
        free=frozenset({"solve.auto", "approval.plan"}),  # approval.plan: flows.approval.plan_figures
    ),
    PublishedFile(
        "signature.json",
        "publish",
        False,
        keys=SIGNATURE_KEYS,
        volatile=frozenset({"signature", "signed_sha256"}),
        listed=False,
        doc="Ed25519 signature over manifest.json's bytes (mdp_core.release.signing)",
        blocks={"": SIGNATURE_KEYS},
    ),
    PublishedFile("public_key.pem", "publish", False, listed=False, doc="the agency's public key"),
)


# Beside manifest.json, not listed in it (they sign it): mdp_core.release.signing.SIGNATURE / PUBLIC_KEY.
SIGNATURE_FILES: tuple[str, ...] = tuple(f.path for f in PUBLISHED if not f.listed and f.path != "manifest.json")


def published(path: str) -> PublishedFile:
    """The declaration of the release file ``path`` (relative; a top-level ``*.png`` matches the figures'
    pattern). KeyError when a release publishes no such file."""
    for f in PUBLISHED:
        if f.matches(path):
            return f
    raise KeyError(f"{path!r} is not a file a release publishes")


def is_published(path: str) -> bool:
    """Whether a release publishes ``path`` (a declared file)."""
    return any(f.matches(path) for f in PUBLISHED)


def json_blocks(path: str, dataset_kind: str | None = None) -> dict[str, frozenset[str]]:
    """The declared objects of the published JSON file ``path`` ({dotted path: allowed keys}, see
    :attr:`PublishedFile.blocks`); for manifest.json with the config's ``dataset_kind``, its
    ``config.dataset.params`` (:data:`DATASET_PARAMETER_KEYS`; an undeclared kind: no parameter)."""
    blocks = dict(published(path).blocks)
    if path == "manifest.json":
        blocks["config.dataset.params"] = DATASET_PARAMETER_KEYS.get(str(dataset_kind), frozenset())
    return blocks
