"""The release configuration: typed (pydantic) so the Prefect UI renders it as a form, loadable from TOML.

Example (every key optional; these are the defaults of the built-in release)::

    name = "rome-grid"  # release name: run names, tags and UI artifact keys (unset: derived from the config)
    store = "artifacts/store"   # relative: against this file's folder; unset: the project's default store

    [dataset]
    kind = "grid"
    params = { rows = 10, cols = 20, n_outputs = 100, seed = 0 }

    [privacy]           # unset: the dataset's own values (grid: eps = 10 / km, eta = 2 km)
    epsilon = 10.0      # per distance unit (km for geo data)
    eta = 2.0           # neighbour threshold, distance unit

    [partition]
    method = "kmdv"     # kmdv | kmrec | kmadj | bsc
    subsets = 4
    seed = 0

    [solve]
    method = "lp"       # lp | benders | exp | laplace | constopt
    solver = "simplex"  # simplex | ipm
    threads = 0
    time_limit = 600.0  # seconds
    max_mix = 0.01      # largest uniform-mixing weight the exact repair may use
    gap_abs = 0.0       # Benders / colgen stopping: absolute gap (the paper uses 0.01) ...
    gap_rel = 1e-6      # ... or relative gap
    max_iterations = 500

    [release]
    # microdata = "people.csv"   # the agency's secret table (lat, lon | x0.. | record); unset: simulated people
    n_individuals = 10000        # simulated individuals (only without microdata)
    eps_counts = 1.0             # budget of the released counts of the true data (discrete Laplace + CBDP)
    prior = "dataset"            # dataset | uniform | dp (DP histogram of the microdata, eps_prior) | a file
    # max_total_epsilon = 30.0   # refuse a release that brings the table's ledger above this

    [evaluate]
    baselines = ["exp"]
    eps_factors = [1.0]                    # utility vs eps: e.g. [0.2, 0.5, 1.0] re-solves at eps * factor
    counts_eps = [0.05, 0.1, 0.5, 1.0, 2.0]  # count-error curve
    counts_seeds = 10

    [run]               # how the flow runs (not part of any cache key: results do not depend on it)
    task_runner = "thread"   # thread | dask
    dask_address = ""        # tcp://host:8786 of a running Dask scheduler; empty: a local Dask cluster
    max_workers = 2          # threads (thread runner) or local Dask workers
    timeouts = { solve = 3600 }   # per-stage timeout, seconds (unset: none)
"""

from __future__ import annotations

import ast
import os
import tomllib
import typing
from pathlib import Path
from typing import Any, Literal, Union, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

# Only modules that import no numerical library (a fully cached run never needs numpy, pandas, scipy or
# HiGHS): the option dataclasses are each option's one default and help text, the dataset loaders'
# signatures are read from their source (mdp_core.loaders).
from mdp_core import executor as executor_mod
from mdp_core import loaders
from mdp_core import options as opts
from mdp_core.errors import InputError
from mdp_core.methods import METHOD_NAMES, PARTITIONERS
from mdp_core.result import GapOptions
from mdp_core.solver_options import SOLVERS, SolverOptions

STRICT = ConfigDict(extra="forbid", strict=True)


# The pipeline stages, in order. ``refresh_from`` takes one: a Literal, so the flow's parameter schema
# is a JSON-schema enum and the UI shows a drop-down (an Enum class would shadow str.partition).
StageName = Literal["ingest", "graph", "prior", "partition", "export", "solve", "postprocess", "evaluate", "release"]
STAGE_NAMES: tuple[str, ...] = typing.get_args(StageName)


# ----------------------------------------------------------------------------- dataset parameters
# The loaders' parameters per kind as pydantic models, generated from the loaders' signatures
# (mdp_core.loaders reads them from the source: no loader is imported). Every parameter but epsilon and
# eta (the [privacy] section's) with its loader's type and default. They validate ``dataset.params`` and
# make the flow's parameter schema (the Prefect run form) show each kind's real fields.
PRIVACY_PARAMETERS = ("epsilon", "eta")
_TYPES: dict[str, Any] = {"int": int, "float": float, "str": str, "bool": bool, "None": type(None)}


def _annotation_type(text: str | None) -> Any:
    """A loader annotation as written (``"int | None"``) as the type pydantic checks; ``Any`` for what is
    not a plain int / float / str / bool / None or a union of those."""

    def convert(node: ast.expr) -> Any:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return Union[convert(node.left), convert(node.right)]  # noqa: UP007  (types built at run time)
        if isinstance(node, ast.Name):
            return _TYPES.get(node.id, Any)
        if isinstance(node, ast.Constant) and node.value is None:
            return type(None)
        return Any

    return Any if text is None else convert(ast.parse(text, mode="eval").body)


