"""The audit's coherence checks (:mod:`mdp_core.release.audit`, issue 49): the published files against each
other, where each is a function of the others or a draw from a distribution they state. An insider who
re-signs a release can make every stated figure agree with its file; these catch the files that contradict
one another.

**Intervals placed as intervals.py places them** (:func:`interval_findings`). A published interval is
[min(max(y - t, 0), p), max(min(y + t, n), p)] (:func:`mdp_core.release.intervals.count_intervals`), p the
published count, n the total, y the (unpublished) noisy measurement and t the half-width of ci_level at the
row's noise_scale (:func:`mdp_core.release.intervals.half_width`; Bonferroni over the noisy rows for sim_low /
sim_high). Both ends are non-decreasing in y, so each end fixes an interval of possible y; the per-count and the
simultaneous interval of a row must admit one and the same y. A row that admits none is a finding: a
zero-width interval [p, p] with 0 < p < n and t >= 1 (a claim of an exact count where the scale is not 0), an
interval moved off its measurement (shifted by one where the clipping at 0 or n, or the widening to p, placed
it), per-count and simultaneous intervals of two different measurements. An interval shifted by one in a row
where neither clipping nor widening acted is the interval of the measurement y + 1: no test on the published
table alone can tell the two apart (both are possible draws).

**solve.json's repair** (:func:`repair_findings`, :func:`mdp_core.solvers.verify.certify`): an unrepaired
mechanism states no mix (max_mix 0, no component mixed, objective_before = objective_after); a repair's size
is in [0, 1] and at most the solve's own ``max_mix`` limit (above it the solve refuses), components_mixed is
a count of the mDP graph's components (recomputed from the instance) and 0 exactly when nothing was mixed.

**The microdata's histogram against the counts** (:func:`histogram_findings`). Each person's output is drawn
from row r of the mechanism Z (N, K), r their record; the published counts measure how many people fall in
each output cell (:func:`mdp_core.problem.microdata.cell_of_record`). Honest microdata have the histogram
H = sum over people of a one-hot draw from Z[r], with E[H] = Z^T c, c (N,) the people per record. Statistic:
D = min ||H - Z^T c||_1 over every c >= 0 with sum n whose cell sums lie in the counts' simultaneous
intervals widened to level 1 - :data:`ALPHA_COUNTS` (an LP, HiGHS). Threshold:
tau = sqrt(n K) + sqrt(2 n ln(1 / :data:`ALPHA_DRAW`)). False alarm (honest release, D > tau) <= ALPHA_COUNTS +
ALPHA_DRAW = 0.1 %: (i) the widened intervals hold every true cell count together with probability >= 1 -
ALPHA_COUNTS (proof at :func:`widened_bounds`), and then the true c is feasible, so D <= ||H - E H||_1; (ii)
E ||H - E H||_1 <= sum_k sd(H_k) <= sqrt(K sum_k Var H_k) <= sqrt(n K) (Cauchy-Schwarz), and one person's draw
moves ||H - E H||_1 by at most 2, so by McDiarmid's inequality P(||H - E H||_1 > E + u) <= exp(-u^2 / (2 n)) =
ALPHA_DRAW at u = sqrt(2 n ln(1 / ALPHA_DRAW)). tests/test_audit_coherence.py measures it on 200+ simulated
honest releases (none alarmed) and catches "everyone at output 0" and a shift of every person's output.
A release without intervals (made before issue 41) is not tested.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from mdp_core.release.audit_common import RECOMPUTED, Record, _is_count, _num, _same_number, _show

ALPHA_COUNTS = 5e-4  # the widened count intervals miss a true count with at most this probability
ALPHA_DRAW = 5e-4  # an honest draw's L1 deviation exceeds its bound with at most this probability
FALSE_ALARM = ALPHA_COUNTS + ALPHA_DRAW  # of the histogram test, on an honest release


# ----------------------------------------------------------------------------- intervals
def _y_range(low: np.ndarray, high: np.ndarray, p: np.ndarray, n: int, t: np.ndarray) -> tuple[np.ndarray, ...]:
    """(least, most) measurement y (float arrays, +-inf unbounded) whose interval at half-width ``t`` is
    [``low``, ``high``] around the published count ``p`` (module docstring; least > most: no such y)."""
    inf = np.full(p.shape, np.inf)
    least, most = -inf.copy(), inf.copy()
    # the low end: min(max(y - t, 0), p) = low
    exact = (low < p) & (low > 0)
    least = np.where(exact | ((low == p) & (p > 0)), low + t, least)
    most = np.where(exact, low + t, most)
    most = np.where((low < p) & (low == 0), np.minimum(most, t), most)
    # the high end: max(min(y + t, n), p) = high
    exact = (high > p) & (high < n)
    least = np.where(exact, np.maximum(least, high - t), least)
    most = np.where(exact, np.minimum(most, high - t), most)
    least = np.where((high > p) & (high == n), np.maximum(least, n - t), least)
    most = np.where((high == p) & (p < n), np.minimum(most, p - t), most)
    bad = (low > p) | (high < p)
    return np.where(bad, np.inf, least), np.where(bad, -np.inf, most)


def misplaced_rows(table: Any) -> np.ndarray:
    """(rows,) bool over aggregates.parquet's noisy rows (``table``: a DataFrame with level, count,
    noise_scale, ci_level and the four interval columns): True where no measurement y gives both the row's
    per-count and its simultaneous interval."""
    from mdp_core.release.intervals import half_width

    noisy = table[table["level"] != "total"]
    n = int(table.loc[table["level"] == "total", "count"].iloc[0])
    level, family = float(table["ci_level"].iloc[0]), len(noisy)
    scales = noisy["noise_scale"].to_numpy(dtype=np.float64)
    t1 = np.array([half_width(level, s) for s in scales], dtype=np.float64)
    tm = np.array([half_width(level, s, family) for s in scales], dtype=np.float64)
    p = noisy["count"].to_numpy(dtype=np.float64)
    col = {c: noisy[c].to_numpy(dtype=np.float64) for c in ("ci_low", "ci_high", "sim_low", "sim_high")}
    a1, b1 = _y_range(col["ci_low"], col["ci_high"], p, n, t1)
    a2, b2 = _y_range(col["sim_low"], col["sim_high"], p, n, tm)
    return np.asarray(np.maximum(a1, a2) > np.minimum(b1, b2))


def interval_findings(table: Any) -> list[str]:
    """One finding naming how many noisy rows' intervals no measurement explains (module docstring), and the
    first of them; nothing for a table whose ci_level the intervals' own check already refuses."""
    level = sorted({float(v) for v in table["ci_level"]})
    if len(level) != 1 or not 0 < level[0] < 1:
        return []
    bad = misplaced_rows(table)
    if not bad.any():
        return []
    noisy = table[table["level"] != "total"]
    row = noisy[bad].iloc[0]
    return [
        f"aggregates.parquet: {int(bad.sum())} row(s)' intervals are not placed around any measurement at their "
        f"noise_scale and ci_level (first: {row['level']} {row['label']}, count {int(row['count'])}, ci "
        f"[{int(row['ci_low'])}, {int(row['ci_high'])}], sim [{int(row['sim_low'])}, {int(row['sim_high'])}], "
        f"noise_scale {float(row['noise_scale']):g}): a zero-width or moved interval"
    ]


