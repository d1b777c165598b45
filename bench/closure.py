"""The closure (``smooth_to_mdp``) on row generation's LP points: Newton steps against the former alternation.

    python bench/closure.py --instance rome500                            # rowgen once, then both closures
    python bench/closure.py --instance rome1000 --points scratch/points   # reuse the points saved there

Runs ``rowgen.method`` once (threads = 1, ``--gap-rel``) on a ``bench/suite.py`` instance and saves each
round's closure input (the LP point, clipped at 0) as ``<points>/<instance>_r<round>.npy``; when such files
exist already it skips the run and reads them. The LP points do not depend on the closure (rowgen adds rows
from the LP point's violations), only the number of rounds can (the upper bound stops it). Then it times
``smooth_to_mdp`` on every point twice, in CPU seconds (``time.process_time``): the default (Newton steps)
and ``newton_rounds=0`` (the plain alternation of majorant and row normalisation used before). One JSON
line per point: sub-rounds, CPU seconds and objective of each, both verified, the relative objective change,
and whether a second run gave the same bytes.
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
    a = ap.parse_args(argv)

    sys.path.insert(0, str(ROOT / "bench"))
    import numpy as np
    import suite  # bench/ is not a package

    from mdp_core import rowgen
    from mdp_core.highs import SolverOptions
    from mdp_core.mechanisms import smooth_to_mdp
    from mdp_core.verify import objective, verify

    if a.rome:
        suite.ROME = Path(a.rome)
    inst = suite.load(a.instance)
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
        for name, kw in (("newton", {}), ("plain", {"newton_rounds": 0})):
            c = time.process_time()
            out, rounds = smooth_to_mdp(inst, z, **kw)
            cpu = time.process_time() - c
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


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
