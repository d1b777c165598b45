"""Privacy verification, exact repair, and the release gate.

A mechanism Z (N, K) is accepted when
  * every entry is >= 0 and every row sums to 1 within ``row_tol`` (default 1e-9);
  * for every neighbour pair (i, j) (both directions) and every output k the likelihood ratio
    z_ik / z_jk is at most exp(eps * d_ij) * (1 + ``ratio_tol``) (default 1e-9), i.e.
    ln z_ik - ln z_jk - eps * d_ij <= ln(1 + ratio_tol). A zero opposite a non-zero is an infinite
    ratio (realised epsilon = inf): it is a violation whatever the tolerance.

LP solvers meet constraints only to ~1e-7 and routinely leave zeros opposite tiny non-zeros, so raw
solver output almost never passes. :func:`repair` fixes that exactly (proof in its docstring) and
:func:`certify` is the gate every released mechanism goes through: verify, else repair and verify
again, else raise :class:`PrivacyError`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterator

import numpy as np

from mdp_core.errors import InputError, PrivacyError
from mdp_core.graph import components
from mdp_core.instance import Instance

ROW_TOL = 1e-9
RATIO_TOL = 1e-9
CHUNK = 1 << 21  # (pair, output) entries examined at once
# Ratio bounds exp(eps d) above e^30 (~1e13) are replaced by e^30 in the LP and in the repair. That
# only tightens z_ik <= exp(eps d) z_jk, so every Z meeting the capped rows is eps-mDP; it keeps the
# LP coefficients below HiGHS's large_matrix_value (1e15, i.e. eps d <= 34.5, else passModel fails)
# and exp() finite (eps d > 709 overflows). The optimum moves by at most about K e^-30 max|c|.
MAX_LOG_RATIO = 30.0


@dataclass
class Certificate:
    """What :func:`verify` found. ``passed`` is the verdict; the rest is the evidence."""

    passed: bool
    epsilon: float
    max_realised_epsilon: float  # max over pairs, k of |ln z_ik - ln z_jk| / d_ij (inf if 0 vs > 0)
    max_ratio_excess: float  # max of ln z_ik - ln z_jk - eps d_ij (<= ln(1+ratio_tol) to pass)
    max_abs_violation: float  # max of z_ik - exp(eps d_ij) z_jk (0 when all hold)
    worst_pair: tuple[int, int, int] | None  # (i, j, k) with the largest ratio excess
    n_pairs: int  # undirected neighbour pairs checked
    n_violations: int  # directed (pair, k) entries beyond the ratio tolerance
    n_infinite: int  # directed (pair, k) entries with z_ik > 0 = z_jk
    n_negative: int
    max_row_sum_error: float
    row_tol: float = ROW_TOL
    ratio_tol: float = RATIO_TOL

    def as_dict(self) -> dict:
        d = asdict(self)
        d["worst_pair"] = None if self.worst_pair is None else list(self.worst_pair)
        return {k: _json_float(v) if isinstance(v, float) else v for k, v in d.items()}

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (
            f"{verdict}: eps={self.epsilon:g}, realised eps={self.max_realised_epsilon:.9g}, "
            f"violations={self.n_violations} ({self.n_infinite} infinite) over {self.n_pairs} pairs, "
            f"max abs violation={self.max_abs_violation:.3g}, max row-sum error={self.max_row_sum_error:.3g}, "
            f"negative entries={self.n_negative}"
            + (f", worst (i, j, k)={self.worst_pair}" if self.worst_pair and not self.passed else "")
        )


def _json_float(x: float) -> float | str | None:
    """JSON has no inf/nan: write them as the strings "inf" / "-inf", nan as null."""
    if np.isnan(x):
        return None
    return x if np.isfinite(x) else ("inf" if x > 0 else "-inf")


def check_mechanism(instance: Instance, z: np.ndarray) -> np.ndarray:
    """Z as a float64 (N, K) array of finite numbers, or InputError."""
    z = np.asarray(z, dtype=np.float64)
    if z.shape != (instance.n_records, instance.n_outputs):
        raise InputError(f"mechanism has shape {z.shape}, instance needs ({instance.n_records}, {instance.n_outputs})")
    if not np.all(np.isfinite(z)):
        raise InputError("mechanism contains NaN or infinite probabilities")
    return z


def directed_pairs(instance: Instance) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(a, b, d) for both directions of every edge, in chunks of about CHUNK (pair, k) entries."""
    e, d = instance.edges, instance.distances
    a, b, dd = np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]], np.r_[d, d]
    step = max(1, CHUNK // max(instance.n_outputs, 1))
    for s in range(0, a.shape[0], step):
        yield a[s : s + step], b[s : s + step], dd[s : s + step]


def verify(instance: Instance, z: np.ndarray, row_tol: float = ROW_TOL, ratio_tol: float = RATIO_TOL) -> Certificate:
    """Check Z against every constraint of ``instance``; never modifies Z."""
    z = check_mechanism(instance, z)
    eps = instance.epsilon
    n_neg = int(np.sum(z < 0))
    row_err = float(np.max(np.abs(z.sum(axis=1) - 1.0)))
    max_eps, max_excess, max_abs = 0.0, -np.inf, 0.0
    worst, n_viol, n_inf = None, 0, 0
    log_tol = np.log1p(ratio_tol)
    with np.errstate(divide="ignore", invalid="ignore"):
        logz = np.log(np.maximum(z, 0.0))
        for a, b, d in directed_pairs(instance):
            za, zb = z[a], z[b]
            abs_v = za - np.exp(np.minimum(eps * d, 700.0))[:, None] * zb  # finite: no inf * 0
            max_abs = max(max_abs, float(abs_v.max()))
            la, lb = logz[a], logz[b]
            both_zero = (za <= 0) & (zb <= 0)
            diff = np.where(both_zero, 0.0, la - lb)  # +inf where za > 0 = zb
            excess = diff - eps * d[:, None]
            n_inf += int(np.sum(np.isposinf(diff)))
            n_viol += int(np.sum(excess > log_tol))
            realised = np.max(diff / d[:, None])
            max_eps = max(max_eps, float(realised))
            idx = int(np.argmax(excess))
            if excess.flat[idx] > max_excess:
                max_excess = float(excess.flat[idx])
                r, k = divmod(idx, z.shape[1])
                worst = (int(a[r]), int(b[r]), int(k))
    if instance.n_edges == 0:
        max_excess = 0.0
    passed = n_neg == 0 and row_err <= row_tol and n_viol == 0
    return Certificate(
        passed=passed,
        epsilon=eps,
        max_realised_epsilon=max_eps,
        max_ratio_excess=max_excess,
        max_abs_violation=max(max_abs, 0.0),
        worst_pair=worst,
        n_pairs=instance.n_edges,
        n_violations=n_viol,
        n_infinite=n_inf,
        n_negative=n_neg,
        max_row_sum_error=row_err,
        row_tol=row_tol,
        ratio_tol=ratio_tol,
    )


@dataclass
class RepairReport:
    applied: bool
    max_mix: float  # the largest mixing weight t used in any component
    components_mixed: int
    objective_before: float
    objective_after: float

    def as_dict(self) -> dict:
        return asdict(self)


def repair(instance: Instance, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Make Z satisfy every constraint exactly by mixing rows with the uniform row.

    Steps: (1) clip negative entries to 0 and divide each row by its sum (an all-zero row becomes
    uniform); (2) in each connected component C of the mDP graph replace every row z_i, i in C, by
    z'_i = (1 - t_C) z_i + t_C u with u = (1/K, ..., 1/K) and

        t_C = max over directed pairs (i, j) in C and k with v > 0 of  v / (v + (g - 1) / K),
        v = z_ik - g z_jk,  g = exp(min(eps d_ij, MAX_LOG_RATIO)) > 1  (edges have d_ij > 0),

    enlarged by a relative 1e-9 against rounding.

    Proof. Rows stay distributions: (1 - t) * 1 + t * K / K = 1 and all terms are >= 0. For a pair
    (i, j) in C and output k,
        z'_ik - g z'_jk = (1 - t) (z_ik - g z_jk) + t (1 - g) / K = (1 - t) v - t (g - 1) / K.
    If v <= 0 this is <= 0 for every t in [0, 1] since g > 1. If v > 0 it is <= 0 iff
    t (v + (g - 1)/K) >= v, i.e. t >= v / (v + (g - 1)/K), which t_C satisfies by construction.
    Components share no edge, so mixing each with its own t_C leaves the others untouched. When g
    is capped below exp(eps d_ij), z'_ik <= g z'_jk <= exp(eps d_ij) z'_jk still holds. Since
    v <= 1 and (g - 1)/K > 0, t_C < 1 always: the repair exists for every input.

    Returns:
        (repaired Z, (n_components,) array of the t_C used).
    """
    z = check_mechanism(instance, z).copy()
    k = z.shape[1]
    np.maximum(z, 0.0, out=z)
    s = z.sum(axis=1)
    zero = s <= 0
    z[zero] = 1.0 / k
    s[zero] = 1.0
    z /= s[:, None]
    count, labels = components(instance.n_records, instance.edges)
    need = np.zeros(count)
    eps = instance.epsilon
    for a, b, d in directed_pairs(instance):
        g = np.exp(np.minimum(eps * d, MAX_LOG_RATIO))[:, None]  # capped: see MAX_LOG_RATIO
        v = z[a] - g * z[b]
        with np.errstate(divide="ignore", invalid="ignore"):  # the masked-out v <= 0 branch may divide by 0
            t = np.where(v > 0, v / (v + (g - 1.0) / k), 0.0).max(axis=1)
        np.maximum.at(need, labels[a], t)
    t_c = np.where(need > 0, np.minimum(need * (1 + 1e-9) + 1e-15, 1.0), 0.0)
    t_row = t_c[labels][:, None]
    z = (1.0 - t_row) * z + t_row / k
    return z, t_c


def objective(instance: Instance, z: np.ndarray) -> float:
    """Expected utility loss sum_i p_i sum_k c_ik z_ik (in the cost unit)."""
    return float(np.sum(instance.prior[:, None] * instance.costs * z))


def certify(
    instance: Instance, z: np.ndarray, max_mix: float = 1e-2
) -> tuple[np.ndarray, Certificate, RepairReport]:
    """The release gate: return a Z that passes :func:`verify`, or raise :class:`PrivacyError`.

    A Z that already passes is returned unchanged. Otherwise it is repaired (:func:`repair`) and
    verified again. ``max_mix`` bounds the mixing weight: a solver answer that needs more than that
    share of uniform noise is far from a solution (time limit, numerical failure) and is refused
    rather than silently degraded.
    """
    z = check_mechanism(instance, z)
    before = objective(instance, z)
    cert = verify(instance, z)
    if cert.passed:
        return z, cert, RepairReport(False, 0.0, 0, before, before)
    fixed, t_c = repair(instance, z)
    if t_c.max(initial=0.0) > max_mix:
        raise PrivacyError(
            f"mechanism violates mDP ({cert.summary()}) and repairing it would mix in {t_c.max():.3g} "
            f"uniform noise (> max_mix={max_mix:g}); refusing to release it"
        )
    cert2 = verify(instance, fixed)
    if not cert2.passed:
        raise PrivacyError(f"mechanism still violates mDP after repair: {cert2.summary()}")
    report = RepairReport(True, float(t_c.max(initial=0.0)), int(np.sum(t_c > 0)), before, objective(instance, fixed))
    return fixed, cert2, report