# ----------------------------------------------------------------------------- solve.json's repair
def repair_findings(solve: dict, n_components: int) -> list[str]:
    """solve.json's repair figures against the certification's rules (module docstring); ``n_components``:
    the mDP graph's components, recomputed from the instance."""
    rep = solve.get("repair")
    if rep is None:
        return []
    if not isinstance(rep, dict):
        return ["solve.json: repair is not an object"]
    where, applied = "solve.json: repair", rep.get("applied")
    mix, mixed = _num(rep.get("max_mix")), rep.get("components_mixed")
    limit = _num((solve.get("options") or {}).get("max_mix")) if isinstance(solve.get("options"), dict) else None
    before, after = rep.get("objective_before"), rep.get("objective_after")
    if not isinstance(applied, bool) or mix is None or not _is_count(mixed, 0, n_components):
        return [f"{where}: applied, max_mix or components_mixed is not a flag, a number, a count of components"]
    findings = []
    if not applied and (mix != 0 or mixed != 0 or not _same_number(before, after, RECOMPUTED)):
        findings.append(f"{where}: not applied, but it states a mix {_show(mix)} of {mixed} component(s)")
    if not 0 <= mix <= 1:
        findings.append(f"{where}: max_mix {_show(mix)} is not a share in [0, 1]")
    elif limit is not None and mix > limit:
        findings.append(f"{where}: max_mix {_show(mix)} exceeds the solve's max_mix {_show(limit)} (it refuses then)")
    if (mixed == 0) != (mix == 0):
        findings.append(f"{where}: max_mix {_show(mix)} but {mixed} component(s) mixed")
    return findings


