"""What certifying every pair in the metric costs (issue 51): the release class solved twice, on the mDP graph's
edges and with ``all_pairs`` (every two records of a component at their metric distance).

    nice -n 10 python bench/all_pairs.py [--instances romeR150,romeR300] [--gap-rel 1e-2] [--seed 0]

One JSON line per (instance, all_pairs): ``instance, N, K, edges, all_pairs, seed, seconds, status, rounds,
rows`` (privacy rows held at the end), ``metric_rows`` (rows beyond the edges chosen by the rounds),
``objective`` (expected distance per record of the certified mechanism), ``lower_bound, relative_gap``,
``metric_epsilon`` (the certified mechanism's realised rate over every pair of records, per km:
:func:`mdp_core.release.protection.metric_epsilon`), ``load`` (1-minute load average before the solve: the
machine is shared) and ``peak_rss_mb``. Road instances read ``../shared/data/rome_center`` (bench/suite.py).
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
for where in (REPO, REPO / "bench"):
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))

from suite import INSTANCES, load  # noqa: E402

from mdp_core.declarations.solver_options import SolverOptions  # noqa: E402
from mdp_core.release.protection import metric_epsilon  # noqa: E402
from mdp_core.solvers.solve import solve  # noqa: E402

for n in (300, 400):  # the release class between the suite's sizes (issue 51: small and medium instances)
    INSTANCES.setdefault(
        f"romeR{n}",
        (
            f"Rome roads, release defaults: distance loss, eta 1 km, eps 10/km, N = K = {n}",
            "road",
            dict(n_records=n, n_outputs=n, eta=1.0, epsilon=10.0, loss="distance"),
        ),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", default="romeR150,romeR300")
    ap.add_argument("--gap-rel", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", default="graph,all", help="graph, all or both (comma-separated)")
    args = ap.parse_args()
    for name in args.instances.split(","):
        inst = load(name, seed=args.seed)
        for mode in args.modes.split(","):
            load1 = os.getloadavg()[0]
            t0 = time.perf_counter()
            sol = solve(inst, "auto", SolverOptions(all_pairs=mode == "all"), gap_rel=args.gap_rel)
            seconds = time.perf_counter() - t0
            rss = max(resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
            line = {
                "instance": name,
                "N": inst.n_records,
                "K": inst.n_outputs,
                "edges": inst.n_edges,
                "all_pairs": mode == "all",
                "seed": args.seed,
                "seconds": round(seconds, 1),
                "status": sol.status.value,
                "rounds": sol.iterations,
                "rows": sol.extra.get("rows"),
                "metric_rows": sol.extra.get("metric_rows_found", 0),
                "objective": sol.objective,
                "lower_bound": sol.lower_bound,
                "relative_gap": None if sol.gap is None else sol.gap / sol.objective,
                "metric_epsilon": metric_epsilon(inst, sol.z),
                "load": round(load1, 2),
                "peak_rss_mb": round(rss / 1024, 1),
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
