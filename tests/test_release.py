"""Release stage: individuals and perturbation from the verified mechanism, driven by a given Generator."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mdp_core.errors import InputError
from mdp_core.problem.datasets import grid
from mdp_core.release import perturb
from mdp_core.solvers.mechanisms import exponential

rng = np.random.default_rng


def test_draw_individuals_follows_prior_and_is_seeded():
    prior = np.array([0.5, 0.0, 0.3, 0.2])
    a = perturb.draw_individuals(prior, 20_000, rng(1))
    assert a.dtype == np.int64 and a.shape == (20_000,)
    np.testing.assert_array_equal(a, perturb.draw_individuals(prior, 20_000, rng(1)))
    assert not np.array_equal(a, perturb.draw_individuals(prior, 20_000, rng(2)))
    freq = np.bincount(a, minlength=4) / a.size
    assert freq[1] == 0
    np.testing.assert_allclose(freq, prior, atol=0.015)  # > 4 standard errors
    assert perturb.draw_individuals(prior, 0, rng(0)).shape == (0,)
    with pytest.raises(InputError):
        perturb.draw_individuals(np.array([0.5, 0.6]), 10, rng(0))
    with pytest.raises(InputError):
        perturb.draw_individuals(prior, -1, rng(0))


def test_perturb_samples_rows_and_never_zero_mass_outputs():
    z = np.array([[0.0, 0.7, 0.0, 0.3], [0.25, 0.25, 0.25, 0.25], [0.0, 0.0, 0.0, 1.0]])
    rec = np.repeat(np.arange(3), 30_000)
    out = perturb.perturb(z, rec, rng(4))
    np.testing.assert_array_equal(out, perturb.perturb(z, rec, rng(4)))
    for i in range(3):
        freq = np.bincount(out[rec == i], minlength=4) / 30_000
        np.testing.assert_allclose(freq, z[i], atol=0.012)
        assert np.all(freq[z[i] == 0] == 0)
    with pytest.raises(InputError):
        perturb.perturb(z, np.array([3]), rng(0))
    with pytest.raises(InputError):
        perturb.perturb(z * 2, np.array([0]), rng(0))
    with pytest.raises(InputError, match="Generator"):
        perturb.perturb(z, np.array([0]), 4)  # a bare seed is refused: the stream must be given


def test_release_on_grid_writes_no_secret_ids(tmp_path):
    inst = grid(4, 5, n_outputs=6, epsilon=2.0, eta=1.5, seed=0)
    z = exponential(inst)
    rec = perturb.draw_individuals(inst.prior, 500, rng(3))
    out = perturb.perturb(z, rec, rng(5))
    df = perturb.perturbed_microdata(inst, out)
    assert list(df.columns[:2]) == ["output_id", "output_record_id"]
    assert {"x0", "x1", "lat", "lon"} <= set(df.columns)
    assert "record_id" not in df.columns and "individual" not in df.columns
    np.testing.assert_array_equal(df.output_id, np.sort(out))
    np.testing.assert_array_equal(df.output_record_id, inst.outputs.record_id.to_numpy()[np.sort(out)])
    df.to_parquet(tmp_path / "microdata.parquet")


def test_published_rows_do_not_depend_on_the_input_order():
    """The released table is the same bytes whatever order the individuals came in (issue 28 item 5): a
    table sorted by latitude must not leak its order through row positions."""
    inst = grid(4, 5, n_outputs=6, epsilon=2.0, eta=1.5, seed=0)
    out = perturb.perturb(exponential(inst), perturb.draw_individuals(inst.prior, 300, rng(3)), rng(5))
    shuffled = rng(7).permutation(out)
    a, b = perturb.perturbed_microdata(inst, out), perturb.perturbed_microdata(inst, shuffled)
    pd.testing.assert_frame_equal(a, b)
    assert a.output_id.is_monotonic_increasing
