"""Instance validation: every bad input raises InputError with a one-line message naming the problem."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mdp_core.errors import InputError
from mdp_core.problem.instance import PRIOR_TOL, Instance


def base(**changes) -> dict:
    """A valid 3-record, 2-output instance (path 0 - 1 - 2) as keyword arguments."""
    kw = dict(
        prior=np.array([0.5, 0.3, 0.2]),
        costs=np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 1.0]]),
        edges=np.array([[0, 1], [1, 2]]),
        distances=np.array([1.0, 0.5]),
        epsilon=1.0,
        eta=1.0,
    )
    kw.update(changes)
    return kw


def rejects(match: str, **changes) -> str:
    with pytest.raises(InputError, match=match) as info:
        Instance(**base(**changes))
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_valid_instance_and_sizes():
    inst = Instance(**base())
    assert (inst.n_records, inst.n_outputs, inst.n_edges) == (3, 2, 2)
    assert inst.prior.dtype == np.float64 and inst.edges.dtype == np.int64
    assert inst.edges.flags.c_contiguous


def test_no_edges_is_valid():
    inst = Instance(**base(edges=np.zeros((0, 2)), distances=np.zeros(0)))
    assert inst.n_edges == 0 and inst.edges.shape == (0, 2)


@pytest.mark.parametrize("eps", [0.0, -1.0, np.nan, np.inf])
def test_epsilon_must_be_positive_finite(eps):
    rejects("epsilon", epsilon=eps)


@pytest.mark.parametrize("eta", [0.0, -0.5, np.nan, np.inf])
def test_eta_must_be_positive_finite(eta):
    rejects("eta", eta=eta)


def test_prior_nan():
    rejects("prior.*NaN", prior=np.array([0.5, np.nan, 0.5]))


def test_prior_infinite():
    rejects("prior.*infinite", prior=np.array([np.inf, 0.0, 0.0]))


def test_prior_negative():
    rejects("prior.*negative", prior=np.array([0.6, 0.6, -0.2]))


def test_prior_must_sum_to_one_within_tolerance():
    rejects("sum to 1", prior=np.array([0.5, 0.3, 0.2 + 3 * PRIOR_TOL]))
    rejects("sum to 1", prior=np.array([0.5, 0.3, 0.1]))
    Instance(**base(prior=np.array([0.5, 0.3, 0.2 + 0.5 * PRIOR_TOL])))  # within tolerance: accepted


def test_prior_empty_or_2d():
    rejects("prior", prior=np.zeros(0), costs=np.zeros((0, 2)), edges=np.zeros((0, 2)), distances=np.zeros(0))
    rejects("prior", prior=np.full((3, 1), 1 / 3))


def test_costs_wrong_shape():
    rejects("costs must have shape", costs=np.ones((2, 2)))
    rejects("costs must have shape", costs=np.ones((3, 0)))
    rejects("costs must have shape", costs=np.ones(3))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_costs_not_finite(bad):
    c = np.ones((3, 2))
    c[1, 1] = bad
    rejects("costs.*NaN or infinite", costs=c)


def test_edge_self_loop():
    rejects("self-loop", edges=np.array([[0, 1], [2, 2]]))


def test_edge_not_ordered():
    rejects("i < j", edges=np.array([[1, 0], [1, 2]]))


@pytest.mark.parametrize("pair", [[0, 3], [-1, 2]])
def test_edge_out_of_range(pair):
    rejects("out of range", edges=np.array([[0, 1], pair]))


def test_edge_duplicates():
    rejects("duplicate", edges=np.array([[0, 1], [0, 1]]))


def test_edge_distance_above_eta():
    msg = rejects("> eta", distances=np.array([1.0, 1.5]))
    assert "(1, 2)" in msg  # names the offending edge


@pytest.mark.parametrize("d", [0.0, -0.1])
def test_edge_distance_not_positive(d):
    rejects("> 0", distances=np.array([1.0, d]))


def test_edge_distance_nan():
    rejects("NaN", distances=np.array([1.0, np.nan]))


def test_edge_shape_and_count():
    rejects("edges must have shape", edges=np.array([[0, 1, 2]]), distances=np.array([1.0]))
    rejects("2 edges but 1 distances", distances=np.array([1.0]))


def test_unknown_metric():
    rejects("metric", metric="manhattan")


def test_records_and_outputs_tables_must_match_sizes():
    rejects("records table has 2 rows", records=pd.DataFrame({"x0": [0.0, 1.0]}))
    rejects("outputs table has 3 rows", outputs=pd.DataFrame({"record_id": [0, 1, 2]}))
    rejects("record_id out of range", outputs=pd.DataFrame({"record_id": [0, 3]}))
    rejects("record_id must be integers", outputs=pd.DataFrame({"record_id": [0.0, np.nan]}))


def test_replace_revalidates():
    inst = Instance(**base())
    assert inst.replace(epsilon=2.0).epsilon == 2.0
    with pytest.raises(InputError, match="epsilon"):
        inst.replace(epsilon=0.0)


def test_coordinates():
    rec = pd.DataFrame({"x1": [0.0, 1.0, 1.5], "x0": [0.0, 0.0, 0.0], "label": ["a", "b", "c"]})
    inst = Instance(**base(records=rec, outputs=pd.DataFrame({"record_id": [2, 0]})))
    assert inst.coordinate_columns() == ["x0", "x1"]
    np.testing.assert_array_equal(inst.record_points(), [[0, 0], [0, 1], [0, 1.5]])
    np.testing.assert_array_equal(inst.output_points(), [[0, 1.5], [0, 0]])
    with pytest.raises(InputError, match="no record coordinates"):
        Instance(**base()).record_points()
    with pytest.raises(InputError, match="no output coordinates"):
        Instance(**base(records=rec)).output_points()
