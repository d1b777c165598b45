"""Whose error does the report state? Its per-person figure (:mod:`mdp_core.release.people`, each record's cell
mean) weighted three ways, against the made-up people's own error from their true locations (issue 50;
bench/HISTORY.md, "The table's own people"); and what a DP measurement of their mean error would give.

    python bench/people_weights.py RUN_DIR PEOPLE_CSV [--eps 0.1,0.25,0.5,1]

Weights: ``prior`` (the release's public prior: the report's figure); ``counts`` (the release's published output
counts, aggregates.parquet, each split over the output cell's records by their prior shares: free post-processing);
``true_records`` (the people's true count per record: secret, here only to bound what any reweighting of the
cells can reach). ``truth``: mean over people of sum_k z_rk d(p, o_k) from their true locations
(bench/per_person.py's ``Space``). ``dp``: :func:`mdp_core.release.people.dp_mean_error` on those per-person errors
at each eps (one OpenDP draw; ``scale``: the noise's scale on the mean, relative to the truth). One JSON line.
The people's table is secret for a real population: never run this on one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from per_person import Space  # noqa: E402

from mdp_core.problem.io import read_instance, read_mechanism  # noqa: E402
from mdp_core.problem.microdata import cell_of_record  # noqa: E402
from mdp_core.release import people  # noqa: E402
from mdp_core.release.noise import discrete_laplace  # noqa: E402


def counts_weights(run: Path, inst, prior: np.ndarray) -> np.ndarray:
    """(N,) the published output counts split over each output cell's records by their prior shares (equally
    where the cell's prior is 0)."""
    agg = pd.read_parquet(run / "aggregates.parquet")
    count = agg[agg["level"] == "output"].sort_values("block")["count"].to_numpy(float)
    cell = cell_of_record(inst)
    mass = np.bincount(cell, prior, minlength=inst.n_outputs)[cell]
    members = np.bincount(cell, minlength=inst.n_outputs)[cell]
    return count[cell] * np.where(mass > 0, prior / np.where(mass > 0, mass, 1.0), 1.0 / members)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("people")
    ap.add_argument("--eps", default="0.1,0.25,0.5,1")
    args = ap.parse_args()
    inst = read_instance(args.run / "instance")
    z = read_mechanism(args.run / "mechanism.parquet", inst.n_records, inst.n_outputs)
    prov = json.loads((args.run / "release_provenance.json").read_text())
    limit = float((prov.get("protection") or {}).get("max_distance") or inst.eta)
    c = people.cells(inst, limit)
    values = people.release_values(inst, z, c)
    means = {k: people.cell_means(c, values[k], inst.n_records)[0] for k in ("release", "snap")}
    s = Space(args.run, pd.read_csv(args.people))
    errors = (z[s.snap] * s.dist(s.people, s.outputs)).sum(axis=1)
    truth = {"release": float(errors.mean()), "snap": float(s.pair(s.people, s.records[s.snap]).mean())}
    line: dict = {"run": args.run.resolve().name, "people": len(errors), "records": inst.n_records}
    line |= {"outputs": inst.n_outputs, "max_distance": limit, "truth": truth}
    true_n = np.bincount(s.snap, minlength=inst.n_records).astype(float)
    for name, w in (
        ("prior", inst.prior),
        ("counts", counts_weights(args.run, inst, inst.prior)),
        ("true_records", true_n),
    ):
        got = {k: float(w @ m / w.sum()) for k, m in means.items()}
        line[name] = got | {f"{k}_off_pct": 100 * (got[k] / truth[k] - 1) for k in got}
    lo, hi = people.error_range(inst, z, limit)
    line["range"] = [lo, hi, bool(errors.min() >= lo - 1e-9 and errors.max() <= hi + 1e-9)]
    for eps in (float(e) for e in args.eps.split(",")):
        est, scale = people.dp_mean_error(errors, lo, hi, eps, discrete_laplace)  # made-up people: fresh noise
        line[f"dp_{eps:g}"] = {
            "off_pct": 100 * (est / truth["release"] - 1),
            "scale_pct": 100 * scale / truth["release"],
        }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
