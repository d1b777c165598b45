"""The release configuration: typed (pydantic) so the Prefect UI renders it as a form, loadable from TOML.

Example (every key optional; these are the defaults of the built-in release)::

    name = "rome-grid"  # release name: run names, tags and UI artifact keys (unset: derived from the config)
    store = "artifacts/store"   # relative: against this file's folder; unset: the project's default store

    [dataset]
    kind = "grid"
    params = { rows = 10, cols = 20, n_outputs = 100, seed = 0 }
    # params.loss (grid, road): the c_ik the mechanism minimises: "distance" (unset: the data's metric, what the
    # analyst measures) | "travel" (LR-Geo's travel-distance estimation cost, the papers' and the loaders' default)

    [privacy]           # unset: the dataset's own values (grid: eps = 10 / km, eta = 2 km)
    epsilon = 10.0      # per distance unit (km for geo data)
    eta = 2.0           # neighbour threshold, distance unit
    # protection_radius = 2.0  # distance (unit) within which two people are promised eps * stretch * d; unset: eta
    max_stretch = 2.0   # refuse a mechanism whose graph stretches distances more than this (spanner dilation)
    allow_unprotected = false  # true: release even when the graph is split or over max_stretch (officer told who)

    [partition]         # mdp_core.declarations.methods.PartitionOptions (Benders' partition)
    method = "kmdv"     # a partitioner of mdp_core.declarations.methods.PARTITIONERS
    subsets = 2
    seed = 0

    [solve]
    method = "auto"     # a method of mdp_core.declarations.methods.REGISTRY (docs/methods.md)
    solver = "simplex"  # simplex | ipm  (every method: mdp_core.declarations.solver_options)
    threads = 0
    # all_pairs = false   # unset: eps certified for every two records (one rate) where the method can (issue 51)
    # time_limit = 600.0  # seconds; unset: none
    max_mix = 0.01      # largest uniform-mixing weight the exact repair may use
    # gap_rel = 1e-2    # the chosen method's own options (mdp_core.declarations.methods), unset: its default
    #                   # (gap_rel: 1e-2 in a release, flows.config.RELEASE_GAP_REL);
    #                   # one it does not take is an error

    [release]           # REQUIRED in a config file: microdata + population, or simulate = true
    # microdata = "people.csv"   # the agency's secret table (lat, lon | x0.. | record)
    # population = "rome-residents"  # whose records these are, across versions of the table (with microdata)
    # max_total_epsilon = 30.0   # the population's privacy cap: required by its first release (the ledger
    #                            # keeps it; a lower value lowers it, a higher one is noted, never applied)
    simulate = true              # simulated people (a demo); neither this nor microdata is an error
    # n_individuals = 10000      # how many simulated people (only with simulate; unset: 10,000)
    eps_counts = 1.0             # budget of the released counts of the true data (discrete Laplace + CBDP)
    prior = "dataset"            # dataset | uniform | dp (DP histogram of the microdata, eps_prior) | a file
    # eps_error = 0.25           # a DP mean of the people's own error (unset: auto with prior = dp, else 0)
    # approval = "required"      # required | policy | none: a person approves the plan before the first
    #                            # charge (unset, microdata: policy when deployed or served, none in a terminal)
    # approval_timeout = 3600    # seconds to wait for it; then the run ends Refused, nothing measured

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
    # keep_releases = 5        # keep the newest 5 release folders of THIS release name (unset: all)

A config is what its author wrote, on every route: a TOML file (:func:`load_config`), a Prefect
parameter (serve / deploy / batch: :func:`to_parameter`, back with :func:`as_config`), a run manifest
(:func:`manifest_config`). Validation never depends on which keys were written (pydantic's
``model_fields_set``), so a full dump (a manifest's ``config``, the API's copy of a parameter) and the
written keys alone (:func:`to_parameter`) both validate to the same config. :func:`config_hash` is a
function of the meaning (every default included), never of what was written.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union, cast

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidationError,
    create_model,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

# Only the declarations, which import no numerical library (a fully cached run never needs numpy, pandas,
# scipy or HiGHS): each option's one name, type, default, help text and bounds (mdp_core.declarations.options).
from mdp_core.declarations import contract, dataset_kinds
from mdp_core.declarations.methods import COMPARABLE, METHOD_NAMES, REGISTRY, PartitionOptions
from mdp_core.declarations.options import REQUIRED, Spec, show, specs
from mdp_core.declarations.solver_options import RepairOptions, SolverOptions
from mdp_core.errors import InputError

STRICT = ConfigDict(extra="forbid", strict=True)


# The pipeline stages, in order (declared in mdp_core.declarations.contract). ``refresh_from`` takes one: a Literal, so
# the flow's parameter schema is a JSON-schema enum and the UI shows a drop-down (an Enum class would shadow
# str.partition).
StageName = Literal[contract.STAGE_NAMES]  # type: ignore[valid-type]
STAGE_NAMES: tuple[str, ...] = typing.get_args(StageName)


# ----------------------------------------------------------------------------- declared options as pydantic fields
def _field_type(s: Spec) -> Any:
    """The pydantic type of a declared option: its int / float / str / bool (a Literal of its choices), a
    list of it (TOML arrays), or None."""
    item: Any = Literal[s.choices] if s.choices else s.base
    members: list[Any] = [list[item]] if s.many else []
    if not s.many or (typing.get_origin(s.type) in (Union, types.UnionType) and s.base in typing.get_args(s.type)):
        members.append(item)  # a scalar too (``words = "king queen"``)
    if s.optional:
        members.append(type(None))
    return Union[tuple(members)] if len(members) > 1 else members[0]  # noqa: UP007  (types built at run time)


def _field(s: Spec, default: Any = REQUIRED, description: str | None = None) -> tuple[Any, Any]:
    """(type, Field) of option ``s`` in a config model: its declared default (infinity: unset, None), bounds
    and help. ``default``: instead of the declared one."""
    default = s.default if default is REQUIRED else default
    kw: dict[str, Any] = {} if s.many else dict(s.bounds)
    if s.base is float and not s.many:
        kw["allow_inf_nan"] = False
    tp = _field_type(s)
    if isinstance(default, float) and math.isinf(default):
        default, tp = None, tp | None
        description = f"{description or s.help}; unset: none"
    return tp, Field(... if default is REQUIRED else default, description=description or s.help, **kw)


# ----------------------------------------------------------------------------- dataset parameters
# The loaders' parameters per kind as pydantic models, generated from their declarations (mdp_core.declarations.dataset_kinds):
# every parameter but epsilon and eta (the [privacy] section's) with its declared type and default. They
# validate ``dataset.params`` and make the flow's parameter schema (the Prefect run form) show each kind's
# real fields.
PRIVACY_PARAMETERS = ("epsilon", "eta")


def _params_model(kind: str) -> type[BaseModel]:
    module, _, func = dataset_kinds.LOADER_PATHS[kind].partition(":")
    release = dataset_kinds.RELEASE_DEFAULTS[kind]  # a release's own defaults (loss = "distance"), not the loader's
    fields: dict[str, Any] = {
        s.name: _field(s)
        if s.name not in release
        else _field(
            s, release[s.name], f"{s.help}; unset: {release[s.name]!r} (the loader's own default: {s.default!r})"
        )
        for s in specs(dataset_kinds.PARAMETERS[kind])
        if s.name not in PRIVACY_PARAMETERS
    }
    return create_model(
        f"{kind.capitalize()}Params",
        __config__=STRICT,
        __doc__=f"Parameters of the {kind!r} dataset: the arguments of {module}.{func} (unset: its default).",
        **fields,
    )


DATASET_PARAMS: dict[str, type[BaseModel]] = {kind: _params_model(kind) for kind in dataset_kinds.KINDS}


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
    cast(
        Any,
        typing.Annotated[
            Union[tuple(_dataset_variant(k) for k in dataset_kinds.KINDS)],  # noqa: UP007
            Field(discriminator="kind"),
        ],
    )
)


DEFAULT_GRID_PARAMS = {"rows": 10, "cols": 20, "n_outputs": 100, "seed": 0}  # the default release's dataset


class DatasetConfig(BaseModel):
    """Which dataset to ingest: a kind of ``mdp_core.problem.datasets.registry`` and its loader parameters.

    ``params`` holds the parameters given; unset ones take the kind's release default (``loss = "distance"`` on
    grid and road: :meth:`loader_params`), else the loader's default. The ingest stage's cache key is what was
    given (its code version holds the defaults). They are checked against the kind's :data:`DATASET_PARAMS`
    model: a parameter the loader does not take, a missing required one or a wrong type or value is an error
    naming it. The JSON schema (Prefect's run form) is the union of those models, discriminated by ``kind``."""

    model_config = STRICT
    kind: Literal[dataset_kinds.KINDS] = "grid"  # type: ignore[valid-type]
    params: dict[str, Any] = Field(default_factory=lambda: dict(DEFAULT_GRID_PARAMS))

    @model_validator(mode="before")
    @classmethod
    def _params_of_the_kind(cls, data: Any) -> Any:
        """``params`` left out: the default grid's for the default kind (grid), none for any other kind (its
        loader's defaults; a required one missing is then an error naming it, not the grid's rows and cols)."""
        if isinstance(data, dict) and "params" not in data and data.get("kind", "grid") != "grid":
            return {**data, "params": {}}
        return data

    def loader_params(self) -> dict[str, Any]:
        """The parameters the release loads the dataset with: ``params`` and, where unset, the kind's release
        defaults (:data:`mdp_core.declarations.dataset_kinds.RELEASE_DEFAULTS`: ``loss = "distance"`` for grid and road,
        a release optimises the distance its analyst measures, issue 40); the rest take the loader's default."""
        return dataset_kinds.with_release_defaults(self.kind, self.params)

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
        try:
            dataset_kinds.validate(kind, v)
        except InputError as exc:
            raise PydanticCustomError("dataset_params", "{msg}", {"msg": str(exc)}) from None
        return v

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema = handler(_DATASET_SCHEMA.core_schema)
        schema.update(title=cls.__name__, description=(cls.__doc__ or "").split("\n")[0])
        return schema


# The default [privacy] max_stretch: the largest spanner dilation (max over pairs of D_G / d, D_G the
# shortest path in the mDP graph) accepted without ``allow_unprotected``. Measured (mdp_core.release.protection's
# docstring): 1.08 on the paper grids, 1.24-1.69 on the papers' synthetic N(0, 1) eta 2 (six seeds), 1.01 on
# Rome roads at eta 2 km, 1.18 on the Helsinki example; 3-6 on Rome at eta 0.4-0.5 km and 4.1 on GloVe text,
# where a pair is protected as if it were 3-6 times farther apart than it is. = mdp_core.release.protection's.
DEFAULT_MAX_STRETCH = 2.0


class PrivacyConfig(BaseModel):
    """eps and eta in the dataset's distance unit; unset (None) = the dataset loader's own value
    (e.g. the text loader scales eta to the vectors' norms).

    The guarantee in the data's own metric d (Bordenabe, Chatzikokolakis & Palamidessi, CCS 2014): a
    certified eps-mDP mechanism on the mDP graph gives e^{eps * stretch * d(i, j)} between any two records
    of one component, stretch = max over pairs of D_G / d. ``protection_radius`` is the distance within
    which the ledger charges that loss (eps x stretch x protection_radius); a graph split into several
    components or stretched beyond ``max_stretch`` is refused unless ``allow_unprotected``."""

    model_config = STRICT
    epsilon: float | None = Field(None, gt=0, allow_inf_nan=False, description="privacy budget per distance unit")
    eta: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="neighbour threshold (distance unit); unset: the protection radius when one is set (the rate "
        "asked for is then the rate charged), else the dataset's",
    )
    protection_radius: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="distance (unit) within which two people are protected: the ledger charges eps x stretch x "
        "this per release; unset: eta",
    )
    max_stretch: float = Field(
        DEFAULT_MAX_STRETCH,
        ge=1,
        allow_inf_nan=False,
        description="largest stretch (max over pairs of graph distance / metric distance) accepted without "
        "allow_unprotected",
    )
    allow_unprotected: bool = Field(
        False,
        description="release even when the mDP graph has several components or a stretch above max_stretch "
        "(the officer's summary says who is unprotected from whom)",
    )

    def graph_params(self) -> dict[str, Any]:
        """The graph stage's parameters: ``eta`` as written and, when it is unset and a protection radius is set,
        the radius (:func:`mdp_core.problem.graph.graph_eta`: the graph's eta is then the radius, so every pair within the
        radius is an edge and the stretch there is 1: the stated eps holds in the metric and is what the ledger
        charges, issues 40 and 50)."""
        unset_eta_radius = self.eta is None and self.protection_radius is not None
        return {"eta": self.eta} | ({"protection_radius": self.protection_radius} if unset_eta_radius else {})


