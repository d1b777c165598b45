"""The standing solver benchmark: every method on the issue-10 instances, side by side in one run.

    python bench/suite.py                                   # the default set (see SETS), 2 methods each
    python bench/suite.py --instances syn500,rome500 --methods rowgen,colgen,lp --time-limit 900
    python bench/suite.py --list                            # instance names and what they are
    python bench/suite.py --instances syn500 --methods rowgen,rowgen:lagrangian_steps=30   # a method's options
    python bench/suite.py --instances syn5000 --methods colgen --cluster 2            # a 2-worker LocalCluster
    python bench/suite.py --instances syn5000 --methods colgen --scheduler tcp://head:8786   # a real cluster

Prints one JSON line per (instance, method): instance, N, K, edges, rows (full-LP privacy rows),
method, executor, workers, status, seconds, objective, lower_bound, gap, relative_gap, peak_rss_mb,
and auto's choice when the method is auto; with ``--cluster N`` or ``--scheduler ADDRESS`` also the Dask
workers' count and peak RSS (``worker_peak_rss_mb``, one per worker in address order: on a fresh
LocalCluster that run's own peaks, on a remote cluster each worker process's peak since it started).
Each run is a fresh process (so peak RSS is that run's own high-water mark, its isolated solve's included
but not its cluster's workers, and one run's crash or memory cannot touch another); runs of one instance
are consecutive, so compare ratios within one invocation: the machines are noisy.

Instances come from the project's own exporters (``mdp_core.problem.datasets``); the road ones read
``../shared/data/rome_center`` and are skipped (with a JSON line saying so) when it is absent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ROME = ROOT.parent / "shared" / "data" / "rome_center"

# name -> (description, dataset kind, loader parameters)
INSTANCES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "grid500": ("paper grid 20x25, eps 10/km, eta 2 km", "grid", dict(rows=20, cols=25, n_outputs=100)),
    "grid500e2": ("paper grid 20x25, eps 2/km, eta 2 km", "grid", dict(rows=20, cols=25, n_outputs=100, epsilon=2.0)),
    "grid1000": ("grid 40x25, eps 10/km, eta 2 km", "grid", dict(rows=40, cols=25, n_outputs=100)),
    "grid2000": ("grid 50x40, eps 10/km, eta 2 km", "grid", dict(rows=50, cols=40, n_outputs=100)),
    "grid5000": ("grid 50x100, eps 10/km, eta 2 km", "grid", dict(rows=50, cols=100, n_outputs=100)),
    "grid10000": ("grid 100x100, eps 10/km, eta 2 km", "grid", dict(rows=100, cols=100, n_outputs=100)),
    "gridKN300": ("grid 15x20, K = N = 300, eps 10/km", "grid", dict(rows=15, cols=20, n_outputs=300)),
    "syn500": ("synthetic 3-D N(0,1), eta 2, eps 10 (paper)", "synthetic", dict(n_records=500, n_outputs=100)),
    "syn1000": ("synthetic 3-D N(0,1), eta 2, eps 10, N = 1000", "synthetic", dict(n_records=1000, n_outputs=100)),
    "syn2000": ("synthetic 3-D N(0,1), eta 2, eps 10, N = 2000", "synthetic", dict(n_records=2000, n_outputs=100)),
    "syn5000": ("synthetic 3-D N(0,1), eta 2, eps 10, N = 5000", "synthetic", dict(n_records=5000, n_outputs=100)),
    "syn10000": ("synthetic 3-D N(0,1), eta 2, eps 10, N = 10000", "synthetic", dict(n_records=10000, n_outputs=100)),
    "disc210": (
        "disconnected 4-D N(0, 4^2), eta 2, eps 10",
        "synthetic",
        dict(n_records=210, n_outputs=45, dim=4, sigma=4.0),
    ),
    "rome500": (
        "Rome roads (rome_center), eta 2 km, eps 10/km (paper)",
        "road",
        dict(n_records=500, n_outputs=100, eta=2.0, epsilon=10.0),
    ),
    "rome1000": (
        "Rome roads (rome_center), eta 2 km, eps 10/km, N = 1000",
        "road",
        dict(n_records=1000, n_outputs=100, eta=2.0, epsilon=10.0),
    ),
    "romeB300": (
        "Rome roads, binding: eps 6/km, eta 0.4 km",
        "road",
        dict(n_records=300, n_outputs=60, eta=0.4, epsilon=6.0),
    ),
    "text500": ("GloVe 50-d words, eps * eta = 20", "text", dict(vectors="glove-6b-50d", n_records=500, n_outputs=100)),
    # the release class (issue 40): what a road release config builds by default (distance loss, eta = the 1 km
    # protection radius, eps 10 / km, as many outputs as records); `mdp-release check`'s time model is fitted on it
    **{
        f"romeR{n}": (
            f"Rome roads, release defaults: distance loss, eta 1 km, eps 10/km, N = K = {n}",
            "road",
            dict(n_records=n, n_outputs=n, eta=1.0, epsilon=10.0, loss="distance"),
        )
        for n in (150, 250, 350, 500)
    },
    "romeR1000x500": (
        "Rome roads, release defaults: distance loss, eta 1 km, eps 10/km, N = 1000, K = 500 (issue 43)",
        "road",
        dict(n_records=1000, n_outputs=500, eta=1.0, epsilon=10.0, loss="distance"),
    ),
}
DISTRIBUTED = ("colgen", "benders")  # methods with an executor (--cluster / --scheduler: executor dask)
DEFAULT = "grid500,syn500,rome500,text500,romeB300,gridKN300,disc210"


def load(name: str, rome: str | Path | None = None, seed: int | None = None):
    """The instance ``name``; road instances read the Rome tables from ``rome`` (default: :data:`ROME`).
    ``seed``: the exporter's random seed (which records are sampled, which become outputs; None: the
    exporter's default, 0), for the seed spread of a method on one instance class."""
    from mdp_core.problem.datasets import registry

    _, kind, params = INSTANCES[name]
    params = dict(params)
    if seed is not None:
        params["seed"] = seed
    if kind == "road":
        where = Path(rome) if rome else ROME
        if not where.is_dir():
            raise FileNotFoundError(f"{where} is absent")
        params |= {"nodes": str(where / "nodes.csv"), "edges": str(where / "edges.csv")}
    return registry.load(kind, params)