def _params_model(kind: str) -> type[BaseModel]:
    module, _, func = loaders.LOADER_PATHS[kind].partition(":")
    texts = loaders.parameter_annotations(kind)
    fields: dict[str, Any] = {
        name: (_annotation_type(texts[name]), ... if default is loaders.REQUIRED else default)
        for name, default in loaders.parameters(kind).items()
        if name not in PRIVACY_PARAMETERS
    }
    return create_model(
        f"{kind.capitalize()}Params",
        __config__=STRICT,
        __doc__=f"Parameters of the {kind!r} dataset: the arguments of {module}.{func} (unset: its default).",
        **fields,
    )


DATASET_PARAMS: dict[str, type[BaseModel]] = {kind: _params_model(kind) for kind in loaders.KINDS}


def _dataset_variant(kind: str) -> type[BaseModel]:
    """``{kind: "<kind>", params: <Kind>Params}``: one arm of the dataset section's JSON schema."""
    return create_model(
        f"{kind.capitalize()}Dataset",
        __config__=STRICT,
        kind=(cast(Any, Literal[kind]), kind),  # a type built at run time (pydantic's stubs want a TypeForm)
        params=(DATASET_PARAMS[kind], Field(default={}, description="unset parameters take the loader's default")),
    )


# The dataset section as a union discriminated by ``kind``: the JSON schema Prefect's run form shows.
_DATASET_SCHEMA: TypeAdapter[Any] = TypeAdapter(
    cast(Any, typing.Annotated[Union[tuple(_dataset_variant(k) for k in loaders.KINDS)], Field(discriminator="kind")])  # noqa: UP007
)


class DatasetConfig(BaseModel):
    """Which dataset to ingest: a kind of ``mdp_core.datasets.registry`` and its loader parameters.

    ``params`` holds the parameters given (unset ones take the loader's default; the ingest stage's cache
    key is what was given), checked against the kind's :data:`DATASET_PARAMS` model: a parameter the
    loader does not take, a missing required one or a wrong type is an error naming it. The JSON schema
    (Prefect's run form) is the union of those models, discriminated by ``kind``."""

    model_config = STRICT
    kind: Literal[loaders.KINDS] = "grid"  # type: ignore[valid-type]
    params: dict[str, Any] = Field(default_factory=lambda: {"rows": 10, "cols": 20, "n_outputs": 100, "seed": 0})

    @field_validator("params")
    @classmethod
    def _typed_params(cls, v: dict[str, Any], info: Any) -> dict[str, Any]:
        clash = sorted(set(PRIVACY_PARAMETERS) & set(v))
        if clash:
            raise PydanticCustomError(
                "dataset_params", "set {clash} in [privacy], not in dataset.params", {"clash": clash}
            )
        kind = info.data.get("kind")
        if kind not in DATASET_PARAMS:
            return v  # the kind itself is wrong: that error is reported
        unknown = sorted(set(v) - set(DATASET_PARAMS[kind].model_fields))
        if unknown:
            raise PydanticCustomError(
                "dataset_params",
                "unknown parameter(s) {unknown} for kind {kind}",
                {"unknown": unknown, "kind": repr(kind)},
            )
        try:
            DATASET_PARAMS[kind].model_validate(v)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise PydanticCustomError(
                "dataset_params",
                "{where}: {msg} (kind {kind})",
                {"where": where, "msg": first["msg"], "kind": repr(kind)},
            ) from None
        return v

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema = handler(_DATASET_SCHEMA.core_schema)
        schema.update(title=cls.__name__, description=(cls.__doc__ or "").split("\n")[0])
        return schema


class PrivacyConfig(BaseModel):
    """eps and eta in the dataset's distance unit; unset (None) = the dataset loader's own value
    (e.g. the text loader scales eta to the vectors' norms)."""

    model_config = STRICT
    epsilon: float | None = Field(None, gt=0, allow_inf_nan=False, description="privacy budget per distance unit")
    eta: float | None = Field(None, gt=0, allow_inf_nan=False, description="neighbour threshold (distance unit)")