# ----------------------------------------------------------------------------- the microdata's histogram
def widened_bounds(low: np.ndarray, high: np.ndarray, scale: float, level: float, family: int, n: int) -> tuple:
    """The simultaneous intervals [``low``, ``high``] (ci_level ``level``, ``family`` counts, noise ``scale``)
    widened to hold every true count together with probability >= 1 - :data:`ALPHA_COUNTS`: each end moved out
    by d = t' - t, t = half_width(level, scale, family), t' = half_width(1 - ALPHA_COUNTS, scale, family),
    then clipped to [0, n]. Proof: the interval of the measurement y at t' is [min(max(y - t', 0), p),
    max(min(y + t', n), p)]; where low = y - t it is y - t' = low - d, where low = 0 or low = p it is >= the
    widened end, and symmetrically above; it holds every count on the event {all |X_j| <= t'}, of probability
    >= 1 - ALPHA_COUNTS (union bound, :mod:`mdp_core.release.intervals`)."""
    from mdp_core.release.intervals import half_width

    d = half_width(1 - ALPHA_COUNTS, scale, family) - half_width(level, scale, family)
    d = max(d, 0)
    return np.maximum(np.asarray(low) - d, 0), np.minimum(np.asarray(high) + d, n)


def histogram_threshold(n: int, k: int) -> float:
    """tau = sqrt(n K) + sqrt(2 n ln(1 / ALPHA_DRAW)) (module docstring): an honest draw's L1 deviation from
    its expectation exceeds it with probability <= ALPHA_DRAW."""
    return math.sqrt(n * k) + math.sqrt(2 * n * math.log(1 / ALPHA_DRAW))


