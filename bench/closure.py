"""The closure (``smooth_to_mdp``) on row generation's LP points: Newton steps against the former alternation.

    python bench/closure.py --instance rome500                            # rowgen once, then both closures
    python bench/closure.py --instance rome1000 --points scratch/points   # reuse the points saved there
    python bench/closure.py --random laplace --cases 120                  # small random inputs, one summary

Runs ``rowgen.method`` once (threads = 1, ``--gap-rel``) on a ``bench/suite.py`` instance and saves each
round's closure input (the LP point, clipped at 0) as ``<points>/<instance>_r<round>.npy``; when such files
exist already it skips the run and reads them. The LP points do not depend on the closure (rowgen adds rows
from the LP point's violations), only the number of rounds can (the upper bound stops it). Then it times
``smooth_to_mdp`` on every point twice, in CPU seconds (``time.process_time``): the default (Newton steps)
and ``newton_rounds=0`` (the plain alternation of majorant and row normalisation used before). One JSON
line per point: sub-rounds, CPU seconds and objective of each, both verified, the relative objective change,
and whether a second run gave the same bytes.

``--random laplace``: seeded random grid / synthetic instances (3-150 records) and their Monte Carlo planar
Laplace estimates (200-5,000 samples; those that already pass are skipped); ``--random noisy``: random
point sets with the exponential mechanism under lognormal noise (sigma up to 1) and up to 30 % zeros. One
JSON line: how many inputs each closure passed, their sub-rounds, and the relative cost change where both
passed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instance", default="rome500", help="a bench/suite.py instance name")
    ap.add_argument("--gap-rel", type=float, default=1e-3)
    ap.add_argument("--points", default=str(ROOT / "scratch" / "closure_points"), help="where LP points are kept")
    ap.add_argument("--rome", default=None, help="directory of the Rome node/edge tables (default: suite's)")
    ap.add_argument("--random", choices=("laplace", "noisy"), default=None, help="random small inputs instead")
    ap.add_argument("--cases", type=int, default=120, help="how many random inputs")
    a = ap.parse_args(argv)
    if a.random:
        random_inputs(a.random, a.cases)
        return

    sys.path.insert(0, str(ROOT / "bench"))
    import numpy as np
    import suite  # bench/ is not a package

    from mdp_core.declarations.solver_options import SolverOptions
    from mdp_core.solvers import rowgen
    from mdp_core.solvers.mechanisms import smooth_to_mdp
    from mdp_core.solvers.verify import objective, verify

    inst = suite.load(a.instance, a.rome)
    points = Path(a.points)
    files = sorted(points.glob(f"{a.instance}_r*.npy"), key=lambda p: int(p.stem.rsplit("_r", 1)[1]))
    if not files:
        points.mkdir(parents=True, exist_ok=True)
        closure = rowgen.smooth_to_mdp

        def saving(instance: Any, z: Any, *args: Any, **kw: Any) -> Any:
            files.append(points / f"{a.instance}_r{len(files) + 1}.npy")
            np.save(files[-1], np.asarray(z))
            return closure(instance, z, *args, **kw)

        rowgen.smooth_to_mdp = saving
        params = rowgen.RowgenOptions(gap_rel=a.gap_rel)
        rowgen.method(
            inst, SolverOptions(time_limit=3600.0, threads=1), lambda line: print(line, file=sys.stderr), params
        )
        rowgen.smooth_to_mdp = closure
    for f in files:
        z = np.load(f)
        row: dict[str, Any] = {"instance": a.instance, "point": f.name, "N": inst.n_records, "K": inst.n_outputs}
        for name, (out, rounds, cpu) in both(inst, z).items():
            row[name] = {
                "rounds": rounds,
                "cpu_seconds": round(cpu, 2),
                "objective": objective(inst, out),
                "verified": bool(verify(inst, out).passed),
            }
            if name == "newton":
                row["same_bytes"] = smooth_to_mdp(inst, z)[0].tobytes() == out.tobytes()
        row["relative_objective_change"] = row["newton"]["objective"] / row["plain"]["objective"] - 1.0
        print(json.dumps(row), flush=True)


def both(inst: Any, z: Any) -> dict[str, tuple[Any, int, float]]:
    """``smooth_to_mdp`` with Newton steps (the default) and without (``newton_rounds=0``, the former
    alternation): name -> (closure, sub-rounds, CPU seconds)."""
    from mdp_core.solvers.mechanisms import smooth_to_mdp

    got = {}
    for name, kw in (("newton", {}), ("plain", {"newton_rounds": 0})):
        c = time.process_time()
        out, rounds = smooth_to_mdp(inst, z, **kw)
        got[name] = (out, rounds, time.process_time() - c)
    return got


def random_inputs(kind: str, cases: int) -> None:
    import numpy as np

    from mdp_core.problem.datasets import grid, synthetic
    from mdp_core.problem.datasets.common import from_points
    from mdp_core.solvers import mechanisms as mech
    from mdp_core.solvers.verify import objective, passes

    rng = np.random.default_rng(7)
    res: dict[str, list[Any]] = {"newton": [], "plain": []}
    rel = []
    for t in range(cases):
        if kind == "laplace":
            if t % 2:
                shape = (int(rng.integers(3, 12)), int(rng.integers(3, 12)))
                eps, eta = float(rng.uniform(0.3, 5)), float(rng.uniform(1.0, 3.0))
                inst = grid(*shape, n_outputs=None, epsilon=eps, eta=eta, seed=t)
            else:
                n = int(rng.integers(10, 150))
                k, eta, eps = int(rng.integers(3, min(n, 40))), float(rng.uniform(0.3, 2)), float(rng.uniform(0.5, 10))
                inst = synthetic(n_records=n, n_outputs=k, dim=2, sigma=1.0, eta=eta, epsilon=eps, seed=t)
            z, _ = mech.planar_laplace(inst, n_samples=int(rng.choice([200, 1000, 5000])), seed=t)
            if passes(inst, z):
                continue
        else:
            n, k = int(rng.integers(2, 40)), int(rng.integers(1, 10))
            eta, eps = float(rng.uniform(0.1, 1.2)), float(rng.uniform(0.5, 30))
            pts = rng.random((n, 2))
            outs = rng.choice(n, size=min(k, n), replace=False)
            costs = np.linalg.norm(pts[:, None] - pts[outs][None], axis=2)
            inst = from_points(pts, "euclidean", eta, eps, costs, output_record_ids=outs)
            noise = rng.lognormal(0, rng.uniform(0.01, 1.0), costs.shape)
            z = mech.exponential(inst) * noise * (rng.random(costs.shape) > rng.uniform(0, 0.3))
            z[z.sum(axis=1) == 0] = 1.0
            z /= z.sum(axis=1, keepdims=True)
        got = {}
        for name, (out, rounds, cpu) in both(inst, z).items():
            got[name] = (bool(passes(inst, out)), rounds, cpu, objective(inst, out))
            res[name].append(got[name])
        if got["newton"][0] and got["plain"][0]:
            rel.append(got["newton"][3] / got["plain"][3] - 1.0)
    r = np.array(rel)
    out: dict[str, Any] = {"random": kind, "inputs": len(res["newton"])}
    for name, rows in res.items():
        ok, rounds, cpu = (np.array([x[i] for x in rows]) for i in range(3))
        out[name] = {
            "passed": int(ok.sum()),
            "mean_rounds": round(float(rounds.mean()), 2),
            "max_rounds": int(rounds.max()),
        }
        out[name]["cpu_seconds"] = round(float(cpu.sum()), 2)
    out["both_passed"] = int(r.size)
    out["newton_cost_lower"], out["newton_cost_higher"] = int(np.sum(r < -1e-9)), int(np.sum(r > 1e-9))
    out["relative_cost_change"] = {"mean": float(r.mean()), "min": float(r.min()), "max": float(r.max())}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