# [partition]: Benders' partition options (mdp_core.declarations.methods.PartitionOptions), under their config keys.
PartitionConfig: type[BaseModel] = create_model(
    "PartitionConfig",
    __config__=STRICT,
    __doc__="Benders' partition, also the release's partition stage (mdp_core.declarations.methods.PartitionOptions).",
    **cast(dict[str, Any], {s.key: _field(s) for s in specs(PartitionOptions) if s.exposed}),
)
_PARTITION_FIELDS = {s.name for s in specs(PartitionOptions)}  # a needs_partition method takes them from [partition]
_COMMON = (SolverOptions, RepairOptions)


def method_option_specs(method: str) -> list[Spec]:
    """The [solve] options of ``method``: its declared options but the partition's (in [partition]) for a
    method that needs one (Method.needs_partition: Benders)."""
    skip = _PARTITION_FIELDS if REGISTRY[method].needs_partition else set()
    return [s for s in specs(REGISTRY[method].options) if s.exposed and s.name not in skip]


def release_all_pairs(method: str, given: bool | None) -> bool:
    """``[solve] all_pairs`` of a release: as ``given``; unset (None), on for a method that can certify every pair of
    a component in the metric (:attr:`mdp_core.declarations.methods.Method.all_pairs`: auto, lp, rowgen and the
    baselines private for every pair by construction), off for the others (issue 51). Every dataset kind's records
    carry coordinates of its metric (grid and road: lat, lon in haversine km; points, synthetic and text: x0..
    Euclidean), so a release states one rate, eps for any two records, unless it opts out (``all_pairs = false``)."""
    return REGISTRY[method].all_pairs if given is None else given