class PartitionConfig(BaseModel):
    """Benders' partition (``BendersOptions``: partition, n_subsets, seed). The release uses 4 subsets,
    not Benders' own 25 (the paper's M): on a small machine M = 2..4 is what pays off (README).

    The default partitioner, seed and help texts are ``BendersOptions``' own, written out: importing
    mdp_core.benders costs HiGHS, scipy and pandas (0.6 s), which no config and no cached run needs.
    tests/test_config.py checks they agree."""

    model_config = STRICT
    method: Literal[PARTITIONERS] = Field(  # type: ignore[valid-type]
        "kmdv", description="partitioner (mdp_core.partition.PARTITIONERS)"
    )
    subsets: int = Field(4, ge=1, le=10_000, description="number of subsets M")
    seed: int = Field(0, description="partitioner seed")


class SolveConfig(BaseModel):
    """The [solve] section: the method (``mdp_core.solve.METHODS``), HiGHS settings (``SolverOptions``)
    and the gap (``GapOptions``) with their defaults and help texts. Two release defaults differ from
    the methods' own on purpose: time_limit 600 s (a release must end; solvers default to none) and
    max_iterations 500 (Benders: 1000, colgen: 200)."""

    model_config = STRICT
    method: Literal[METHOD_NAMES] = Field(  # type: ignore[valid-type]
        "auto", description="auto: lp or rowgen from the instance's structure (mdp_core.auto); or a named method"
    )
    solver: Literal[SOLVERS] = Field(  # type: ignore[valid-type]
        opts.default(SolverOptions, "solver"), description=opts.help_text(SolverOptions, "solver")
    )
    threads: int = Field(
        opts.default(SolverOptions, "threads"), ge=0, le=256, description=opts.help_text(SolverOptions, "threads")
    )
    time_limit: float = Field(600.0, gt=0, allow_inf_nan=False, description=opts.help_text(SolverOptions, "time_limit"))
    max_mix: float = Field(
        0.01, ge=0, le=1, description="largest uniform-mixing weight the exact repair may use (as --max-mix)"
    )
    gap_abs: float = Field(opts.default(GapOptions, "gap_abs"), ge=0, description=opts.help_text(GapOptions, "gap_abs"))
    gap_rel: float = Field(opts.default(GapOptions, "gap_rel"), ge=0, description=opts.help_text(GapOptions, "gap_rel"))
    max_iterations: int = Field(500, ge=1, description="Benders / colgen: master solves at most")
    executor: Literal[executor_mod.EXECUTORS] = Field(  # type: ignore[valid-type]
        "auto",
        description="where independent solves run (Benders subproblems, colgen pricing): auto, serial, process, dask",
    )
    scheduler: str | None = Field(
        None, description="with executor = dask: a scheduler address (tcp://host:8786); unset: a local Dask cluster"
    )

    def solver_options(self) -> SolverOptions:
        return SolverOptions(solver=self.solver, threads=self.threads, time_limit=self.time_limit)


PRIOR_SOURCES = ("dataset", "uniform", "dp")


class ReleaseConfig(BaseModel):
    """What is released and how it is accounted. ``microdata``: the agency's secret table (CSV or
    Parquet, one row per individual: ``lat, lon`` / ``x0..`` / ``record``; :mod:`mdp_core.microdata`);
    unset: ``n_individuals`` simulated individuals (a demo). The randomness that protects individuals
    comes from OS entropy, kept in the store's private part: there is no seed to set."""

    model_config = STRICT
    microdata: str | None = Field(None, description="the agency's secret microdata file (.csv / .parquet)")
    max_distance: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="farthest an individual may lie from its record; unset: eta"
    )
    n_individuals: int = Field(10_000, ge=1, le=100_000_000, description="simulated individuals (no microdata)")
    eps_counts: float = Field(1.0, gt=0, allow_inf_nan=False, description="budget of the released true-data counts")
    prior: str = Field(
        "dataset",
        description="prior the mechanism is optimised for: dataset | uniform | dp (a DP histogram of the "
        "microdata, spending eps_prior) | a public .csv/.parquet file with a 'prior' column (N rows)",
    )
    eps_prior: float = Field(0.1, gt=0, allow_inf_nan=False, description="budget of the DP prior (prior = dp)")
    max_total_epsilon: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="refuse a release that brings the table's total spend above this"
    )

    @model_validator(mode="before")
    @classmethod
    def _no_seed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "seed" in data:
            raise PydanticCustomError(
                "seed_removed",
                "release.seed is no longer accepted: the randomness that protects individuals comes from OS "
                "entropy and is kept in the store's private part (remove the key)",
            )
        return data

    @model_validator(mode="after")
    def _consistent(self) -> ReleaseConfig:
        if self.microdata is not None and "n_individuals" in self.model_fields_set:
            raise ValueError("n_individuals is for simulated individuals: with microdata, the file sets n")
        if self.prior == "dp" and self.microdata is None:
            raise ValueError("prior = 'dp' is a DP histogram of the microdata: set microdata")
        if self.prior not in PRIOR_SOURCES and not self.prior.lower().endswith((".csv", ".parquet", ".pq")):
            raise ValueError(
                f"prior must be one of {list(PRIOR_SOURCES)} or a .csv / .parquet file, got {self.prior!r}"
            )
        return self

    @property
    def prior_source(self) -> str:
        return self.prior if self.prior in PRIOR_SOURCES else "file"


