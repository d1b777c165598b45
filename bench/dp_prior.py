#!/usr/bin/env python
"""The DP-prior release's solve, round by round, and its people's error (issue 51's second Done-when).

    nice -n 10 python bench/dp_prior.py [--instance romeR500] [--seeds 5111,5112] [--people 2000]
        [--eps-prior 0.5] [--gap-rel 1e-2] [--time-limit 3600] [--uniform]

For each table (``bench/rome_people.py --seed S --n PEOPLE``, 30 clusters) the instance's records get a DP
prior made as `tasks/prior.py` makes it (each person snapped to the nearest record by haversine distance, a
histogram, discrete Laplace noise of scale 2 / eps_prior, max(., 0) + 1, normalised: `bench/prior_pays.dp_prior`,
numpy's seeded two-sided geometric instead of OpenDP's, the same distribution, seeded with S so the run repeats:
a bench only, never a release) and is solved as a release solves it (``auto``, gap ``--gap-rel``), in this
process (``isolate=False``) so the rounds' closures can be watched. ``--uniform`` also solves the uniform prior
(the same instance for every table: solved once).

JSON lines. Per round (``"kind": "round"``): ``round``, ``lp_seconds`` (the round's LP, wall), ``seconds``
(since the solve began), ``lower_bound``, ``upper_bound`` (best so far), ``gap`` (relative),
``candidates`` (the round's closure candidates' costs: ``plain`` the closure of the LP point, ``softened``,
``lowered``; None when not tried; a candidate whose closure fails verification is still listed: the winner is
the one whose cost is the round's closure) and ``winner``. Per solve and table (``"kind": "solve"``):
``seconds``, ``cpu_seconds`` (this process, every thread), ``status``, ``rounds``, ``relative_gap``,
``objective`` (expected km under the solved prior), ``per_person`` (km, snapping included: mean over people of
sum_k z_{r(p) k} d(p, o_k), haversine, as `bench/per_person.py`), ``per_record_uniform`` (expected km per
record, uniform weights), ``snap``, ``eps_prior`` (the DP prior spends it on top of the mechanism's eps per km)
and ``load`` (1-minute load average before and after: the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for where in (REPO, REPO / "bench"):
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))

import rome_people  # noqa: E402
from per_person import haversine  # noqa: E402
from prior_pays import dp_prior  # noqa: E402
from suite import ROME, load  # noqa: E402

from mdp_core.declarations.solver_options import SolverOptions  # noqa: E402
from mdp_core.problem.microdata import histogram  # noqa: E402
from mdp_core.solvers import rowgen  # noqa: E402
from mdp_core.solvers.solve import solve  # noqa: E402
from mdp_core.solvers.verify import objective  # noqa: E402

TAGS = {rowgen.SOFT_ROUNDS: "softened", 50: "lowered"}  # _closure's smooth_to_mdp calls, by max_rounds


class Watch:
    """Records, for each of rowgen's round closures, the cost of every candidate it closed (by the order and
    ``max_rounds`` of its :func:`smooth_to_mdp` calls) and the cost it returned. Bench instrumentation only:
    it wraps the module's functions and changes no result."""

    def __init__(self) -> None:
        self.rounds: list[dict[str, Any]] = []
        self._now: dict[str, float] = {}
        self._smooth, self._closure = rowgen.smooth_to_mdp, rowgen._closure

    def __enter__(self) -> Watch:
        def smooth(instance, z, max_rounds=None, **kw):  # type: ignore[no-untyped-def]
            out = self._smooth(instance, z, **kw) if max_rounds is None else self._smooth(instance, z, max_rounds, **kw)
            self._now["plain" if max_rounds is None else TAGS.get(max_rounds, str(max_rounds))] = float(
                objective(instance, out[0])
            )
            return out

        def closure(*a, **kw):  # type: ignore[no-untyped-def]
            self._now = {}
            best, ub = self._closure(*a, **kw)
            won = [t for t, cost in self._now.items() if np.isclose(cost, ub, rtol=1e-12, atol=0)]
            self.rounds.append({"candidates": dict(self._now), "closure": ub, "winner": won[0] if won else None})
            return best, ub

        rowgen.smooth_to_mdp, rowgen._closure = smooth, closure
        return self

    def __exit__(self, *exc: object) -> None:
        rowgen.smooth_to_mdp, rowgen._closure = self._smooth, self._closure