def _common_field(s: Spec) -> tuple[Any, Any]:
    """(type, Field) of an option every method shares in [solve]: its declaration's, but ``all_pairs``, whose
    release default depends on the method (:func:`release_all_pairs`; unset: None)."""
    if s.name != "all_pairs":
        return _field(s)
    help_ = (
        f"{s.help}; unset in a release: true for a method that can certify every pair "
        f"({', '.join(n for n, m in REGISTRY.items() if m.all_pairs)}), false for the others; false: certified on the "
        "mDP graph's edges only (eps within them, eps x the graph's stretch beyond)"
    )
    return bool | None, Field(None, description=help_)


def _method_fields() -> dict[str, tuple[Any, Any]]:
    """Every method's options as optional [solve] fields (unset: the chosen method's own default); one
    field for a name several methods declare, its description naming each one's default."""
    owners: dict[str, list[tuple[str, Spec]]] = {}
    for name in REGISTRY:
        for s in method_option_specs(name):
            owners.setdefault(s.name, []).append((name, s))
    fields = {}
    for name, entries in owners.items():
        first = entries[0][1]
        text = "; ".join(f"{m}: {s.help} (default {show(s.default)})" for m, s in entries)
        same = all(s.bounds == first.bounds for _, s in entries)
        tp, info = _field(first if same else dataclasses.replace(first, bounds={}), None, text)
        fields[name] = (tp | None, info)
    return fields


