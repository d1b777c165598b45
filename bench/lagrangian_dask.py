"""The row-sum Lagrangian's K subproblems on Dask workers: identical work on 1, 2, ... workers, timed.

    python bench/lagrangian_dask.py --instance syn1000 --workers 1,2          # fresh LocalClusters of 1, 2 workers
    python bench/lagrangian_dask.py --instance syn200 --workers 2 --steps 4   # a quick check
    python bench/lagrangian_dask.py --instance syn200k40 --workers 1 --executor process   # no Dask
    python bench/lagrangian_dask.py --instance rome1000 --scheduler tcp://head:8786   # a running cluster

Instances: the names of ``python bench/suite.py --list``, or ``synN`` / ``synNkK`` (the synthetic class
of syn500: 3-D N(0, 1), eta 2, eps 10, N records, K outputs, default min(100, N)).

What it does (:mod:`mdp_core.solvers.lagrangian`, K subproblems of N variables, one per output):

1. Start multipliers lam (``--lam-from``): ``rowgen1`` (default) the row-sum duals of rowgen's round-1
   restricted LP, lam = scale * row_dual[:N] (:func:`mdp_core.solvers.rowgen.new_model`), target its
   closure's cost; ``zeros``; ``cheapest`` lam_i = min_k p_i c_ik; target then the uniform mechanism's
   cost (feasible: every privacy ratio is 1). ``--target`` overrides the target (an upper bound).
2. Record: :func:`~mdp_core.solvers.lagrangian.ascend` with ``--steps`` Polyak steps on the serial executor,
   recording every lam it evaluated (1 + steps at most: it stops early when stalled).
3. Replay: that exact lam sequence, :meth:`Lagrangian.evaluate` one after the other, on every configuration
   (``--workers 1,2``: a fresh LocalCluster of that many single-threaded worker processes each, through
   ``bench/suite.py``'s ``_cluster``; ``--scheduler``: the cluster there), so every configuration does
   the same work from the same state: its bounds (and subproblem points) must be bit-identical to the
   serial ones (field ``identical``). Each step runs in a fresh spawned process (``--inline``: all in this
   one), so the driver's peak RSS is that configuration's own.

Output, JSON lines on stdout (progress on stderr): one per configuration -- instance, N, K, executor,
workers, evaluations, ``wall_s`` (evaluations only; ``startup_s`` apart) and ``wall_per_eval_s``,
``sub_seconds_per_eval`` (HiGHS seconds summed over the K subproblems, SubResult.seconds), on the serial
run ``sub_wall_per_eval_s`` (each subproblem's call timed alone), ``speedup`` against the 1-worker run of
the same executor, ``bounds``, ``identical``, ``driver_peak_rss_mb``, on Dask ``worker_peak_rss_mb`` per
worker (address order) with ``worker_base_rss_mb`` (the same worker's peak before the subproblems were
built, mdp_core imported), ``outputs_per_worker``, ``pairs_mb`` and ``model_mb_per_output``, and the
statistics of the per-subproblem seconds -- then one line ``{"table": ...}``.

The table's model. One evaluation sends the K requests at once; each worker answers its outputs one after
the other; the driver waits for all. With t_ek the measured seconds of subproblem k at evaluation e (the
serial run's per-call wall: HiGHS plus the row checks and dual terms, all of which run on the worker),

    wall_e(w) = LPT_w(t_e1 .. t_eK) + o,      sequence: sum_e wall_e(w),

LPT_w the makespan of longest-processing-time-first on w workers (its running minimum over w' <= w:
a cluster can leave workers idle), o the measured overhead per evaluation: the 1-worker Dask run's wall
minus the serial run's summed subproblem seconds, per evaluation (requests and results on the wire,
the driver's assembly of the bound; from the serial run alone, without the wire, when no 1-worker Dask
run was made). o is taken as constant in w (it grows with w in reality: one message per worker).
``as_assigned`` is the makespan with the executor's own fixed groups (equal weights: LPT over counts,
:func:`mdp_core.runtime.executor.balanced_groups`), which the code runs today. K subproblems bound the
useful worker count at K: beyond it the makespan is the slowest subproblem's (``useful_workers``).

Memory per worker (:mod:`mdp_core.solvers.lagrangian`'s docstring): the process's base (Python, Dask,
mdp_core, HiGHS), the shared pairs (25 bytes per directed pair, one copy per worker), plus per output
held there its mask and live HiGHS model. Measured: ``model_mb_per_output`` = sum over workers of
(peak - base - pairs) / K (the evaluation's transient arrays counted in); the table's
``worker_mb_est`` = base + pairs + ceil(K / w) model_mb_per_output (the executor's groups hold
ceil(K / w) outputs at most). RSS peaks are the worker processes' high-water marks (ru_maxrss).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing as mp
import re
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mdp_core.declarations.methods import RowgenOptions
from mdp_core.declarations.solver_options import Executor, Factory, SolverOptions
from mdp_core.problem.instance import Instance
from mdp_core.runtime.executor import DaskExecutor, ProcessExecutor, SerialExecutor, balanced_groups
from mdp_core.solvers import rowgen
from mdp_core.solvers.lagrangian import MAX_SOLVES, Evaluation, Lagrangian, SubResult, ascend

try:
    from bench import suite
except ImportError:  # run as a script without the project root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench import suite

TABLE_WORKERS = (1, 2, 4, 8, 16, 32, 64)
OPTIONS = SolverOptions(threads=1)  # every configuration: single-threaded HiGHS (out-of-process workers are anyway)
SYN = re.compile(r"syn(\d+)(?:k(\d+))?$")
Progress = Callable[[str], None]


def load_instance(name: str, seed: int | None = None, rome: str | None = None) -> Instance:
    """A ``bench/suite.py`` instance by name, or ``synN`` / ``synNkK`` (module docstring)."""
    if name in suite.INSTANCES:
        return suite.load(name, rome=rome, seed=seed)
    m = SYN.match(name)
    if m is None:
        raise SystemExit(f"unknown instance {name!r}: a name of bench/suite.py --list, or synN, synNkK")
    from mdp_core.problem.datasets import registry

    n = int(m.group(1))
    params: dict[str, Any] = {"n_records": n, "n_outputs": int(m.group(2)) if m.group(2) else min(100, n)}
    if seed is not None:
        params["seed"] = seed
    return registry.load("synthetic", params)


def start_values(inst: Instance, lam_from: str, target: float | None) -> dict[str, Any]:
    """{"lam": (N,) start multipliers (instance's cost unit), "target": ascent target, "lam_from", ...}."""
    n, k = inst.n_records, inst.n_outputs
    weighted = inst.prior[:, None] * inst.costs
    out: dict[str, Any] = {"lam_from": lam_from}
    if lam_from == "rowgen1":
        t0 = time.perf_counter()
        params = RowgenOptions()
        h, rows, _, scale = rowgen.new_model(inst, OPTIONS, params)
        sol = rowgen._solve_lp(h, rows, params, math.inf, 1)
        lam = scale * np.asarray(sol.row_dual[:n], dtype=np.float64)
        _, closure = rowgen._closure(inst, np.asarray(sol.x).reshape(n, k))
        out |= {"round1_seconds": round(time.perf_counter() - t0, 2), "upper": closure}
    elif lam_from == "zeros":
        lam = np.zeros(n)
    elif lam_from == "cheapest":
        lam = weighted.min(axis=1)
    else:
        raise SystemExit(f"--lam-from must be rowgen1, zeros or cheapest, got {lam_from!r}")
    upper = out.get("upper", float(weighted.mean(axis=1).sum()))  # else: the uniform mechanism's cost
    return out | {"lam": lam, "target": float(target if target is not None else upper)}


class Timed:
    """An executor delegating to ``inner`` that keeps, per ``solve`` call, every subproblem's
    :attr:`SubResult.seconds` (HiGHS seconds) and, on a :class:`SerialExecutor`, each worker call's own
    wall seconds (the calls are made one by one here, as that executor makes them)."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.name = inner.name
        self.in_process = bool(getattr(inner, "in_process", False))
        self.highs: list[np.ndarray] = []  # per evaluation: (K,) HiGHS seconds
        self.walls: list[np.ndarray] = []  # per evaluation: (K,) wall seconds per call (serial only)

    def start(self, factory: Factory, specs: Sequence[Any], weights: Sequence[float] | None = None) -> None:
        self.inner.start(factory, specs, weights)
        if isinstance(self.inner, ProcessExecutor):  # its start returns at once: count the start-up here
            self.inner._await_ready()

    def solve(self, requests: Sequence[Any]) -> list[Any]:
        if isinstance(self.inner, SerialExecutor):
            out: list[SubResult] = []
            walls = np.zeros(len(requests))
            for i, (worker, req) in enumerate(zip(self.inner.workers, requests, strict=True)):
                t0 = time.perf_counter()
                out.append(worker(req))
                walls[i] = time.perf_counter() - t0
            self.walls.append(walls)
        else:
            out = self.inner.solve(requests)
        self.highs.append(np.array([r.seconds for r in out]))
        return list(out)

    def close(self) -> None:
        self.inner.close()


@dataclass
class Log:
    """What a :class:`Measured` Lagrangian evaluated: multipliers, evaluations, wall seconds, z digest."""

    lams: list[np.ndarray] = field(default_factory=list)
    evals: list[Evaluation] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    digest: Any = field(default_factory=hashlib.sha256)  # of every evaluation's z (N, K), in order


class Measured(Lagrangian):
    """A :class:`Lagrangian` on a :class:`Timed` executor that logs each :meth:`evaluate`."""

    def __init__(self, inst: Instance, timed: Timed, progress: Progress | None = None, total: int = 0) -> None:
        self.timed, self.log, self.progress, self.total = timed, Log(), progress, total
        t0 = time.perf_counter()
        super().__init__(inst, OPTIONS, timed)
        self.startup = time.perf_counter() - t0

    def evaluate(
        self,
        lam: np.ndarray,
        deadline: float = float("inf"),
        rows: list[np.ndarray] | None = None,
        max_solves: int = MAX_SOLVES,
    ) -> Evaluation:
        t0 = time.perf_counter()
        ev = super().evaluate(lam, deadline, rows, max_solves)
        wall = time.perf_counter() - t0
        log = self.log
        log.lams.append(np.array(lam, dtype=np.float64, copy=True))
        log.evals.append(ev)
        log.walls.append(wall)
        log.digest.update(np.ascontiguousarray(ev.z).tobytes())
        if self.progress is not None:
            of = f"/{self.total}" if self.total else ""
            self.progress(f"evaluation {len(log.evals)}{of}: bound {ev.bound:.9g}, {wall:.2f}s wall")
        return ev


def _peak_mb() -> float:
    """This process's peak RSS (MB; its children, e.g. LocalCluster workers, not counted)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def stats(x: np.ndarray) -> dict[str, float]:
    """min / median / mean / p90 / max of ``x`` (seconds), rounded to 0.1 ms; {} when empty."""
    if x.size == 0:
        return {}
    q = np.percentile(x, [0, 50, 90, 100])
    return {k: round(float(v), 4) for k, v in zip(("min", "median", "p90", "max"), q, strict=True)} | {
        "mean": round(float(x.mean()), 4)
    }


def _row(lag: Measured, inst: Instance) -> dict[str, Any]:
    """The measured fields of one configuration (module docstring); ``_times``: the (E, K) per-subproblem
    seconds the table uses (per-call walls on a serial executor, else HiGHS seconds), not printed."""
    log, timed = lag.log, lag.timed
    e = len(log.evals)
    highs_s = np.array(timed.highs).reshape(e, -1)
    walls = np.array(timed.walls).reshape(-1, highs_s.shape[1]) if timed.walls else None
    row: dict[str, Any] = {
        "N": inst.n_records,
        "K": inst.n_outputs,
        "executor": timed.name,
        "evaluations": e,
        "startup_s": round(lag.startup, 3),
        "wall_s": round(sum(log.walls), 3),
        "wall_per_eval_s": round(sum(log.walls) / max(e, 1), 4),
        "eval_walls_s": [round(w, 3) for w in log.walls],
        "sub_seconds_per_eval": round(float(highs_s.sum()) / max(e, 1), 4),
        "sub_seconds": stats(highs_s.ravel()),
        "sub_seconds_max_per_eval": stats(highs_s.max(axis=1)) if e else {},
    }
    if walls is not None:
        row |= {"sub_wall_per_eval_s": round(float(walls.sum()) / max(e, 1), 4), "sub_wall": stats(walls.ravel())}
    return row | {
        "bounds": [ev.bound for ev in log.evals],
        "held_rows": log.evals[-1].held_rows if e else 0,
        "z_sha256": log.digest.hexdigest(),
        "_times": (walls if walls is not None else highs_s).tolist(),
        "_sum_sub_s": float((walls if walls is not None else highs_s).sum()),
    }


@dataclass
class Spec:
    """Which instance (``bench/suite.py`` name or synN / synNkK), its exporter seed, the Rome tables."""

    name: str
    seed: int | None = None
    rome: str | None = None

    def load(self) -> Instance:
        return load_instance(self.name, self.seed, self.rome)


def start_step(spec: Spec, lam_from: str, target: float | None) -> dict[str, Any]:
    """Step 1 (module docstring): the start multipliers and the ascent target."""
    return start_values(spec.load(), lam_from, target)


def record(spec: Spec, lam: np.ndarray, target: float, steps: int) -> dict[str, Any]:
    """Step 2: :func:`ascend` from ``lam`` towards ``target``, ``steps`` steps, serial executor; the
    configuration's row plus ``_lams``, the multipliers it evaluated, in order."""
    inst = spec.load()
    lag = Measured(inst, Timed(SerialExecutor()), suite._progress(spec.name, "record serial"))
    try:
        asc = ascend(lag, lam, steps, target)
        row = _row(lag, inst) | {"workers": 1, "best_bound": asc.bound, "_lams": lag.log.lams}
    finally:
        lag.close()
    return row | {"driver_peak_rss_mb": _peak_mb()}


def _executor(executor: str, workers: int, address: str | None) -> Executor:
    if executor == "dask":
        return DaskExecutor(address)
    if executor == "process":
        return ProcessExecutor(max(1, workers))
    return SerialExecutor()


def _worker_peaks(address: str, warm: bool = False) -> list[float]:
    """Peak RSS (MB) of every worker at ``address`` (address order); ``warm``: import the subproblems'
    modules there first (so the base counts them)."""
    if warm:
        import distributed

        with distributed.Client(address) as client:
            client.run(exec, "import mdp_core.solvers.lagrangian", {})
    return suite._worker_peaks(address)


def _worker_fields(ex: DaskExecutor, lag: Lagrangian, address: str, base: list[float]) -> dict[str, Any]:
    """The Dask workers' memory (module docstring): peaks, bases, outputs held, pairs, per output."""
    peaks = _worker_peaks(address)
    held = {addr: len(g) for addr, g in zip(ex.placed, ex.groups, strict=True)}
    outputs = [held.get(addr, 0) for addr in sorted(ex.client.scheduler_info()["workers"])]
    p = lag.pairs
    pairs_mb = (p.a.nbytes + p.b.nbytes + p.g.nbytes + p.capped.nbytes) / 2**20
    models = sum(pk - b - pairs_mb for pk, b, o in zip(peaks, base, outputs, strict=True) if o)
    return {
        "workers": len(peaks),
        "worker_peak_rss_mb": peaks,
        "worker_base_rss_mb": base,
        "outputs_per_worker": outputs,
        "pairs_mb": round(pairs_mb, 2),
        "model_mb_per_output": round(models / max(lag.k, 1), 3),
    }


def replay(spec: Spec, lams: list[np.ndarray], executor: str, workers: int, scheduler: str | None) -> dict[str, Any]:
    """Step 3: evaluate the recorded ``lams`` one after the other on a fresh :class:`Lagrangian` on
    ``executor`` ("dask": a fresh ``workers``-worker LocalCluster, or the cluster at ``scheduler``;
    "process": ``workers`` processes; "serial"); the configuration's row."""
    inst = spec.load()
    label = f"{executor} {'cluster' if scheduler else workers}"
    with suite._cluster(workers if executor == "dask" else 0, scheduler if executor == "dask" else None) as address:
        inner = _executor(executor, workers, address)
        base = _worker_peaks(address, warm=True) if address else []
        lag = Measured(inst, Timed(inner), suite._progress(spec.name, label), len(lams))
        try:
            for lam in lams:
                lag.evaluate(lam)
            row = _row(lag, inst) | {"workers": workers if executor != "serial" else 1}
            if address and isinstance(inner, DaskExecutor):
                row |= _worker_fields(inner, lag, address, base)
        finally:
            lag.close()
    return row | {"driver_peak_rss_mb": _peak_mb()}


def _child(fn: Callable[..., dict[str, Any]], args: tuple[Any, ...], conn: Any) -> None:
    try:
        conn.send(fn(*args))
    except Exception as e:  # noqa: BLE001 -- a failed step is a result too
        conn.send({"status": "error", "error": f"{type(e).__name__}: {e}"})


def isolated(fn: Callable[..., dict[str, Any]], *args: Any, inline: bool = False) -> dict[str, Any]:
    """``fn(*args)`` in a fresh spawned process (its own peak RSS, its own crash), or here when ``inline``."""
    if inline:
        return fn(*args)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_child, args=(fn, args, child))
    p.start()
    child.close()
    try:
        out = parent.recv()
    except EOFError:
        out = {"status": "crashed"}
    p.join()
    return out | ({"exitcode": p.exitcode} if p.exitcode else {})


def lpt_makespan(times: Sequence[float], w: int) -> float:
    """Makespan of longest-processing-time-first: each time, longest first, to the least-loaded of
    ``w`` workers (ties: the first); 0 for no times."""
    if len(times) == 0:
        return 0.0
    load = np.zeros(max(1, min(w, len(times))))
    for t in sorted(times, reverse=True):
        load[int(np.argmin(load))] += t
    return float(load.max())


def assigned_makespan(times: Sequence[float], w: int) -> float:
    """Makespan with :class:`DaskExecutor`'s own groups for ``w`` workers (equal weights)."""
    t = np.asarray(times, dtype=np.float64)
    groups = balanced_groups([1.0] * t.size, min(w, t.size))
    return float(max(t[g].sum() for g in groups)) if t.size else 0.0


def table(
    times: np.ndarray, overhead: float, workers: Sequence[int] = TABLE_WORKERS, memory: dict[str, float] | None = None
) -> list[dict[str, Any]]:
    """Expected wall seconds per evaluation and for the sequence against worker count (module docstring):
    ``times`` (E, K) measured per-subproblem seconds, ``overhead`` seconds per evaluation (clamped at 0);
    ``memory``: {"base_mb", "pairs_mb", "model_mb_per_output"} for the per-worker estimate."""
    e, k = times.shape
    o = max(overhead, 0.0)
    top = max(workers, default=1)
    lpt = np.array([[lpt_makespan(t, w) for w in range(1, top + 1)] for t in times]).reshape(e, top)
    lpt = np.minimum.accumulate(lpt, axis=1)  # a cluster of w workers can leave some idle
    one = float(lpt[:, 0].sum()) + e * o
    out = []
    for w in workers:
        seq = float(lpt[:, w - 1].sum()) + e * o
        row: dict[str, Any] = {
            "workers": w,
            "useful_workers": min(w, k),
            "lpt_s_per_eval": round(float(lpt[:, w - 1].mean()), 4) if e else 0.0,
            "as_assigned_s_per_eval": round(float(np.mean([assigned_makespan(t, w) for t in times])), 4) if e else 0.0,
            "expected_wall_s_per_eval": round(seq / max(e, 1), 4),
            "expected_wall_s_sequence": round(seq, 3),
            "expected_speedup": round(one / seq, 3) if seq > 0 else None,
        }
        if memory:
            per = memory["base_mb"] + memory["pairs_mb"] + math.ceil(k / w) * memory["model_mb_per_output"]
            row["worker_mb_est"] = round(per, 1)
        out.append(row)
    return out


MODEL = "wall_e(w) = min_{w' <= w} LPT_{w'}(t_e1..t_eK) + o; sequence = sum_e wall_e(w); useful w <= K"


def summary(serial: dict[str, Any], rows: list[dict[str, Any]], workers: Sequence[int]) -> dict[str, Any]:
    """The final ``{"table": ...}`` line from the serial row (its per-subproblem times) and the replays'
    rows (the 1-worker Dask run's wall for the overhead, the Dask runs' memory; module docstring)."""
    times = np.array(serial["_times"], dtype=np.float64)
    e = times.shape[0]
    one = next((r for r in rows if r.get("executor") == "dask" and r.get("workers") == 1 and "wall_s" in r), None)
    overhead = ((one or serial)["wall_s"] - serial["_sum_sub_s"]) / max(e, 1)
    mems = [r for r in rows if "model_mb_per_output" in r]
    memory = None
    if mems:
        memory = {
            "base_mb": float(np.mean([np.mean(r["worker_base_rss_mb"]) for r in mems])),
            "pairs_mb": float(mems[0]["pairs_mb"]),
            "model_mb_per_output": float(np.mean([r["model_mb_per_output"] for r in mems])),
        }
    measured = {r["workers"]: r["wall_per_eval_s"] for r in rows if r.get("executor") == "dask" and "wall_s" in r}
    tab = table(times, overhead, workers, memory)
    for t in tab:
        if t["workers"] in measured:
            t["measured_wall_s_per_eval"] = measured[t["workers"]]
    return {
        "table": tab,
        "instance": serial["instance"],
        "K": serial["K"],
        "evaluations": e,
        "overhead_s_per_eval": round(overhead, 4),
        "overhead_from": "dask 1-worker run" if one else "serial run (no wire)",
        "times_from": "serial run: each subproblem call's wall seconds",
        "model": MODEL,
        "memory": memory,
    }


def emit(row: dict[str, Any], serial: dict[str, Any] | None, ones: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``row`` with ``identical`` (bounds and subproblem points bit-identical to the serial run's) and
    ``speedup`` (against the 1-worker run of its executor), printed as a JSON line without its private
    fields; returned as printed."""
    if "bounds" in row:
        ref = serial or row
        row["identical"] = row["bounds"] == ref["bounds"] and row["z_sha256"] == ref["z_sha256"]
        if row.get("workers") == 1 and row["executor"] != "serial":
            ones.setdefault(row["executor"], row)
        base = ones.get(row["executor"])
        if base is not None and row["wall_s"] > 0:
            row["speedup"] = round(base["wall_s"] / row["wall_s"], 3)
    out = {k: v for k, v in row.items() if not k.startswith("_")}
    print(json.dumps(out), flush=True)
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    doc = (__doc__ or "").split("What it does")[0]
    ap = argparse.ArgumentParser(
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="JSON lines on stdout, progress on stderr; the steps, fields and table model: the module docstring.",
    )
    ap.add_argument("--instance", required=True, help="bench/suite.py --list name, or synN / synNkK")
    ap.add_argument("--seed", type=int, default=None, help="the instance exporter's seed (default: its own)")
    ap.add_argument("--rome", default=None, help="the Rome tables' folder (road instances)")
    ap.add_argument("--steps", type=int, default=10, help="Polyak steps of the recorded ascent (default 10)")
    ap.add_argument(
        "--lam-from",
        default="rowgen1",
        choices=("rowgen1", "zeros", "cheapest"),
        help="start multipliers: rowgen's round-1 row-sum duals (default), zeros, min_k p_i c_ik",
    )
    ap.add_argument(
        "--target",
        type=float,
        default=None,
        help="ascent target, an upper bound (default: rowgen1's closure cost, else the uniform mechanism's)",
    )
    ap.add_argument(
        "--workers",
        default="1,2",
        help="replays: one per worker count (fresh LocalCluster each with dask; default 1,2; 0: none)",
    )
    ap.add_argument(
        "--executor",
        default="dask",
        choices=("dask", "process", "serial"),
        help="executor of the replays (default dask)",
    )
    ap.add_argument(
        "--scheduler",
        default=None,
        help="replay once on the running Dask cluster at this address (tcp://...) instead of --workers",
    )
    ap.add_argument(
        "--table-workers",
        default=",".join(map(str, TABLE_WORKERS)),
        help="the table's worker counts (default 1,...,64)",
    )
    ap.add_argument("--inline", action="store_true", help="every step in this process (no spawned children)")
    a = ap.parse_args(argv)
    try:
        a.workers = [int(w) for w in a.workers.split(",") if w.strip() and int(w) > 0]
        a.table_workers = [int(w) for w in a.table_workers.split(",") if w.strip()]
    except ValueError:
        ap.error("--workers and --table-workers take comma-separated integers")
    if any(w < 1 for w in a.table_workers) or a.steps < 0:
        ap.error("--table-workers must be >= 1 and --steps >= 0")
    if a.instance not in suite.INSTANCES and not SYN.match(a.instance):
        ap.error(f"unknown instance {a.instance!r}: a name of bench/suite.py --list, or synN, synNkK")
    if a.scheduler and a.executor != "dask":
        ap.error("--scheduler needs --executor dask")
    return a


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """The command line (``--help``); returns the printed lines, as dicts."""
    a = parse(argv)
    spec = Spec(a.instance, a.seed, a.rome)
    say = suite._progress(a.instance, "driver")
    start = isolated(start_step, spec, a.lam_from, a.target, inline=a.inline)
    if "lam" not in start:
        return [emit({"instance": a.instance, "step": "start"} | start, None, {})]
    say(f"start: lam from {a.lam_from}, target {start['target']:.9g}")
    base = {"instance": a.instance, "lam_from": a.lam_from, "target": start["target"], "steps": a.steps}
    serial = isolated(record, spec, start["lam"], start["target"], a.steps, inline=a.inline)
    if "_lams" not in serial:
        return [emit(base | {"step": "record"} | serial, None, {})]
    lams = serial.pop("_lams")
    serial = base | serial | {k: v for k, v in start.items() if k not in ("lam", "target", "lam_from")}
    ones: dict[str, dict[str, Any]] = {}
    lines = [emit(serial, None, ones)]
    configs = [0] if a.scheduler else a.workers
    rows = []
    for w in configs:
        say(f"replay: {len(lams)} evaluations on {a.executor} {a.scheduler or w}")
        row = base | isolated(replay, spec, lams, a.executor, w, a.scheduler, inline=a.inline)
        rows.append(row)
        lines.append(emit(row, serial, ones))
    lines.append(emit(summary(serial, rows, a.table_workers), None, ones))
    return lines


if __name__ == "__main__":
    main()