def histogram_distance(
    z: np.ndarray, cell: np.ndarray, histogram: np.ndarray, low: np.ndarray, high: np.ndarray
) -> float:
    """D = min over c (N,) >= 0 of ||``histogram`` - Z^T c||_1 subject to sum c = n (the histogram's total)
    and, for every output cell j, low_j <= sum of c over the records of ``cell`` j <= high_j (an LP solved by
    HiGHS; inf when no c fits the bounds). ``z``: (N, K); ``cell``: (N,) each record's cell in 0..K-1."""
    import scipy.sparse as sp

    from mdp_core.solvers import highs
    from mdp_core.solvers.result import Status

    n_rec, k = z.shape
    h = np.asarray(histogram, dtype=np.float64)
    n = float(h.sum())
    scale = max(n, 1.0)  # HiGHS's tolerances are absolute: people as shares of n
    eye = sp.identity(k, format="csr")
    cells = sp.csr_matrix((np.ones(n_rec), (cell, np.arange(n_rec))), shape=(k, n_rec))
    a = sp.vstack(
        [
            sp.hstack([sp.csr_matrix(z.T), -eye, eye]),  # Z^T c - e+ + e- = H
            sp.hstack([cells, sp.csr_matrix((k, 2 * k))]),  # low <= cell sums <= high
            sp.hstack([sp.csr_matrix(np.ones((1, n_rec))), sp.csr_matrix((1, 2 * k))]),  # sum c = n
        ],
        format="csc",
    )
    lo = np.concatenate([h, np.asarray(low, dtype=np.float64), [n]]) / scale
    hi = np.concatenate([h, np.asarray(high, dtype=np.float64), [n]]) / scale
    model = highs.LpModel(
        c=np.concatenate([np.zeros(n_rec), np.ones(2 * k)]),
        a=a,
        row_lower=lo,
        row_upper=hi,
        col_lower=np.zeros(n_rec + 2 * k),
        col_upper=np.full(n_rec + 2 * k, np.inf),
    )
    solver = highs.quiet_highs()
    highs.pass_model(solver, model)
    sol = highs.run(solver, what="the audit's histogram test")
    if sol.status == Status.INFEASIBLE:
        return math.inf
    if sol.status != Status.OPTIMAL:
        return math.nan
    return float(sol.objective) * scale


def histogram_test(
    z: np.ndarray, cell: np.ndarray, outputs: np.ndarray, table: Any, ci_level: float
) -> tuple[float, float] | None:
    """(D, tau) of the released ``outputs`` ((n,) output ids) against the output level of the count table
    ``table`` (aggregates.parquet's rows) and the mechanism ``z``; None without intervals to test against."""
    if "sim_low" not in table.columns:
        return None
    noisy = table[table["level"] != "total"]
    out = table[table["level"] == "output"].sort_values("block")
    n = int(table.loc[table["level"] == "total", "count"].iloc[0])
    scale = float(out["noise_scale"].iloc[0])
    low, high = widened_bounds(
        out["sim_low"].to_numpy(np.int64), out["sim_high"].to_numpy(np.int64), scale, ci_level, len(noisy), n
    )
    k = z.shape[1]
    hist = np.bincount(np.asarray(outputs, dtype=np.int64), minlength=k)
    return histogram_distance(z, cell, hist, low, high), histogram_threshold(n, k)


def histogram_findings(d: Path, inst: Any, z: np.ndarray, facts: Record) -> list[str]:
    """The microdata's output histogram against the published counts and mechanism (module docstring), for a
    release whose microdata and aggregates read (``facts``) and agree on n."""
    from mdp_core.problem.io import read_table
    from mdp_core.problem.microdata import cell_of_record

    micro, agg = facts.get("microdata.parquet"), facts.get("aggregates.parquet")
    if micro is None or agg is None or micro["rows"] != agg["total"]:
        return []  # unreadable, or n differs: other findings say so
    table = read_table(d / "aggregates.parquet")
    if "ci_level" not in table.columns:
        return []
    outputs = read_table(d / "microdata.parquet", required={"output_id": "int64"})["output_id"].to_numpy()
    result = histogram_test(z, cell_of_record(inst), outputs, table, float(table["ci_level"].iloc[0]))
    if result is None or result[0] <= result[1]:
        return []
    dist, tau = result
    return [
        f"microdata.parquet: its output histogram is at L1 distance {dist:.1f} from every histogram the published "
        f"counts and mechanism make likely (threshold {tau:.1f}, false-alarm rate <= {FALSE_ALARM:.1%}): the "
        "microdata contradict the release's own counts"
    ]


__all__ = [
    "ALPHA_COUNTS",
    "ALPHA_DRAW",
    "FALSE_ALARM",
    "histogram_distance",
    "histogram_findings",
    "histogram_test",
    "histogram_threshold",
    "interval_findings",
    "misplaced_rows",
    "repair_findings",
    "widened_bounds",
]