class _SolveBase(BaseModel):
    """The [solve] section: the method, the options every method shares (HiGHS settings, the repair limit:
    mdp_core.declarations.solver_options) with their declared defaults, and every method's options (mdp_core.declarations.methods),
    unset meaning the chosen method's own default. An option the chosen method does not take is an error
    (as on the command line)."""

    model_config = STRICT
    method: Literal[METHOD_NAMES] = Field(  # type: ignore[valid-type]
        "auto",
        description="auto: lp or rowgen from the instance's structure (mdp_core.solvers.auto); or a named method",
    )

    def _given(self, names: typing.Iterable[str]) -> dict[str, Any]:
        return {n: getattr(self, n) for n in names if getattr(self, n, None) is not None}

    def solver_settings(self) -> dict[str, Any]:
        """The HiGHS settings given or defaulted here (an unset time limit: none), as ``SolverOptions(**...)`` takes;
        ``all_pairs`` (:func:`release_all_pairs`) only when on (off, the solve's parameters -- its cache key -- are
        those of a release before the option existed)."""
        given = self._given(s.name for s in specs(SolverOptions) if s.exposed)
        every = release_all_pairs(self.method, given.pop("all_pairs", None))
        return given | ({"all_pairs": True} if every else {})

    def solver_options(self) -> SolverOptions:
        return SolverOptions(**self.solver_settings())

    def repair_settings(self) -> dict[str, Any]:
        """``{"max_mix": ...}``: how far the exact repair may go (mdp_core.declarations.solver_options.RepairOptions)."""
        return self._given(s.name for s in specs(RepairOptions))

    def method_args(self) -> dict[str, Any]:
        """The chosen method's options set here (the method's own defaults apply to the others), and a release's
        own default gap: ``gap_rel`` = :data:`RELEASE_GAP_REL` where the method takes it and it is unset."""
        names = [s.name for s in method_option_specs(self.method)]
        given = self._given(names)
        if "gap_rel" in names and "gap_rel" not in given:
            given["gap_rel"] = RELEASE_GAP_REL
        return given

    @model_validator(mode="after")
    def _method_takes(self) -> _SolveBase:
        takes = {s.name: s for s in method_option_specs(self.method)}
        common = {s.name for cls in _COMMON for s in specs(cls)}
        for name in sorted(set(type(self).model_fields) - common - {"method"}):
            value = getattr(self, name)
            if value is None:
                continue
            if name not in takes:
                raise ValueError(f"{name} is not an option of method {self.method!r} (its options: {sorted(takes)})")
            try:
                takes[name].check(tuple(value) if isinstance(value, list) else value)
            except InputError as exc:
                raise ValueError(str(exc)) from None
        return self


