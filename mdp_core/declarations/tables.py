"""The Parquet tables a release publishes, declared once: their columns, in written order, and Arrow types.

Registry-free on purpose (plain Python, no import of :mod:`mdp_core.declarations.methods` or
:mod:`mdp_core.declarations.dataset_kinds`): the writers (:func:`mdp_core.problem.io.write_published`), the solvers (their
:data:`TRACE_COLUMNS`), :mod:`mdp_core.release.evaluate` and :mod:`mdp_core.release.postprocess` read these
declarations without reading every method and dataset kind, so a stage's cache key (``tasks/cache.py``) still
holds only the entries it uses. :mod:`mdp_core.declarations.contract` re-exports them in ``PUBLISHED`` (the same
objects) beside the files whose columns depend on the registries (``records.parquet``: the kinds' columns).
No module keeps its own copy of a column list (``tests/test_writers.py``).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field


# ----------------------------------------------------------------------------- columns and files
@dataclass(frozen=True)
class Column:
    """A published Parquet column: its ``name``, Arrow type (``str(pyarrow type)``, e.g. ``int64``,
    ``double``, ``large_string``, ``bool``; None: depends on the input, e.g. a points file's ``id``) and doc."""

    name: str
    dtype: str | None
    doc: str = ""


@dataclass(frozen=True)
class PublishedFile:
    """A file of a release folder.

    ``path``: relative to the folder (a top-level ``*.png`` pattern for figures); ``stage``: the stage whose
    output holds it (under its last path component, :attr:`file`); ``required``: every release lists it.
    ``columns`` (Parquet: the allowed columns in written order) or ``keys`` (JSON: the top-level keys;
    ``nested``: {key: keys of that object}); ``volatile``: columns / keys (report claims) whose values differ
    between two identical re-runs (wall-clock seconds, timestamps). ``all_columns``: the writer writes every
    declared column (else a subset: a method's trace, a dataset kind's records); ``ordered``: in this order;
    ``coordinates``: may also hold the euclidean coordinates ``x0, x1, ...`` (double); ``name_exceptions``:
    public columns whose names hold a :data:`FORBIDDEN` fragment. ``listed``: listed in the manifest's
    ``released_files`` (False: manifest.json and the signature files beside it). ``blocks`` (JSON): every
    object of the file, by dotted path from the top (``""``), with the keys it may hold (:data:`ANY_KEY`: a
    map whose keys are data, e.g. file names; its values under ``<path>.*``); ``free``: the paths of objects
    whose keys are not enumerated here (:data:`FREE_FORM_DOC`); ``<path>[]``: the keys of each object of a list
    at ``path``. A key the blocks do not allow is a finding of the audit, and so is an object where a block
    declares a value (:func:`json_blocks`)."""

    path: str
    stage: str
    required: bool
    columns: tuple[Column, ...] | None = None
    keys: frozenset[str] | None = None
    volatile: frozenset[str] = frozenset()
    doc: str = ""
    nested: dict[str, frozenset[str]] = field(default_factory=dict)
    all_columns: bool = True
    ordered: bool = False
    coordinates: bool = False
    name_exceptions: frozenset[str] = frozenset()
    listed: bool = True
    blocks: dict[str, frozenset[str]] = field(default_factory=dict)
    free: frozenset[str] = frozenset()

    @property
    def file(self) -> str:
        """The file's name in its stage's output (``instance/edges.parquet`` -> ``edges.parquet``)."""
        return self.path.rpartition("/")[2]

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns or ())

    def matches(self, name: str) -> bool:
        """``name`` (relative path) is this file (a pattern matches top-level names only)."""
        if "*" not in self.path:
            return name == self.path
        return "/" not in name and fnmatch.fnmatchcase(name, self.path)


def cols(spec: str, doc: str = "") -> tuple[Column, ...]:
    """Columns from ``"name:type name:type ..."`` (type ``any``: None)."""
    out = []
    for item in spec.split():
        name, _, dtype = item.partition(":")
        out.append(Column(name, None if dtype == "any" else dtype, doc))
    return tuple(out)


COORDINATE = re.compile(r"x\d+")  # euclidean coordinates x0, x1, ...; haversine ones are lat, lon
INSTANCE_DIR = "instance"
INSTANCE_TABLES = ("records.parquet", "outputs.parquet", "edges.parquet", "costs.parquet")
SECONDS = frozenset({"seconds"})

# trace.parquet: the columns of each method's trace, in its written order (mdp_core.solvers.<method>.TRACE_COLUMNS)
TRACE_COLUMNS: dict[str, tuple[str, ...]] = {
    "benders": tuple(
        "iteration lower_bound upper_bound gap optimality_cuts penalised_subproblems slack heuristic_upper_bound rho "
        "master_seconds sub_max_seconds sub_total_seconds master_rows elapsed_seconds".split()
    ),
    "colgen": tuple(
        "iteration lower_bound pricing_bound upper_bound gap columns_added master_seconds pricing_seconds".split()
    ),
    "rowgen": tuple(
        # lp_tolerance: the round's interior point relative gap tolerance (NaN for simplex)
        "iteration lower_bound upper_bound gap rows rows_added lp_seconds seconds lp_tolerance".split()
    ),
}
# the Arrow types of the traces' columns (rowgen's; any: each method's own)
_TRACE_TYPES = {
    c.name: c
    for c in cols(
        "iteration:int64 lower_bound:double upper_bound:double gap:double rows:int64 rows_added:int64 "
        "lp_seconds:double seconds:double"
    )
}
_TRACE_UNION = tuple(dict.fromkeys(c for names in TRACE_COLUMNS.values() for c in names))