Baseline = Literal["exp", "laplace", "constopt", "lp", "rowgen", "colgen", "benders"]
_DEFAULT_BASELINES: list[Baseline] = ["exp"]


class EvaluateConfig(BaseModel):
    """Baselines compared with the released mechanism; the utility-vs-eps sweep (each mechanism
    re-solved at eps * factor); the eps_counts values and seeds of the count-error curve."""

    model_config = STRICT
    baselines: list[Baseline] = Field(default_factory=lambda: list(_DEFAULT_BASELINES))
    # Default: no sweep. Each factor re-solves every mechanism; small eps makes the LP much harder
    # (the 10 x 20 grid at eps = 2 / km takes ~75 s against ~5 s at eps = 10 / km).
    eps_factors: list[float] = Field(default_factory=lambda: [1.0])
    counts_eps: list[float] = Field(default_factory=lambda: [0.05, 0.1, 0.5, 1.0, 2.0])
    counts_seeds: int = Field(10, ge=1, le=1000)

    @field_validator("eps_factors", "counts_eps")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        if any(not (x > 0 and x != float("inf")) for x in v):
            raise ValueError("values must be finite and > 0")
        return v


class TimeoutsConfig(BaseModel):
    """Per-stage timeout in seconds (None: no limit). A stage that exceeds it fails the run."""

    model_config = STRICT
    ingest: float | None = Field(None, gt=0)
    graph: float | None = Field(None, gt=0)
    prior: float | None = Field(None, gt=0)
    partition: float | None = Field(None, gt=0)
    export: float | None = Field(None, gt=0)
    solve: float | None = Field(None, gt=0)
    postprocess: float | None = Field(None, gt=0)
    evaluate: float | None = Field(None, gt=0)
    release: float | None = Field(None, gt=0)


class RunConfig(BaseModel):
    """How the flow runs: task runner and timeouts. Results never depend on it (no cache key does)."""

    model_config = STRICT
    task_runner: Literal["thread", "dask"] = "thread"
    dask_address: str = Field("", description="tcp://host:port of a Dask scheduler; empty: a local Dask cluster")
    max_workers: int = Field(2, ge=1, le=256, description="threads, or workers of a local Dask cluster")
    timeouts: TimeoutsConfig = Field(default_factory=TimeoutsConfig)
    keep_releases: int | None = Field(
        None, ge=1, description="keep the newest N release folders of the store (and runs/latest's); unset: all"
    )