if TYPE_CHECKING:
    SolveConfig = _SolveBase
else:
    SolveConfig = create_model(
        "SolveConfig",
        __base__=_SolveBase,
        __doc__=_SolveBase.__doc__,
        **{s.name: _common_field(s) for cls in _COMMON for s in specs(cls) if s.exposed},
        **_method_fields(),
    )


# the named priors of ``[release] prior`` (anything else: a public .csv / .parquet file, prior_source "file")
PRIOR_SOURCES = tuple(s for s in contract.PRIOR_SOURCES if s != contract.PRIOR_FILE)


DEFAULT_N_INDIVIDUALS = 10_000  # simulated people when ``simulate`` and no ``n_individuals``
POPULATION_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"


class ReleaseConfig(BaseModel):
    """What is released and how it is accounted. Exactly one of: ``microdata``, the agency's secret table
    (CSV or Parquet, one row per individual: ``lat, lon`` / ``x0..`` / ``record``; :mod:`mdp_core.problem.microdata`)
    with its ``population`` (whose records these are, across versions of the table: the ledger that
    bounds their total privacy loss is the population's); or ``simulate = true``, ``n_individuals``
    simulated people (a demo). Neither is an error: a forgotten ``microdata`` must never publish simulated
    people under a real release's name. The randomness that protects individuals comes from OS entropy,
    kept in the store's private part: there is no seed to set."""

    model_config = STRICT
    microdata: str | None = Field(None, description="the agency's secret microdata file (.csv / .parquet)")
    population: str | None = Field(
        None,
        pattern=POPULATION_PATTERN,
        description="with microdata (required): the people whose records the table holds, across versions of "
        "it (lowercase, digits, . _ -); their privacy ledger and cap are this population's",
    )
    simulate: bool = Field(False, description="release simulated people (a demo) instead of microdata")
    max_distance: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="farthest an individual may lie from its record; unset: eta"
    )
    n_individuals: int | None = Field(
        None, ge=1, le=100_000_000, description="simulated individuals (only with simulate); unset: 10,000"
    )
    eps_counts: float = Field(1.0, gt=0, allow_inf_nan=False, description="budget of the released true-data counts")
    prior: str = Field(
        "dataset",
        description="prior the mechanism is optimised for: dataset | uniform | dp (a DP histogram of the "
        "microdata, spending eps_prior) | a public .csv/.parquet file with a 'prior' column (N rows)",
    )
    eps_prior: float = Field(0.1, gt=0, allow_inf_nan=False, description="budget of the DP prior (prior = dp)")
    eps_error: float | None = Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="budget of a DP measurement of the table's own people's mean release error (the report's "
        "figure for them, not for people spread as the prior; charged, composed into the guarantee); unset or "
        '"auto": with prior = dp, the smallest of 0.1, 0.25, 0.5, 1 giving a noise of about 1 % of the figure for '
        "the number of people n (n >= 6000: 0.1; >= 2400: 0.25; >= 1200: 0.5; else 1), otherwise 0; 0: not measured",
    )
    max_total_epsilon: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="the population's privacy cap: required by its first release, which sets it in the store's "
        "ledger; a lower value lowers it, a higher one is noted but never applied (raise it with "
        "`mdp-release ledger cap --raise`)",
    )
    approval: Literal["required", "policy", "none"] | None = Field(
        None,
        description="who lets the run measure the people, before its first charge: required (a person approves "
        "each run's plan through Prefect: the UI's Resume form or `mdp-release approve`), policy (unattended "
        "inside the envelope a person approved once, otherwise as required) or none; unset: for microdata, "
        "policy in a deployed or scheduled run (an agency's people are never measured unattended before a "
        "person approved once) and none in a run started in a terminal (its operator approves it by starting "
        "it); none with simulate = true (nobody's data)",
    )
    approval_timeout: int | None = Field(
        None,
        ge=1,
        le=7 * 24 * 3600,
        description="seconds a run waits for the approval; then it ends Refused, nothing measured; unset: 3600",
    )

    @model_serializer(mode="wrap")
    def _unset_approval_not_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``approval`` / ``approval_timeout`` / ``eps_error`` appear in a dump only when set: an unset value is a
        function of the other keys (:func:`approval_mode`, :meth:`flows.plan.PrivacyTerms.error_epsilon`), so the
        configs written before them keep their hash, release key and published config; ``eps_error = 0`` with a
        public prior is the same as unset (not measured either way), so it is not written either."""
        data: dict[str, Any] = handler(self)
        for key in ("approval", "approval_timeout", "eps_error"):
            if data.get(key, 0) is None:
                del data[key]
        if data.get("eps_error") == 0 and self.prior != "dp":
            del data["eps_error"]
        return data

    @model_validator(mode="before")
    @classmethod
    def _no_seed(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("eps_error") == "auto":  # the same as unset
            data = {k: v for k, v in data.items() if k != "eps_error"}
        if isinstance(data, dict) and "seed" in data:
            raise PydanticCustomError(
                "seed_removed",
                "release.seed is no longer accepted: the randomness that protects individuals comes from OS "
                "entropy and is kept in the store's private part (remove the key)",
            )
        return data

    @model_validator(mode="after")
    def _consistent(self) -> ReleaseConfig:
        # Only values, never model_fields_set: a full dump (a manifest, the API's copy of a parameter) and the
        # keys written validate alike.
        if self.prior == "dp" and self.microdata is None:
            raise ValueError("prior = 'dp' is a DP histogram of the microdata: set microdata")
        if self.prior not in PRIOR_SOURCES and not self.prior.lower().endswith((".csv", ".parquet", ".pq")):
            raise ValueError(
                f"prior must be one of {list(PRIOR_SOURCES)} or a .csv / .parquet file, got {self.prior!r}"
            )
        if self.microdata is not None and self.simulate:
            raise ValueError("microdata and simulate = true are both set: a release is one or the other")
        if self.n_individuals is not None and not self.simulate:
            raise ValueError(
                "n_individuals is for simulated individuals (set simulate = true); with microdata, the file sets n"
            )
        if self.microdata is None and not self.simulate:
            raise ValueError(
                "neither microdata nor simulate is set: set microdata = FILE (the agency's table, with its "
                "population) or simulate = true (simulated people, a demo)"
            )
        if self.microdata is not None and self.population is None:
            raise ValueError(
                "population is required with microdata: a name for the people whose records the table holds "
                '(e.g. population = "rome-residents"), the same across versions of the table; their privacy '
                "ledger and cap are this population's"
            )
        if self.simulate and self.population is not None:
            raise ValueError("population is for microdata: simulated people get their own population")
        return self

    @property
    def prior_source(self) -> str:
        return self.prior if self.prior in PRIOR_SOURCES else "file"

    @property
    def simulated_individuals(self) -> int | None:
        """How many simulated people (``n_individuals``, unset: :data:`DEFAULT_N_INDIVIDUALS`); None with microdata."""
        if not self.simulate:
            return None
        return DEFAULT_N_INDIVIDUALS if self.n_individuals is None else self.n_individuals


def _simulated_release() -> ReleaseConfig:
    """The built-in default release's [release]: simulated people (a config file must say so itself)."""
    return ReleaseConfig(simulate=True)


