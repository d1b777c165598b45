"""The mechanism for people's own coordinates (issue 50, mdp_core/release/interpolate.py): real HiGHS solves on real
Rome streets (lat/lon) and a grid (km), each interpolated and certified, then checked without the module's own
point location: p_x recomputed here from the records' planar coordinates (our own projection formula), a brute-force
search over every triangle and a brute-force projection onto the hull's edges (scipy's ConvexHull), and the
certified rate against 10,000 random pairs of the area, hypothesis-drawn pairs and finite differences inside every
triangle."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.spatial import ConvexHull

from mdp_core.errors import InputError
from mdp_core.problem.datasets import registry
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import EARTH_RADIUS_KM, haversine_rows_km
from mdp_core.release import interpolate as ip
from mdp_core.solvers.solve import solve

ROME = Path(__file__).resolve().parents[2] / "shared" / "data" / "rome_center"
needs_rome = pytest.mark.skipif(not (ROME / "nodes.csv").is_file(), reason="shared Rome data absent")
MAX_DISTANCE = 0.4  # km


@cache
def road() -> tuple[Instance, np.ndarray]:
    """60 real Rome road nodes, 20 outputs, eta 1 km, solved at eps 3 per km (the records' rate)."""
    params = dict(nodes=str(ROME / "nodes.csv"), edges=str(ROME / "edges.csv"), n_records=60, n_outputs=20)
    inst = registry.load("road", params | dict(eta=1.0, epsilon=3.0, loss="distance"))
    return inst, solve(inst, "lp").z


@cache
def grid() -> tuple[Instance, np.ndarray]:
    """A 6 x 7 grid of 1 km cells, 12 outputs, eps 1 per km."""
    inst = registry.load("grid", dict(rows=6, cols=7, n_outputs=12, epsilon=1.0))
    return inst, solve(inst, "lp").z


def brute_log_rows(inst: Instance, z: np.ndarray, mesh: ip.Mesh, pts: np.ndarray) -> np.ndarray:
    """(n, K') ln p_x on the outputs every row gives mass, without :func:`ip.locate`: our own planar km, every
    triangle tried, points outside the hull sent to the nearest point of the hull's edges."""
    rec = inst.record_points()
    if inst.metric == "haversine":
        lat_ref = max(abs(mesh.pl.low[0]), abs(mesh.pl.high[0]))
        k = math.pi / 180 * EARTH_RADIUS_KM
        xy = lambda p: np.column_stack([k * math.cos(math.radians(lat_ref)) * p[:, 1], k * p[:, 0]])  # noqa: E731
    else:
        xy = lambda p: np.asarray(p, dtype=float)  # noqa: E731
    r, q = xy(rec), xy(pts)
    used = np.unique(mesh.simplices)
    hull = ConvexHull(r[used])
    ring = used[hull.vertices]
    for m, x in enumerate(q):
        if np.any(hull.equations[:, :2] @ x + hull.equations[:, 2] > 1e-12):  # outside: project onto the boundary
            a, b = r[ring], r[np.roll(ring, -1)]
            s = np.clip(((x - a) * (b - a)).sum(1) / ((b - a) ** 2).sum(1), 0, 1)
            near = a + s[:, None] * (b - a)
            q[m] = near[np.argmin(((near - x) ** 2).sum(1))]
    support = np.all(z > 0, axis=0)
    f = np.log(z[:, support])
    out = np.empty((len(q), f.shape[1]))
    for m, x in enumerate(q):
        for tri in mesh.simplices:
            w = np.linalg.solve(np.vstack([r[tri].T, np.ones(3)]), np.append(x, 1.0))
            if w.min() >= -1e-9:
                break
        else:
            raise AssertionError("a point in no triangle")
        big = w @ f[tri]
        out[m] = big - big.max() - np.log(np.exp(big - big.max()).sum())
    return out


@needs_rome
@pytest.mark.parametrize("which", ["road", "grid"])
def test_ten_thousand_pairs_of_the_area_stay_within_the_certified_rate(which: str) -> None:
    """The Done-when's check: 10,000 pairs of coordinates of the area (half independent, half within 50 m), each
    p_x computed in full: no pair's largest log ratio exceeds L d + the certificate's tolerance, and the pairs come
    within a factor 3 of L (the certificate is a bound that binds, not an arbitrary large number)."""
    inst, z = road() if which == "road" else grid()
    mesh = ip.thin(inst, z, MAX_DISTANCE, ratio=4.0)
    cert = ip.certify(mesh, z)
    assert cert.rate <= 4.0 * inst.epsilon * (1 + 1e-5) * cert.kappa
    a, b = ip.random_pairs(mesh.pl, 10_000, np.random.default_rng(50), near=0.05)
    check = ip.pair_check(mesh, z, cert, a, b)
    assert check.pairs == 10_000 and check.violations == 0 and check.max_excess <= cert.tolerance
    assert cert.rate / 3 <= check.max_realised <= cert.rate * (1 + 1e-9)


@needs_rome
def test_the_rows_agree_with_a_brute_force_point_location_inside_and_outside_the_hull() -> None:
    """mechanism() (Delaunay's point location, the hull projection) against brute force on 300 points of the area's
    box, many outside the thinned hull; a record that is a vertex gets its own row (on the support)."""
    inst, z = road()
    mesh = ip.thin(inst, z, MAX_DISTANCE, ratio=4.0)
    pts = np.random.default_rng(3).uniform(mesh.pl.low, mesh.pl.high, size=(300, 2))
    support = np.all(z > 0, axis=0)
    got = np.log(ip.mechanism(mesh, z, pts)[:, support])
    np.testing.assert_allclose(got, brute_log_rows(inst, z, mesh, pts), atol=1e-7)
    vertex = int(mesh.simplices[0, 0])
    row = z[vertex, support] / z[vertex, support].sum()
    np.testing.assert_allclose(ip.mechanism(mesh, z, inst.record_points()[[vertex]])[0, support], row, rtol=1e-9)


@needs_rome
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    u=st.tuples(*[st.floats(0, 1)] * 4),
    step=st.floats(1e-6, 1.0),
)
def test_any_two_points_hypothesis(u: tuple[float, float, float, float], step: float) -> None:
    """Hypothesis: x anywhere in the box, x' at a random offset of up to ``step`` of the box: the log ratio of every
    output within L d(x, x') + tolerance, d the great-circle distance."""
    inst, z = road()
    mesh = _mesh()
    cert = ip.certify(mesh, z)
    lo, hi = mesh.pl.low, mesh.pl.high
    x = lo + np.array(u[:2]) * (hi - lo)
    x2 = np.clip(x + (np.array(u[2:]) - 0.5) * step * (hi - lo), lo, hi)
    la = np.log(ip.mechanism(mesh, z, np.vstack([x, x2]))[:, cert.support])
    d = float(haversine_rows_km(x[None], x2[None])[0])
    assert np.abs(la[0] - la[1]).max() <= cert.rate * d + cert.tolerance


