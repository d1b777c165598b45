#!/usr/bin/env python
"""Does optimising for a DP prior of the people lower their error? (issue 51) One release-class instance, one
made-up table of people (`bench/rome_people.py`), two mechanisms at the same eps per km: one for the uniform
prior, one for a DP histogram of the people (the release's ``prior = "dp"``), both solved by `auto`.

    nice -n 10 python bench/prior_pays.py [--instance romeR300] [--seeds 4711,4712] [--per-record 4]
        [--eps-prior 0.5] [--gap-rel 1e-2]

The DP prior is built as `tasks/prior.py` builds it (a histogram of the people snapped to the records, discrete
Laplace noise of scale 2 / eps_prior, max(., 0) + 1, normalised) but with numpy's seeded two-sided geometric noise
instead of OpenDP's (the same distribution; seeded, so the run repeats). The DP release spends eps_prior more
(additive) than the uniform one for the same eps per km. One JSON line per (table, prior): ``seconds``,
``rounds``, ``relative_gap``, the solve's trace (lower, upper bound per round) and ``per_person`` (km, snapping
included: mean over people of sum_k z_{r(p) k} d(p, o_k), haversine, as `bench/per_person.py`), ``per_record``
(the instance's own objective under the uniform prior) and ``snap``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for where in (REPO, REPO / "bench"):
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))

import rome_people  # noqa: E402
from per_person import haversine  # noqa: E402
from suite import INSTANCES, ROME, load  # noqa: E402

from mdp_core.problem.microdata import histogram  # noqa: E402
from mdp_core.solvers.result import Status  # noqa: E402
from mdp_core.solvers.solve import solve  # noqa: E402

for n in (300, 400):  # the release class between the suite's sizes (as bench/all_pairs.py)
    INSTANCES.setdefault(
        f"romeR{n}",
        (
            f"Rome roads, release defaults: distance loss, eta 1 km, eps 10/km, N = K = {n}",
            "road",
            dict(n_records=n, n_outputs=n, eta=1.0, epsilon=10.0, loss="distance"),
        ),
    )


def dp_prior(counts: np.ndarray, eps_prior: float, rng: np.random.Generator) -> np.ndarray:
    """max(counts + discrete Laplace(scale 2 / eps_prior), 0) + 1, normalised (tasks/prior.py's post-processing)."""
    q = 1.0 - np.exp(-eps_prior / 2.0)  # P(X = x) ~ exp(-|x| eps / 2): the difference of two geometrics
    noisy = counts + rng.geometric(q, counts.size) - rng.geometric(q, counts.size)
    p = np.maximum(noisy, 0).astype(np.float64) + 1.0
    return p / p.sum()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instance", default="romeR300")
    ap.add_argument("--seeds", default="4711,4712", help="people tables (rome_people seeds); the noise uses the same")
    ap.add_argument("--per-record", type=float, default=4.0, help="people per record (the issue's 2,000 on 500)")
    ap.add_argument("--eps-prior", type=float, default=0.5)
    ap.add_argument("--gap-rel", type=float, default=1e-2)
    ap.add_argument("--true", action="store_true", help="also the people's exact histogram as the prior (a ceiling)")
    args = ap.parse_args()
    inst = load(args.instance)
    rec, out = inst.record_points(), inst.output_points()
    for seed in (int(s) for s in args.seeds.split(",")):
        people = rome_people.people(ROME, int(args.per_record * inst.n_records), seed)[["lat", "lon"]].to_numpy()
        d_pr = haversine(people, rec)
        snap = d_pr.argmin(axis=1)
        d_po = haversine(people, out)
        counts = histogram(snap, inst.n_records)
        prior = dp_prior(counts, args.eps_prior, np.random.default_rng(seed))
        priors = [("uniform", inst.prior), ("dp", prior)]
        priors += [("true", counts / counts.sum())] if args.true else []  # the ceiling: no noise (never a release)
        for name, p in priors:
            t0 = time.perf_counter()
            sol = solve(inst.replace(prior=p), "auto", gap_rel=args.gap_rel)
            tr = sol.trace
            line = {
                "instance": args.instance,
                "table_seed": seed,
                "people": len(people),
                "prior": name,
                "eps_prior": args.eps_prior if name == "dp" else 0.0,
                "prior_max_over_min": float(p.max() / p.min()) if p.min() > 0 else None,
                "seconds": round(time.perf_counter() - t0, 1),
                "status": Status(sol.status).value,
                "rounds": int(sol.iterations),
                "relative_gap": sol.gap / sol.objective if sol.gap is not None else None,
                "bounds": []
                if tr is None
                else [[round(a, 7), round(b, 7)] for a, b in zip(tr.lower_bound, tr.upper_bound, strict=True)],
                "per_person": float((sol.z[snap] * d_po).sum(axis=1).mean()),
                "per_record": float((sol.z * inst.costs).sum(axis=1).mean()),
                "snap": float(d_pr[np.arange(len(people)), snap].mean()),
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
