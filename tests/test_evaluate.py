"""Evaluation metrics, checked against hand computations on 3-record examples."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mdp_core.errors import InputError
from mdp_core.problem.datasets import grid
from mdp_core.problem.instance import Instance
from mdp_core.release import evaluate as ev
from mdp_core.solvers.mechanisms import exponential
from mdp_core.solvers.solve import solve

E = math.e


def line3(prior=(0.6, 0.2, 0.2), eps=1.0) -> Instance:
    """Records at x = 0, 1, 2 (outputs = records), neighbours at distance 1, cost |x_i - x_k|."""
    x = np.array([0.0, 1.0, 2.0])
    return Instance(
        prior=np.array(prior),
        costs=np.abs(x[:, None] - x[None, :]),
        edges=np.array([[0, 1], [1, 2]]),
        distances=np.array([1.0, 1.0]),
        epsilon=eps,
        eta=1.5,
        records=pd.DataFrame({"x0": x}),
        outputs=pd.DataFrame({"record_id": [0, 1, 2]}),
    )


Z = np.array([[0.6, 0.3, 0.1], [0.3, 0.4, 0.3], [0.1, 0.3, 0.6]])  # z_12 / z_02 = 3 > e: violates


def test_losses_by_hand():
    inst = line3()
    np.testing.assert_allclose(ev.record_losses(inst, Z), [0.5, 0.6, 0.5])
    row = ev.evaluate_mechanism(inst, Z, "hand", lower_bound=0.4, seconds=1.5)
    assert row["expected_loss"] == pytest.approx(0.6 * 0.5 + 0.2 * 0.6 + 0.2 * 0.5)
    assert row["loss_q95"] == pytest.approx(0.5 + 0.9 * 0.1)  # linear interpolation at 0.95 * 2 = 1.9
    assert row["loss_max"] == pytest.approx(0.6)
    assert row["dist_loss_max"] == pytest.approx(0.6)  # costs are distances here
    assert row["no_privacy_bound"] == 0.0
    assert row["gap"] == pytest.approx(0.52 - 0.4) and row["seconds"] == 1.5
    assert row["n_records"] == 3 and row["n_edges"] == 2 and row["lp_rows"] == 2 * 2 * 3 + 3
    assert row["verified"] is False


def test_realised_eps_and_violations_by_hand():
    inst = line3()
    row = ev.evaluate_mechanism(inst, Z, "hand")
    assert row["realised_epsilon"] == pytest.approx(math.log(3.0))
    # 12 directed (pair, k) entries; z_12 = 0.3 > e * z_02 = 0.2718 and symmetric z_10 > e * z_20
    assert row["gv_count"] == 2
    assert row["gv_ratio"] == pytest.approx(2 / 12)
    assert row["gv_max"] == pytest.approx(0.3 - E * 0.1)
    assert row["gv_mean"] == pytest.approx(0.3 - E * 0.1)
    ok = ev.geo_ind_violations(line3(eps=2.0), Z)
    assert ok == {"gv_ratio": 0.0, "gv_count": 0, "gv_max": 0.0, "gv_mean": 0.0}


def test_eps_tight_by_hand():
    inst = line3()
    # worst pair 1 -> 0 at k = 2: 0.3 - e^eps 0.1 <= 0.001  <=>  eps >= ln 2.99
    assert ev.eps_tight(inst, Z, 1e-3) == pytest.approx(math.log(2.99), rel=1e-6)
    # delta = 0: eps_tight is the realised epsilon
    assert ev.eps_tight(inst, Z, 0.0) == pytest.approx(math.log(3.0), rel=1e-6)
    # a zero opposite 0.3 > delta: no epsilon suffices
    z0 = np.array([[0.7, 0.3, 0.0], [0.3, 0.4, 0.3], [0.1, 0.3, 0.6]])
    assert ev.eps_tight(inst, z0, 1e-3) == math.inf
    # identical rows need no privacy loss at all
    assert ev.eps_tight(inst, np.full((3, 3), 1 / 3)) == 0.0


def test_adversary_error_by_hand():
    # joint p_i z_ik; output 0 -> guess record 0 (0.1), output 1 -> 0 (0.2), output 2 -> 1 or 2 (0.18)
    assert ev.adversary_error(line3(), Z) == pytest.approx(0.1 + 0.2 + 0.18)
    # an uninformative mechanism: the adversary guesses the prior's median record 0 every time
    u = np.full((3, 3), 1 / 3)
    assert ev.adversary_error(line3(), u) == pytest.approx(0.2 * 1 + 0.2 * 2)


def test_packing_bound_by_hand():
    inst = line3()
    pb = ev.packing_bound(inst)
    # S = {0, 2, 1}, r = 1/2: N(1, S) = 1 + 2/e is the largest; bound = (1/2)(1 - 1/(1 + 2/e))
    assert pb["packing_centers"] == 3
    assert pb["packing_radius"] == pytest.approx(0.5)
    assert pb["packing_bound"] == pytest.approx(0.5 * (1 - 1 / (1 + 2 / E)), rel=1e-8)


def test_bounds_hold_for_real_mechanisms_on_grid():
    inst = grid(6, 7, n_outputs=15, epsilon=3.0, eta=1.5, seed=1)
    lp = solve(inst, "lp")
    rows = [
        ev.evaluate_mechanism(inst, lp.z, "lp", lower_bound=lp.lower_bound, seconds=lp.seconds),
        ev.evaluate_mechanism(inst, exponential(inst), "exp"),
    ]
    for r in rows:
        assert r["verified"] and r["gv_count"] == 0
        assert r["realised_epsilon"] <= inst.epsilon * (1 + 1e-6)
        assert r["eps_tight"] <= r["realised_epsilon"] * (1 + 1e-6)
        assert r["no_privacy_bound"] <= r["expected_loss"]
        assert 0 < r["packing_bound"] <= r["dist_loss_max"]
        assert r["adversary_error"] > 0
    assert rows[0]["expected_loss"] <= rows[1]["expected_loss"] + 1e-9  # the LP optimum beats ExpMech
    assert rows[0]["expected_loss"] >= lp.lower_bound - 1e-6
    df = ev.evaluation_table(rows)
    assert list(df.columns) == ev.COLUMNS and len(df) == 2
    assert list(df.method) == ["lp", "exp"]
    assert df.lower_bound.isna().tolist() == [False, True]


def test_evaluation_table_roundtrips_parquet(tmp_path):
    inst = line3()
    rows = [ev.evaluate_mechanism(inst, Z, "a"), ev.evaluate_mechanism(inst, np.full((3, 3), 1 / 3), "b")]
    df = ev.evaluation_table(rows)
    df.to_parquet(tmp_path / "evaluation.parquet")
    back = pd.read_parquet(tmp_path / "evaluation.parquet")
    assert list(back.columns) == ev.COLUMNS
    assert back.loc[1, "realised_epsilon"] == 0.0
    with pytest.raises(InputError, match="bogus"):
        ev.evaluation_table([{"method": "x", "bogus": 1}])


ROME_NODES = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "rome_center" / "nodes.csv"


@pytest.mark.skipif(not ROME_NODES.is_file(), reason="shared Rome data ../shared/data/rome_center absent")
def test_real_rome_nodes_evaluation():
    """60 real Rome road nodes (haversine km): the packing bound and no-privacy bound hold."""
    from mdp_core.problem.datasets.common import from_points
    from mdp_core.solvers.mechanisms import record_output_distances

    nodes = pd.read_csv(ROME_NODES)
    pts = nodes[["y", "x"]].drop_duplicates().sample(60, random_state=1).to_numpy()
    inst = from_points(pts, "haversine", 0.5, 3.0, np.ones((60, 60)), output_record_ids=np.arange(60))
    inst = inst.replace(costs=record_output_distances(inst))
    lp = solve(inst, "lp")
    row = ev.evaluate_mechanism(inst, lp.z, "lp", lower_bound=lp.lower_bound, seconds=lp.seconds)
    assert row["verified"] and row["gv_count"] == 0
    assert row["no_privacy_bound"] == 0.0  # outputs are the records: reporting the truth costs 0
    assert 0 < row["packing_bound"] <= row["dist_loss_max"]
    assert row["eps_tight"] <= inst.epsilon * (1 + 1e-6)
    assert row["relative_gap"] < 1e-6
