"""The release configuration: typed (pydantic) so the Prefect UI renders it as a form, loadable from TOML.

Example (every key optional; these are the defaults of the built-in release)::

    store = "artifacts/store"

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
    n_individuals = 10000
    eps_counts = 1.0    # separate budget for the released aggregate counts (CBDP)
    seed = 0

    [evaluate]
    baselines = ["exp"]
    eps_factors = [1.0]                    # utility vs eps: e.g. [0.2, 0.5, 1.0] re-solves at eps * factor
    counts_eps = [0.05, 0.1, 0.5, 1.0, 2.0]  # count-error curve
    counts_seeds = 10
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mdp_core.errors import InputError

STRICT = ConfigDict(extra="forbid", strict=True)


class DatasetConfig(BaseModel):
    """Which dataset to ingest: a kind of ``mdp_core.datasets.registry`` and its loader parameters."""

    model_config = STRICT
    kind: Literal["grid", "synthetic", "road", "text", "points"] = "grid"
    params: dict[str, Any] = Field(default_factory=lambda: {"rows": 10, "cols": 20, "n_outputs": 100, "seed": 0})

    @field_validator("params")
    @classmethod
    def _no_privacy_here(cls, v: dict[str, Any]) -> dict[str, Any]:
        clash = sorted({"epsilon", "eta"} & set(v))
        if clash:
            raise ValueError(f"set {clash} in [privacy], not in dataset.params")
        return v


class PrivacyConfig(BaseModel):
    """eps and eta in the dataset's distance unit; unset (None) = the dataset loader's own value
    (e.g. the text loader scales eta to the vectors' norms)."""

    model_config = STRICT
    epsilon: float | None = Field(None, gt=0, allow_inf_nan=False, description="privacy budget per distance unit")
    eta: float | None = Field(None, gt=0, allow_inf_nan=False, description="neighbour threshold (distance unit)")


class PartitionConfig(BaseModel):
    model_config = STRICT
    method: Literal["kmdv", "kmrec", "kmadj", "bsc"] = "kmdv"
    subsets: int = Field(4, ge=1, le=10_000)
    seed: int = 0


class SolveConfig(BaseModel):
    model_config = STRICT
    method: Literal["lp", "colgen", "benders", "exp", "laplace", "constopt"] = "lp"
    solver: Literal["simplex", "ipm"] = "simplex"
    threads: int = Field(0, ge=0, le=256)
    time_limit: float = Field(600.0, gt=0, allow_inf_nan=False, description="seconds")
    max_mix: float = Field(0.01, gt=0, le=1)
    gap_abs: float = Field(0.0, ge=0)
    gap_rel: float = Field(1e-6, ge=0)
    max_iterations: int = Field(500, ge=1)


class ReleaseConfig(BaseModel):
    model_config = STRICT
    n_individuals: int = Field(10_000, ge=1, le=100_000_000)
    eps_counts: float = Field(1.0, gt=0, allow_inf_nan=False, description="budget of the released counts")
    seed: int = 0


class EvaluateConfig(BaseModel):
    """Baselines compared with the released mechanism; the utility-vs-eps sweep (each mechanism
    re-solved at eps * factor); the eps_counts values and seeds of the count-error curve."""

    model_config = STRICT
    baselines: list[Literal["exp", "laplace", "constopt", "lp", "benders"]] = Field(default_factory=lambda: ["exp"])
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


class ReleaseFlowConfig(BaseModel):
    """Everything a release depends on. Same config + same code + same inputs -> same artifacts."""

    model_config = STRICT
    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    partition: PartitionConfig = Field(default_factory=PartitionConfig)
    solve: SolveConfig = Field(default_factory=SolveConfig)
    release: ReleaseConfig = Field(default_factory=ReleaseConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    store: str = "artifacts/store"


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
        cfg = ReleaseFlowConfig.model_validate(data)
    except ValidationError as exc:
        raise _explain(exc, source) from None
    from mdp_core.datasets import registry

    known = registry.parameters(cfg.dataset.kind)
    unknown = sorted(set(cfg.dataset.params) - set(known))
    if unknown:
        raise InputError(f"{source}: dataset.params: unknown parameter(s) {unknown} for kind {cfg.dataset.kind!r}")
    return cfg


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
    return parse_config(data, str(p))
