"""The release class (issue 40): what a road release builds by default, solved as a release solves it, beside
planar Laplace at the same guarantee. `mdp-release check`'s advisor is fitted on these lines
(:mod:`mdp_core.release.advisor`, ``MEASURED``).

    python bench/release_class.py [--instances romeR150,romeR250,romeR350,romeR500] [--gap-rel 1e-2]
        [--all-pairs] [--method rowgen] [--options '{"support_tau": 1e-5, "far_rows_per_round": 2000}'] [--seed 0]

One JSON line per instance: ``instance, N, K, edges, privacy_rows`` (2 E K: the full LP's), ``seconds``,
``cpu_seconds`` (this process and the solve's child), ``status, rounds, relative_gap``, ``release`` (the
certified mechanism's expected distance per record, the instance's prior), ``planar_laplace_remap`` and
``planar_laplace`` (:mod:`mdp_core.release.baseline` at eps per unit: the rate within the 1 km protection
radius, every pair within it an edge), ``peak_rss_mb`` (the largest of this process and the solve's child).
With ``--all-pairs`` (issue 51: ``SolverOptions.all_pairs``, every two records of a component certified at
their metric distance) also ``metric_rows`` (rows beyond the edges the rounds chose); always ``rows`` (privacy
rows held at the end), ``lower_bound``, ``metric_epsilon`` (the mechanism's realised rate over every pair of
records, :func:`mdp_core.release.protection.metric_epsilon`), ``lp_seconds`` (each round's LP, wall) and
``load`` (the 1-minute load average before and after the solve: the machine is shared). ``--method``: the
method (default ``auto``, as a release); ``--options``: its options as JSON (e.g. rowgen's ``far_rows_per_round``;
``auto`` sets ``support_tau`` 1e-5 on this loss). Road instances read
``../shared/data/rome_center``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for where in (REPO, REPO / "bench"):  # `python bench/release_class.py` puts bench/, not the repo root, on sys.path
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))

from suite import load  # noqa: E402

from mdp_core.declarations.solver_options import SolverOptions  # noqa: E402
from mdp_core.release import baseline  # noqa: E402
from mdp_core.release.protection import metric_epsilon  # noqa: E402
from mdp_core.solvers.solve import solve  # noqa: E402


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the solve runs in one)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _rss(who: int) -> float:
    """The high-water mark in MB of this process (RUSAGE_SELF) or of its largest finished child."""
    return resource.getrusage(who).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", default="romeR150,romeR250,romeR350,romeR500")
    ap.add_argument("--gap-rel", type=float, default=1e-2, help="a release's gap (flows.config.RELEASE_GAP_REL)")
    ap.add_argument("--all-pairs", action="store_true", help="certify every pair of a component in the metric")
    ap.add_argument("--method", default="auto", help="the method (auto: as a release)")
    ap.add_argument("--options", default="{}", help="the method's options, JSON")
    ap.add_argument("--seed", type=int, default=None, help="the exporter's seed (None: its default, 0)")
    args = ap.parse_args()
    for name in args.instances.split(","):
        inst = load(name, seed=args.seed)
        load0 = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), _cpu()
        options = SolverOptions(all_pairs=args.all_pairs)  # the solve runs in a child (mdp_core.runtime.isolate)
        sol = solve(inst, args.method, options, gap_rel=args.gap_rel, **json.loads(args.options))
        seconds, cpu = time.perf_counter() - t0, _cpu() - c0
        rows = {r["method"]: r for r in baseline.comparison_rows(inst, inst.epsilon)}
        line = {
            "instance": name,
            "N": inst.n_records,
            "K": inst.n_outputs,
            "edges": inst.n_edges,
            "privacy_rows": 2 * inst.n_edges * inst.n_outputs,
            "gap_rel": args.gap_rel,
            "seconds": round(seconds, 1),
            "cpu_seconds": round(cpu, 1),
            "status": sol.status.value,
            "rounds": sol.iterations,
            "relative_gap": None if sol.gap is None else sol.gap / sol.objective,
            "release": sol.objective,
            "lower_bound": sol.lower_bound,
            "rows": sol.extra.get("rows"),
            "metric_rows": sol.extra.get("metric_rows_found", 0),
            "metric_epsilon": metric_epsilon(inst, sol.z),
            "lp_seconds": [] if sol.trace is None else [round(float(x), 1) for x in sol.trace.get("lp_seconds", [])],
            "planar_laplace_remap": rows[baseline.REMAP]["dist_loss_mean"],
            "planar_laplace": rows[baseline.CONTINUOUS]["dist_loss_mean"],
            "method": args.method,
            "all_pairs": args.all_pairs,
            "options": json.loads(args.options),
            "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
            "peak_rss_mb": round(max(_rss(resource.RUSAGE_SELF), _rss(resource.RUSAGE_CHILDREN)), 1),
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