def _progress(text: str) -> None:
    """The solve's progress lines on stderr (stdout stays JSON lines)."""
    print(time.strftime("%H:%M:%S"), text, file=sys.stderr, flush=True)


def run(inst, prior: np.ndarray, args: argparse.Namespace, tag: dict[str, Any], tables: list) -> None:  # type: ignore[no-untyped-def]
    """Solve ``inst`` with ``prior`` (N,) as a release does; print its rounds and, for each of ``tables``
    ((seed, snap (P,), d_po (P, K) km, d_snap (P,) km)), its people's error."""
    load0 = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    with Watch() as watch:
        options = SolverOptions(time_limit=args.time_limit)
        sol = solve(inst.replace(prior=prior), "auto", options, _progress, isolate=False, gap_rel=args.gap_rel)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    tr = sol.trace
    for r in range(0 if tr is None else len(tr)):
        row = tr.iloc[r]
        lb, ub = float(row["lower_bound"]), float(row["upper_bound"])
        seen = watch.rounds[r] if r < len(watch.rounds) else {}
        line = tag | {"kind": "round", "round": int(row["iteration"]), "lp_seconds": round(float(row["lp_seconds"]), 1)}
        line |= {"seconds": round(float(row["seconds"]), 1), "lower_bound": lb, "upper_bound": ub}
        line |= {"gap": (ub - lb) / ub if np.isfinite(ub) else None}
        line |= {"candidates": seen.get("candidates"), "winner": seen.get("winner")}
        print(json.dumps(line), flush=True)
    for seed, snap, d_po, d_snap in tables:
        line = tag | {"kind": "solve", "table_seed": seed, "people": len(snap), "seconds": round(seconds, 1)}
        line |= {
            "cpu_seconds": round(cpu, 1),
            "status": sol.status.value,
            "rounds": sol.iterations,
            "objective": sol.objective,
        }
        line |= {"relative_gap": None if sol.gap is None else sol.gap / sol.objective}
        line |= {"per_person": float((sol.z[snap] * d_po).sum(axis=1).mean()), "snap": float(d_snap.mean())}
        line |= {"per_record_uniform": float((sol.z * inst.costs).sum(axis=1).mean())}
        line |= {"load": [round(load0, 2), round(os.getloadavg()[0], 2)]}
        print(json.dumps(line), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instance", default="romeR500")
    ap.add_argument("--seeds", default="5111,5112", help="people tables (rome_people seeds); the noise uses the same")
    ap.add_argument("--people", type=int, default=2000)
    ap.add_argument("--eps-prior", type=float, default=0.5)
    ap.add_argument("--gap-rel", type=float, default=1e-2, help="a release's gap (flows.config.RELEASE_GAP_REL)")
    ap.add_argument("--time-limit", type=float, default=3600.0)
    ap.add_argument("--uniform", action="store_true", help="also the uniform prior (once, every table's people)")
    args = ap.parse_args()
    inst = load(args.instance)
    rec, out = inst.record_points(), inst.output_points()
    tables = []
    for seed in (int(s) for s in args.seeds.split(",")):
        people = rome_people.people(ROME, args.people, seed)[["lat", "lon"]].to_numpy()
        d_pr = haversine(people, rec)
        snap = d_pr.argmin(axis=1)
        tables.append((seed, snap, haversine(people, out), d_pr[np.arange(len(people)), snap]))
    for seed, snap, d_po, d_snap in tables:
        counts = histogram(snap, inst.n_records)
        prior = dp_prior(counts, args.eps_prior, np.random.default_rng(seed))
        tag = {"instance": args.instance, "table_seed": seed, "prior": "dp", "eps_prior": args.eps_prior}
        tag |= {"prior_max_over_min": float(prior.max() / prior.min())}
        run(inst, prior, args, tag, [(seed, snap, d_po, d_snap)])
    if args.uniform:  # the same mechanism for every table: solved once
        run(inst, inst.prior, args, {"instance": args.instance, "prior": "uniform", "eps_prior": 0.0}, tables)


if __name__ == "__main__":
    main()