MECHANISM = PublishedFile(
    "mechanism.parquet", "solve", True, cols("i:int64 k:int64 prob:double"), doc="the mechanism z_ik, long form"
)
MICRODATA = PublishedFile(
    "microdata.parquet",
    "measure",
    True,
    cols("individual:int64 output_id:int64 output_record_id:int64 lat:double lon:double"),
    all_columns=False,
    coordinates=True,
    name_exceptions=frozenset({"output_record_id"}),
    doc="each individual's released output and its public coordinates (v2 also: individual)",
)
AGGREGATES = PublishedFile(
    "aggregates.parquet",
    "measure",
    True,
    cols(
        "level:large_string block:int64 label:large_string n_members:int64 count:int64 eps_counts:double "
        "noise:large_string noise_scale:double ci_level:double ci_low:int64 ci_high:int64 sim_low:int64 "
        "sim_high:int64"
    ),
    ordered=True,
    doc="DP counts (discrete Laplace) of the released outputs by level, with their intervals",
)
# aggregates.parquet's columns before the intervals (issue 41): a release published then still audits clean
AGGREGATE_COLUMNS_BEFORE_41 = AGGREGATES.column_names[: AGGREGATES.column_names.index("ci_level")]
AGGREGATE_COLUMNS = AGGREGATES.column_names  # issue 41 added ci_level ... sim_high: mdp_core.release.intervals
TRACE = PublishedFile(
    "trace.parquet",
    "solve",
    False,
    tuple(_TRACE_TYPES.get(n, Column(n, None)) for n in _TRACE_UNION),
    volatile=frozenset(
        "master_seconds sub_max_seconds sub_total_seconds elapsed_seconds pricing_seconds lp_seconds seconds".split()
    ),
    all_columns=False,
    doc="the TRACE_COLUMNS of mdp_core.solvers.benders, colgen or rowgen (one row per iteration; types: rowgen's)",
)
EVALUATION = PublishedFile(
    "evaluation.parquet",
    "evaluate",
    True,
    cols(
        "method:large_string n_records:int64 n_outputs:int64 n_edges:int64 lp_rows:int64 lp_nonzeros:int64 "
        "epsilon:double eta:double distance_unit:large_string expected_loss:double loss_q95:double "
        "loss_max:double dist_loss_mean:double dist_loss_q95:double dist_loss_max:double verified:bool "
        "realised_epsilon:double eps_tight:double eps_tight_delta:double gv_ratio:double gv_count:int64 "
        "gv_max:double gv_mean:double lower_bound:double gap:double relative_gap:double "
        "no_privacy_bound:double packing_bound:double packing_centers:int64 packing_radius:double "
        "adversary_error:double metric_epsilon:double dist_loss_se:double mc_samples:int64 seconds:double"
    ),
    volatile=SECONDS,
    doc="mdp_core.release.evaluate.COLUMNS: the released method, the baselines and planar Laplace at the "
    "release's rate within the protection radius (mdp_core.release.baseline)",
)
UTILITY = PublishedFile(
    "utility_vs_eps.parquet",
    "evaluate",
    True,
    cols("factor:double epsilon:double method:large_string expected_loss:double"),
    doc="each mechanism re-solved at eps x factor",
)
COUNT_ERROR = PublishedFile(
    "cbdp_error.parquet",
    "evaluate",
    False,
    cols(
        "eps_counts:double method:large_string mae_singletons:double mae_features:double weighted_l2:double "
        "n_repeats:int64"
    ),
    doc="mdp_core.release.postprocess.CURVE_COLUMNS: the count-error curve",
)
OUTPUTS = PublishedFile(
    f"{INSTANCE_DIR}/outputs.parquet",
    "export",
    True,
    cols("output_id:int64 record_id:int64 lat:double lon:double"),  # a user's output ids are never kept (issue 49)
    all_columns=False,
    coordinates=True,
    name_exceptions=frozenset({"record_id"}),
    doc="the outputs (each one record's public coordinates)",
)
EDGES = PublishedFile(
    f"{INSTANCE_DIR}/edges.parquet", "export", True, cols("i:int64 j:int64 distance:double"), doc="the eta-graph"
)
COSTS = PublishedFile(
    f"{INSTANCE_DIR}/costs.parquet", "export", True, cols("i:int64 k:int64 cost:double"), doc="the loss c_ik"
)
# every Parquet table declared here (records.parquet, whose columns the dataset kinds declare: in the contract)
PARQUET: tuple[PublishedFile, ...] = (
    MECHANISM,
    MICRODATA,
    AGGREGATES,
    TRACE,
    EVALUATION,
    UTILITY,
    COUNT_ERROR,
    OUTPUTS,
    EDGES,
    COSTS,
)


def table(path: str) -> PublishedFile:
    """The declaration of the Parquet table ``path`` (relative to a release folder: ``evaluation.parquet``,
    ``instance/edges.parquet``; an instance table also by its file name, ``edges.parquet``). KeyError for a table
    not declared here (``instance/records.parquet``: :func:`mdp_core.declarations.contract.published`)."""
    for f in PARQUET:
        if path in (f.path, f.file):
            return f
    raise KeyError(f"{path!r} is not a Parquet table declared in mdp_core.declarations.tables")