def _progress(name: str, method: str):
    """Progress lines of a run on stderr (stdout stays JSON lines)."""
    t0 = time.perf_counter()
    return lambda line: print(f"[{name} {method} {time.perf_counter() - t0:7.1f}s] {line}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _cluster(workers: int, scheduler: str | None) -> Iterator[str | None]:
    """The Dask scheduler address of this run: ``scheduler``, or a fresh LocalCluster of ``workers``
    single-threaded worker processes (stopped afterwards), or None (no cluster)."""
    if scheduler or not workers:
        yield scheduler
        return
    import distributed

    from mdp_core.runtime.executor import worker_environ

    with (
        worker_environ(),
        distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0", memory_limit=0
        ) as cluster,
    ):
        yield cluster.scheduler_address


def _worker_peaks(address: str) -> list[float]:
    """Peak RSS (MB) of every worker process of the cluster at ``address``, in address order."""
    import distributed

    with distributed.Client(address) as client:
        usage = client.run(resource.getrusage, resource.RUSAGE_SELF)
    return [round(usage[w].ru_maxrss / 1024, 1) for w in sorted(usage)]


def _run(
    name: str,
    method: str,
    args: dict[str, Any],
    time_limit: float,
    out: Any,
    workers: int,
    scheduler: str | None,
    seed: int | None = None,
) -> None:
    """Child process: solve once (on a Dask cluster when ``workers`` or ``scheduler``), send one result dict."""
    from mdp_core.declarations.solver_options import SolverOptions
    from mdp_core.solvers.solve import solve

    try:
        inst = load(name, seed=seed)
        with _cluster(workers, scheduler) as address:
            if address and method in DISTRIBUTED:
                args = args | {"executor": "dask", "scheduler": address}
            elif address and method == "auto":
                args = args | {"scheduler": address}
            t0 = time.perf_counter()
            sol = solve(inst, method, SolverOptions(time_limit=time_limit), progress=_progress(name, method), **args)
            seconds = time.perf_counter() - t0
            driver_kb = _peak_kb()  # before the cluster's workers end (they would count as children)
            peaks = _worker_peaks(address) if address else None
        row: dict[str, Any] = {
            "status": str(sol.status),
            "seconds": round(seconds, 2),
            "objective": sol.objective,
            "lower_bound": sol.lower_bound,
            "gap": sol.gap,
            "relative_gap": None if sol.gap is None else sol.gap / abs(sol.objective),
            "iterations": sol.iterations,
            "repair_mix": sol.repair.max_mix,
            "executor": sol.extra.get("executor"),
        }
        if "auto" in sol.extra:
            row["auto"] = sol.extra["auto"]["method"]
        if peaks is not None:
            row |= {"cluster_workers": len(peaks), "worker_peak_rss_mb": peaks}
        row["peak_rss_mb"] = round(driver_kb / 1024, 1)
    except Exception as e:  # a failed run is a result too
        row = {"status": "error", "error": f"{type(e).__name__}: {e}", "peak_rss_mb": round(_peak_kb() / 1024, 1)}
    out.send(row)


