"""The release class (issue 40): what a road release builds by default, solved as a release solves it, beside
planar Laplace at the same guarantee. `mdp-release check`'s advisor is fitted on these lines
(:mod:`mdp_core.release.advisor`, ``MEASURED``).

    python bench/release_class.py [--instances romeR150,romeR250,romeR350,romeR500] [--gap-rel 1e-2]

One JSON line per instance: ``instance, N, K, edges, privacy_rows`` (2 E K: the full LP's), ``seconds``,
``cpu_seconds`` (this process and the solve's child), ``status, rounds, relative_gap``, ``release`` (the
certified mechanism's expected distance per record, the instance's prior), ``planar_laplace_remap`` and
``planar_laplace`` (:mod:`mdp_core.release.baseline` at eps per unit: the rate within the 1 km protection
radius, every pair within it an edge), ``peak_rss_mb`` (the largest of this process and the solve's child).
Road instances read ``../shared/data/rome_center``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for where in (REPO, REPO / "bench"):  # `python bench/release_class.py` puts bench/, not the repo root, on sys.path
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))

from suite import load  # noqa: E402

from mdp_core.release import baseline  # noqa: E402
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
    args = ap.parse_args()
    for name in args.instances.split(","):
        inst = load(name)
        t0, c0 = time.perf_counter(), _cpu()
        sol = solve(inst, "auto", gap_rel=args.gap_rel)  # in a child process (mdp_core.runtime.isolate)
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
            "planar_laplace_remap": rows[baseline.REMAP]["dist_loss_mean"],
            "planar_laplace": rows[baseline.CONTINUOUS]["dist_loss_mean"],
            "peak_rss_mb": round(max(_rss(resource.RUSAGE_SELF), _rss(resource.RUSAGE_CHILDREN)), 1),
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