Baseline = Literal[COMPARABLE]  # type: ignore[valid-type]  # mdp_core.declarations.methods: baselines, then optimal methods
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


def _timeout_field(stage: str) -> Any:
    """A stage's ``[run.timeouts]`` field; a former name of the stage (``contract.FORMER_STAGE_NAMES``) is read too."""
    former = [old for old, new in contract.FORMER_STAGE_NAMES.items() if new == stage]
    return Field(None, gt=0, validation_alias=AliasChoices(stage, *former)) if former else Field(None, gt=0)


# Per-stage timeout in seconds: one optional field per declared stage (mdp_core.declarations.contract.STAGES).
TimeoutsConfig: type[BaseModel] = create_model(
    "TimeoutsConfig",
    __config__=STRICT,
    __doc__="Per-stage timeout in seconds (None: no limit). A stage that exceeds it fails the run.",
    **cast(dict[str, Any], {s.name: (float | None, _timeout_field(s.name)) for s in contract.STAGES}),
)


class RunConfig(BaseModel):
    """How the flow runs: task runner and timeouts. Results never depend on it (no cache key does)."""

    model_config = STRICT
    task_runner: Literal["thread", "dask"] = "thread"
    dask_address: str = Field("", description="tcp://host:port of a Dask scheduler; empty: a local Dask cluster")
    max_workers: int = Field(2, ge=1, le=256, description="threads, or workers of a local Dask cluster")
    timeouts: TimeoutsConfig = Field(default_factory=TimeoutsConfig)
    keep_releases: int | None = Field(
        None,
        ge=1,
        description="keep the newest N release folders of this release name (and runs/latest's, and as many of its "
        "failure records); other releases of the store are never touched; unset: all",
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
    # The Python default (``ReleaseFlowConfig()``, the built-in default release) simulates people; a config
    # file must have a [release] section (:func:`parse_config`).
    release: ReleaseConfig = Field(default_factory=_simulated_release)
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
    return _derived_name(cfg.dataset.kind, effective_epsilon(cfg), cfg.solve.method)


def _derived_name(kind: str, eps: float | None, method: str) -> str:
    label = "auto" if eps is None else f"{eps:g}".replace(".", "p").replace("+", "")
    return f"{kind}-eps{label}-{method}".lower()


def release_name_of(data: Any) -> str | None:
    """The release name of a config in any form -- a config, its JSON (a manifest's ``config``, a flow-run
    parameter), even one that no longer validates (a manifest of an older version) -- or None when ``data``
    is no config at all. What retention (:meth:`artifacts.store.Store.prune_releases`) groups releases by."""
    if isinstance(data, ReleaseFlowConfig):
        return release_name(data)
    if data is None:
        return release_name(DEFAULT_CONFIG)
    if not isinstance(data, dict):
        return None
    try:
        return release_name(as_config(data))
    except Exception:  # an older or damaged config: its written name, or the name derived from its raw values
        pass
    name = data.get("name")
    if isinstance(name, str) and name:
        return name
    ds, pv, sv = (_section(data, k) for k in ("dataset", "privacy", "solve"))
    kind, method, eps = ds.get("kind", "grid"), sv.get("method", "auto"), pv.get("epsilon")
    if not isinstance(kind, str) or not isinstance(method, str):
        return None
    if not isinstance(eps, int | float) or isinstance(eps, bool):
        try:
            value = dataset_kinds.parameters(kind).get("epsilon")
        except Exception:
            value = None
        eps = float(value) if isinstance(value, int | float) else None
    return _derived_name(kind, eps, method)


def _section(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


DEFAULT_APPROVAL_TIMEOUT = 3600  # seconds a run waits for the officer's approval (``[release] approval_timeout``)


def approval_mode(cfg: ReleaseFlowConfig, deployed: bool = False) -> str:
    """``[release] approval``; unset: "none" for simulated people (nobody's data); for an agency's microdata,
    "policy" in a run nobody started by hand (``deployed``: a deployment's or a schedule's run, which waits
    for a person the first time and then runs inside the envelope that person approved) and "none" in a run
    an operator starts in a terminal (who, having read ``mdp-release check``, approves it by starting it)."""
    if cfg.release.approval is not None:
        return cfg.release.approval
    return "policy" if deployed and not cfg.release.simulate else "none"


def effective_epsilon(cfg: ReleaseFlowConfig) -> float | None:
    """``privacy.epsilon``, else the dataset loader's default (grid: 10 / km); None when the loader
    derives it from the data (text)."""
    if cfg.privacy.epsilon is not None:
        return cfg.privacy.epsilon
    try:
        value = dataset_kinds.parameters(cfg.dataset.kind).get("epsilon")
    except Exception:
        return None
    return float(value) if isinstance(value, int | float) else None


def config_hash(cfg: ReleaseFlowConfig) -> str:
    """sha256 of what the release depends on (the config without ``run``/``name``/``store``).

    A function of the config's *meaning*: every field with its value, defaults included (a full
    ``model_dump``), and ``n_individuals`` as the number of people simulated -- never of which keys were
    written. ``simulate = true`` written or taken from the built-in default, ``n_individuals`` unset or
    10,000: one hash. So run names and manifests do not churn between the routes a config takes
    (:func:`to_parameter` keeps only the written keys)."""
    import hashlib
    import json

    data = cfg.model_dump(mode="json", exclude={"run", "name", "store"})
    data["release"]["n_individuals"] = cfg.release.simulated_individuals
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def to_parameter(cfg: ReleaseFlowConfig) -> dict[str, Any]:
    """``cfg`` as a flow-run parameter (JSON): what was written and nothing else (``exclude_unset``, at every
    level), so the deployment, the run form and a batch show the author's config. :func:`as_config` is the
    way back; ``as_config(to_parameter(cfg)) == cfg`` for every valid config (tests/test_config_routes.py).
    One addition: a ``dataset`` section always carries its ``kind``, the discriminator of the parameter's
    JSON schema (Prefect checks a deployment's runs against it: ``{}`` matches every kind's arm)."""
    out: dict[str, Any] = cfg.model_dump(mode="json", exclude_unset=True)
    if "dataset" in out:
        out["dataset"] = {"kind": cfg.dataset.kind, **out["dataset"]}
    return out


# Names a file parameter may take that are not paths (bundled data sets: mdp_core.declarations.dataset_kinds.BUNDLED; GloVe).
_NOT_PATHS = dataset_kinds.NAMES | {"glove-6b-50d"}


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
        for n in dataset_kinds.FILE_PARAMETERS.get(kind, ()):
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


def _section_fields(loc: tuple[Any, ...]) -> list[str]:
    """The field names of the config section at ``loc`` (the path of an unknown key, without the key)."""
    model: Any = ReleaseFlowConfig
    for part in loc:
        if part == "params":
            return []  # dataset.params: reported by its own validator, with the kind's parameters
        info = getattr(model, "model_fields", {}).get(part) if isinstance(part, str) else None
        if info is None:
            return []
        model = info.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
    return list(getattr(model, "model_fields", {}))


def _explain(exc: ValidationError, source: str) -> InputError:
    import difflib

    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
        loc = tuple(first["loc"])
        close = difflib.get_close_matches(str(loc[-1]), _section_fields(loc[:-1]), n=1, cutoff=0.6) if loc else []
        if close:
            msg += f" (did you mean {close[0]!r}?)"
    more = f" (and {len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else ""
    return InputError(f"{source}: {where}: {msg}{more}")


def parse_config(data: dict[str, Any], source: str = "config") -> ReleaseFlowConfig:
    """Validate a config mapping; raises InputError naming the first bad key. A mapping without ``release``
    takes the built-in default's (simulated people), as ``ReleaseFlowConfig(...)`` does; a config *file*
    must say what it releases (:func:`load_config`)."""
    try:
        return ReleaseFlowConfig.model_validate(data)
    except ValidationError as exc:
        raise _explain(exc, source) from None


def load_config(path: str | Path | None) -> ReleaseFlowConfig:
    """Read a TOML config (None -> the built-in default release, simulated people). A file without a
    ``[release]`` section is an error: it must set ``microdata`` (with ``population``) or ``simulate = true``."""
    if path is None:
        return ReleaseFlowConfig()
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such config file")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{p}: not valid TOML ({exc})") from None
    cfg = parse_config(_absolute_paths(data, p.resolve().parent), str(p))
    if not isinstance(data.get("release"), dict):  # forgetting microdata must never publish simulated people
        raise InputError(
            f"{p}: release: missing: a config file says what it releases: [release] microdata = FILE with "
            "population = NAME (an agency's table), or simulate = true (simulated people, a demo)"
        )
    return cfg


def as_config(value: Any) -> ReleaseFlowConfig:
    """A flow-run parameter as a config: a model, its JSON (:func:`to_parameter`'s written keys, or the full
    dump the API or a manifest keeps: both validate alike), or None (the built-in default release)."""
    if isinstance(value, ReleaseFlowConfig):
        return value
    if value is None:
        return ReleaseFlowConfig()
    return ReleaseFlowConfig.model_validate(value, strict=False)


# A release's solve is certified within 1 % of the optimum's expected loss (a proven bound) unless [solve] gap_rel
# says otherwise (the library's methods default to 1e-6). The guarantee does not depend on it (every mechanism is
# verified whatever the gap); the time does: Rome N = 500 at 1e-6 took 12 minutes where 1e-3 takes 1-2, and a
# 2,000-person Rome release (500 records x 500 outputs) needs a fourth row-generation round, 10 more minutes, to
# go from 0.7 % to 0.1 % (issue 40). Manifest version 3 (version 2: 1e-3; version 1: the method's own default).
RELEASE_GAP_REL = 1e-2

DEFAULT_CONFIG = (
    ReleaseFlowConfig()
)  # the built-in default release: simulated people (flows.release's default parameter)