class ReleaseFlowConfig(BaseModel):
    """Everything a release depends on. Same config + same code + same inputs -> same artifacts."""

    model_config = STRICT
    name: str | None = Field(
        None,
        pattern=r"^[a-z0-9][a-z0-9-]{0,62}$",
        description="release name (lowercase, digits, dashes): run names, tags, UI artifact keys; unset: derived",
    )
    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    partition: PartitionConfig = Field(default_factory=PartitionConfig)
    solve: SolveConfig = Field(default_factory=SolveConfig)
    release: ReleaseConfig = Field(default_factory=ReleaseConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    store: str | None = Field(None, description="artifact store root; unset: the project's default store")
    run: RunConfig = Field(default_factory=RunConfig)


def default_store() -> Path:
    """The store used when a config names none: ``$MDP_RELEASE_STORE``, else ``artifacts/store`` in
    this checkout (an editable install), else ``~/.mdp-release/store``. Never the working directory."""
    env = os.environ.get("MDP_RELEASE_STORE")
    if env:
        return Path(env).expanduser().resolve()
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and os.access(root, os.W_OK):
        return root / "artifacts" / "store"
    return Path.home() / ".mdp-release" / "store"


def store_root(cfg: ReleaseFlowConfig) -> Path:
    """Absolute store root of ``cfg`` (a relative ``store`` is taken against the working directory;
    :func:`load_config` has already made a config file's relative paths absolute). InputError for a root
    that is no place for a store (``/``, a home or system folder: :func:`artifacts.store.check_root`)."""
    from artifacts.store import check_root

    return check_root(Path(cfg.store).expanduser().resolve() if cfg.store else default_store())


def release_name(cfg: ReleaseFlowConfig) -> str:
    """``cfg.name`` or a name derived from the config: ``<kind>-eps<eps>-<method>``."""
    if cfg.name:
        return cfg.name
    eps = effective_epsilon(cfg)
    label = "auto" if eps is None else f"{eps:g}".replace(".", "p").replace("+", "")
    return f"{cfg.dataset.kind}-eps{label}-{cfg.solve.method}".lower()


def effective_epsilon(cfg: ReleaseFlowConfig) -> float | None:
    """``privacy.epsilon``, else the dataset loader's default (grid: 10 / km); None when the loader
    derives it from the data (text)."""
    if cfg.privacy.epsilon is not None:
        return cfg.privacy.epsilon
    try:
        value = loaders.parameters(cfg.dataset.kind).get("epsilon")
    except Exception:
        return None
    return float(value) if isinstance(value, int | float) else None


def config_hash(cfg: ReleaseFlowConfig) -> str:
    """sha256 of what the release depends on (the config without ``run``/``name``/``store``)."""
    import hashlib
    import json

    data = cfg.model_dump(mode="json", exclude={"run", "name", "store"})
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


# Names a file parameter may take that are not paths (bundled data sets: mdp_core.loaders.BUNDLED; GloVe).
_NOT_PATHS = loaders.NAMES | {"glove-6b-50d"}


def _absolute_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """``data`` with its relative paths (``store``, the dataset's input files) made absolute against
    ``base`` (the config file's folder), so the config means the same from any working directory."""
    data = dict(data)
    if isinstance(data.get("store"), str) and data["store"] and not Path(data["store"]).expanduser().is_absolute():
        data["store"] = str((base / data["store"]).resolve())
    ds = data.get("dataset")
    if isinstance(ds, dict) and isinstance(ds.get("params"), dict):
        kind = ds.get("kind", "grid")
        params = dict(ds["params"])
        for n in loaders.FILE_PARAMETERS.get(kind, ()):
            v = params.get(n)
            if isinstance(v, str) and v and v.lower() not in _NOT_PATHS and not Path(v).expanduser().is_absolute():
                params[n] = str((base / v).resolve())
        data["dataset"] = dict(ds, params=params)
    rel = data.get("release")
    if isinstance(rel, dict):
        rel = dict(rel)
        for key in ("microdata", "prior"):
            v = rel.get(key)
            if isinstance(v, str) and v and v not in PRIOR_SOURCES and not Path(v).expanduser().is_absolute():
                rel[key] = str((base / v).resolve())
        data["release"] = rel
    return data


def _explain(exc: ValidationError, source: str) -> InputError:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
    more = f" (and {len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else ""
    return InputError(f"{source}: {where}: {msg}{more}")


def parse_config(data: dict[str, Any], source: str = "config") -> ReleaseFlowConfig:
    """Validate a config mapping; raises InputError naming the first bad key."""
    try:
        return ReleaseFlowConfig.model_validate(data)
    except ValidationError as exc:
        raise _explain(exc, source) from None


def load_config(path: str | Path | None) -> ReleaseFlowConfig:
    """Read a TOML config (None -> the built-in default release)."""
    if path is None:
        return ReleaseFlowConfig()
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such config file")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{p}: not valid TOML ({exc})") from None
    return parse_config(_absolute_paths(data, p.resolve().parent), str(p))


def as_config(value: Any) -> ReleaseFlowConfig:
    """A flow-run parameter (a model, or its JSON form as the API stores it) as a config."""
    if isinstance(value, ReleaseFlowConfig):
        return value
    if value is None:
        return ReleaseFlowConfig()
    return ReleaseFlowConfig.model_validate(value, strict=False)


def manifest_draw(path: str | Path) -> str | None:
    """The public commitment of the secret draw a run manifest's release used (None before draws existed)."""
    from mdp_core.files import read_json

    value = (read_json(path).get("privacy") or {}).get("draw_commitment")
    return value if isinstance(value, str) else None


def manifest_config(path: str | Path) -> ReleaseFlowConfig:
    """The config recorded in a run manifest (to re-run a release)."""
    from mdp_core.files import read_json

    m = read_json(path)
    if m.get("format") != "mdp-release-manifest" or "config" not in m:
        raise InputError(f"{path}: not an mdp-release run manifest")
    return parse_config(m["config"], f"{path}: config")