def variant(label: str) -> tuple[str, dict[str, Any]]:
    """``METHOD`` or ``METHOD:key=value:key=value`` (values read as JSON, else as strings) ->
    (method, its options), e.g. ``rowgen:lagrangian_steps=30``."""
    method, *pairs = label.split(":")
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"method variant {label!r}: expected key=value after ':', got {pair!r}")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return method, options


def describe(name: str, seed: int | None = None) -> dict[str, Any]:
    inst = load(name, seed=seed)
    from mdp_core.solvers.auto import features

    f = features(inst)
    return {
        "N": f["n_records"],
        "K": f["n_outputs"],
        "edges": f["n_edges"],
        "rows": 2 * f["n_edges"] * f["n_outputs"],
        "mean_degree": f["mean_degree"],
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", default=DEFAULT)
    ap.add_argument("--methods", default="auto,lp")
    ap.add_argument("--time-limit", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--gap-rel", type=float, default=1e-6)
    ap.add_argument("--subsets", type=int, default=2, help="Benders subsets M")
    ap.add_argument("--executor", default="auto", help="Benders executor: auto, serial, process, dask")
    ap.add_argument(
        "--cluster",
        type=int,
        default=0,
        metavar="N",
        help="run colgen / benders / auto on a fresh N-worker LocalCluster",
    )
    ap.add_argument("--scheduler", help="run colgen / benders / auto on the Dask cluster at this address (tcp://...)")
    ap.add_argument("--seed", type=int, default=None, help="the instances' exporter seed (default: theirs, 0)")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    if a.cluster < 0 or (a.cluster and a.scheduler):
        ap.error("--cluster takes a worker count >= 1, and not together with --scheduler")
    if a.list:
        for name, (text, kind, params) in INSTANCES.items():
            print(f"{name:10s} {kind:9s} {text}  {params}")
        return
    ctx = mp.get_context("spawn")
    for name in a.instances.split(","):
        if name not in INSTANCES:
            raise SystemExit(f"unknown instance {name!r}; --list shows them")
        try:
            base = {"instance": name, **describe(name, a.seed)}
            if a.seed is not None:
                base["seed"] = a.seed
        except FileNotFoundError as e:
            print(json.dumps({"instance": name, "status": "skipped", "reason": str(e)}), flush=True)
            continue
        for label in a.methods.split(","):
            method, options = variant(label)
            args: dict[str, Any] = {"gap_rel": a.gap_rel} if method not in ("exp", "laplace", "constopt") else {}
            args |= options
            if method == "benders":
                args |= {"n_subsets": a.subsets, "executor": a.executor}
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_run, args=(name, method, args, a.time_limit, child, a.cluster, a.scheduler, a.seed))
            p.start()
            child.close()
            try:
                row = parent.recv()
            except EOFError:
                row = {"status": "crashed", "exitcode": None}
            p.join()
            if p.exitcode:
                row |= {"exitcode": p.exitcode}
            print(json.dumps(base | {"method": label, "workers": os.cpu_count()} | row), flush=True)


def _peak_kb() -> int:
    """Peak RSS (KB) of this process and of its finished children: solve() runs large solves in a child
    process (mdp_core.runtime.isolate), whose memory RUSAGE_SELF does not see."""
    return max(resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
