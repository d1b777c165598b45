"""bench/dp_prior.py's watch on rowgen's closures (issue 51): it names the candidate each round's upper bound came
from and changes no result. Real rowgen solves on Rome road nodes with a DP-like prior."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from mdp_core.problem.datasets import registry
from mdp_core.solvers import rowgen
from mdp_core.solvers.solve import solve

REPO = Path(__file__).resolve().parents[1]
ROME = REPO / ".." / "shared" / "data" / "rome_center"
sys.path.insert(0, str(REPO / "bench"))

import dp_prior  # noqa: E402
from prior_pays import dp_prior as make_prior  # noqa: E402


@pytest.mark.skipif(not (ROME / "nodes.csv").is_file(), reason="shared Rome data absent")
def test_the_watch_names_each_rounds_winning_closure_and_changes_nothing():
    params = dict(nodes=str(ROME / "nodes.csv"), edges=str(ROME / "edges.csv"), n_records=80, n_outputs=40)
    inst = registry.load("road", params | dict(eta=1.0, epsilon=10.0, loss="distance"))
    rng = np.random.default_rng(5)
    counts = np.zeros(inst.n_records, np.int64)
    counts[:10] = rng.integers(20, 60, 10)  # a cluster of heavy records, the rest empty
    inst = inst.replace(prior=make_prior(counts, 0.5, rng))
    assert inst.prior.max() / inst.prior.min() > 10
    original = rowgen._closure
    args = dict(isolate=False, gap_rel=1e-4, support_tau=1e-5)
    plain = solve(inst, "rowgen", **args)
    with dp_prior.Watch() as watch:
        seen = solve(inst, "rowgen", **args)
    assert rowgen._closure is original  # restored
    assert np.array_equal(plain.z, seen.z) and plain.lower_bound == seen.lower_bound
    ub = seen.trace["upper_bound"].to_numpy()
    assert len(watch.rounds) == len(ub) >= 2
    closures = np.array([r["closure"] for r in watch.rounds])
    assert np.allclose(np.minimum.accumulate(closures), ub, rtol=1e-12)  # the trace's best-so-far
    for r in watch.rounds:
        assert {"plain", "lowered"} <= set(r["candidates"])  # a non-uniform prior: the cut spikes are closed too
        assert r["winner"] in r["candidates"] and r["candidates"][r["winner"]] == pytest.approx(r["closure"], rel=1e-12)
    assert seen.objective <= ub[-1] * (1 + 1e-9)