@cache
def _mesh() -> ip.Mesh:
    inst, z = road()
    return ip.thin(inst, z, MAX_DISTANCE, ratio=4.0)


@needs_rome
def test_every_triangles_rate_bounds_its_finite_differences() -> None:
    """Inside each triangle, in 8 directions from 20 interior points, a 1e-4 km step changes no log-probability by
    more than L_T x the step (planar km): each L_T, not only the largest, is an upper bound."""
    inst, z = road()
    mesh = _mesh()
    f, _ = ip.log_rows(z)
    rates = ip.triangle_rates(mesh, f)
    rng = np.random.default_rng(5)
    angles = np.linspace(0, 2 * np.pi, 8, endpoint=False)
    for t, tri in enumerate(mesh.simplices):
        w = rng.dirichlet(np.ones(3), size=20) * 0.98 + 0.02 / 3
        x = w @ mesh.xy[tri]
        for a in angles:
            x2 = x + 1e-4 * np.array([np.cos(a), np.sin(a)])
            w2 = np.column_stack([(x2 - mesh.xy[tri[2]]) @ mesh.inverse[t].T, np.zeros(20)])
            w2[:, 2] = 1 - w2[:, 0] - w2[:, 1]
            la, lb = w @ f[tri], w2 @ f[tri]
            la -= np.log(np.exp(la - la.max(1, keepdims=True)).sum(1, keepdims=True)) + la.max(1, keepdims=True)
            lb -= np.log(np.exp(lb - lb.max(1, keepdims=True)).sum(1, keepdims=True)) + lb.max(1, keepdims=True)
            assert np.abs(la - lb).max() <= rates[t] * 1e-4 * (1 + 1e-6) + 1e-12


@needs_rome
def test_the_plane_never_stretches_a_great_circle_distance_by_more_than_kappa() -> None:
    """|X - X'| <= kappa d(x, x') for 20,000 pairs of the area's box (corners included), d the haversine km."""
    inst, _ = road()
    pl = ip.plane(inst, MAX_DISTANCE)
    rng = np.random.default_rng(9)
    a = rng.uniform(pl.low, pl.high, size=(20_000, 2))
    b = rng.uniform(pl.low, pl.high, size=(20_000, 2))
    a[:4], b[:4] = (
        [pl.low, pl.high, [pl.low[0], pl.high[1]], [pl.high[0], pl.low[1]]],
        [pl.high, pl.low, pl.low, pl.high],
    )
    planar = np.linalg.norm(ip.to_plane(pl, a) - ip.to_plane(pl, b), axis=1)
    assert np.all(planar <= pl.kappa * haversine_rows_km(a, b) * (1 + 1e-12))
    assert 1.0 < pl.kappa < 1 + 1e-5


def test_grid_outputs_no_row_gives_mass_are_dropped_and_a_partial_zero_is_dropped_too() -> None:
    """The support: an output whose column is zero in every row, or in some rows only, is never released for
    people (a zero opposite a positive entry would be an infinite log ratio); the certificate says how many."""
    inst, z = grid()
    z2 = z.copy()
    z2[:, 0] = 0.0
    z2[3, 1] = 0.0
    z2 /= z2.sum(axis=1, keepdims=True)
    mesh = ip.triangulate(inst, 0.5)
    cert = ip.certify(mesh, z2)
    assert 0 not in cert.support and 1 not in cert.support and cert.dropped_outputs >= 2
    p = ip.mechanism(mesh, z2, np.array([[2.3, 1.7], [-0.4, 9.0]]))
    assert np.all(p[:, [0, 1]] == 0) and np.allclose(p.sum(axis=1), 1.0)


def test_bad_geometry_is_a_clear_error() -> None:
    """3-D records, records on one line, too few records: InputError, nothing computed."""
    syn = registry.load("synthetic", dict(n_records=20, n_outputs=5))
    with pytest.raises(InputError, match="2-D coordinates"):
        ip.triangulate(syn, 0.5)
    line = registry.load("grid", dict(rows=1, cols=6, n_outputs=3))
    with pytest.raises(InputError, match="one line"):
        ip.triangulate(line, 0.5)
    inst, _ = grid()
    with pytest.raises(InputError, match="at least 3"):
        ip.triangulate(inst, 0.5, keep=np.array([0, 1]))
