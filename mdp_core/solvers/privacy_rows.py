"""Privacy rows of the PMO LP and its Lagrangian lower bound: the one numerical core that
:mod:`mdp_core.solvers.lp`, :mod:`mdp_core.solvers.rowgen`, :mod:`mdp_core.solvers.colgen` and :mod:`mdp_core.solvers.benders` share.

Rows. For a directed neighbour pair (a, b) at distance d (instance unit) and an output k the privacy
row is

    z_ak - g z_bk <= 0,   g = exp(min(eps d, MAX_LOG_RATIO)),

with eps d capped at :data:`mdp_core.solvers.verify.MAX_LOG_RATIO` = 30 (HiGHS rejects coefficients above
1e15, and exp overflows at 709). A capped row is *tighter* than the exact one, so every Z meeting it
is still eps-mDP. By default (:func:`rows`) each row is *balanced*: divided by sqrt(g), so that its
two coefficients are 1/sqrt(g) and -sqrt(g) (e^{-+15} at the cap instead of 1 and e^30): dual
simplex and interior point broke down ("unbounded", "Not Set", "optimal" far above the optimum) on
raw rows at eps d >= 20. A positive multiple of a row is the same constraint, and the bound below
holds for any matrix of valid rows, so balancing changes neither feasibility nor the bound.

Lagrangian bound. Let A z <= 0 be privacy rows valid for every feasible Z and lam >= 0 multipliers
(one per row; for HiGHS's duals y of "<= 0" rows, which are <= 0 at an optimum, lam = max(-y, 0)).
For every feasible Z

    c . z >= c . z + lam . A z = (c + A^T lam) . z >= sum_i min_k (c + A^T lam)_ik,        (L)

because A z <= 0, and each row z_i (K entries) is a probability distribution, so (c + A^T lam)_i . z_i
is at least the smallest entry of (c + A^T lam)_i. (L) holds whatever the solver's tolerances were:
it is evaluated in float64 from the model's own arrays and any lam >= 0; it is tight when lam is an
optimal dual. :func:`min_sum` evaluates it.

Capped rows: the rule, proved once. Let P be the exact LP (ratios g = e^{eps d}) and P_cap the LP
the solvers see (ratios min(e^{eps d}, G), G = e^{MAX_LOG_RATIO}); P_cap's feasible set lies inside
P's, so OPT <= OPT_cap. A capped row z_ak - G z_bk <= 0 is *not* valid on P (a Z of P only meets
z_ak <= e^{eps d} z_bk), so (L) with a positive multiplier on a capped row bounds OPT_cap, not OPT.
Two ways to keep a bound on OPT:

(i)  multiplier 0 on capped rows: then (L) uses only rows valid on P and bounds OPT directly;
(ii) keep every multiplier, get L_cap <= OPT_cap from (L), and undo the cap: with w = K / G
     (< 1; 9.4e-12 at K = 100), Z* optimal for P and U the uniform mechanism (rows 1/K), the mixture
     Z' = (1 - w) Z* + w U is feasible for P_cap: every exact row holds for Z* and U, hence for
     their mixture, and on a capped row z'_ak <= (1 - w) + w / K <= 1 <= G w / K <= G z'_bk. So
     OPT_cap <= c.Z' = (1 - w) OPT + w c.U, i.e.

         OPT >= (L_cap - w c.U) / (1 - w)        (:func:`uncap`; it only lowers L_cap <= c.U).

:func:`lagrangian_bound` returns the larger of (i) and (ii) (both are valid; (ii) is the tighter one
when a capped row binds with a real multiplier, (i) when the solver's multipliers on capped rows
are poor). Benders' cuts carry multipliers of capped subproblem rows into its master, so it uses (ii)
(:func:`uncap`) on the master's bound. Multipliers outside the model (rowgen's rows not yet added,
colgen's implied rows) are 0, which is rule (i) for those rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from mdp_core.solvers.verify import MAX_LOG_RATIO

__all__ = [
    "Pairs",
    "Terms",
    "all_rows",
    "dual_terms",
    "lagrangian_bound",
    "min_sum",
    "pairs",
    "rows",
    "stack",
    "uncap",
]


@dataclass(frozen=True)
class Pairs:
    """Directed neighbour pairs (a, b): the row z_ak - g z_bk <= 0 for each output k."""

    a: np.ndarray  # (m,) int64 head record
    b: np.ndarray  # (m,) int64 tail record
    g: np.ndarray  # (m,) ratio exp(min(eps d, MAX_LOG_RATIO))
    capped: np.ndarray  # (m,) bool: eps d > MAX_LOG_RATIO (the row is tighter than the exact one)

    @property
    def size(self) -> int:
        return int(self.a.size)


def pairs(edges: np.ndarray, distances: np.ndarray, epsilon: float, both: bool = True) -> Pairs:
    """The directed pairs of ``edges`` ((E, 2) record ids; ``distances`` (E,) instance unit; ``epsilon``
    per distance unit): with ``both`` first every edge as given, then every edge reversed (2E pairs),
    else the E pairs as given."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    d = np.asarray(distances, dtype=np.float64)
    a, b = (np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]]) if both else (e[:, 0], e[:, 1])
    logr = epsilon * (np.r_[d, d] if both else d)
    return Pairs(a, b, np.exp(np.minimum(logr, MAX_LOG_RATIO)), logr > MAX_LOG_RATIO)


def rows(
    p: Pairs, ei: np.ndarray, ki: np.ndarray, cols: np.ndarray, n_cols: int, balanced: bool = True
) -> sp.csr_matrix:
    """(m, n_cols) CSR: row j is s_j (z[a_j, k_j] - g_j z[b_j, k_j]) for pair ``ei[j]`` and output ``ki[j]``,
    s_j = 1 / sqrt(g_j) when ``balanced`` (module docstring), else 1.

    ``cols`` (n_records,) maps each record to the first column of its K-block, or -1 when the record
    is not a variable of this model: its term is dropped (the caller moves it to the right-hand side,
    as Benders does, building that side with a second map). Column of (record r, output k): cols[r] + k.
    """
    ei, ki = np.asarray(ei, dtype=np.int64), np.asarray(ki, dtype=np.int64)
    ca, cb = cols[p.a[ei]], cols[p.b[ei]]
    return _assemble(p, ei, np.where(ca >= 0, ca + ki, -1), np.where(cb >= 0, cb + ki, -1), n_cols, balanced)


def rows_at(p: Pairs, ei: np.ndarray, ki: np.ndarray, col: np.ndarray, n_cols: int) -> sp.csr_matrix:
    """:func:`rows` (balanced) over a model whose columns are any set of (record, output) pairs: ``col``
    (n_records, K) int maps (record, output) to its column, -1 when it is not a variable (its term is
    dropped, as in :func:`rows`)."""
    ei, ki = np.asarray(ei, dtype=np.int64), np.asarray(ki, dtype=np.int64)
    return _assemble(p, ei, col[p.a[ei], ki], col[p.b[ei], ki], n_cols, True)


def _assemble(p: Pairs, ei: np.ndarray, ca: np.ndarray, cb: np.ndarray, n_cols: int, balanced: bool) -> sp.csr_matrix:
    """The CSR rows s_j (x[ca_j] - g_j x[cb_j]) of pairs ``ei`` (a column -1: that term dropped)."""
    g = p.g[ei]
    root = np.sqrt(g) if balanced else np.ones_like(g)
    idx = np.c_[ca, cb]
    val = np.c_[1.0 / root, -g / root]
    keep = np.c_[ca >= 0, cb >= 0]
    indptr = np.r_[0, np.cumsum(keep.sum(axis=1))]
    m = sp.csr_matrix((val[keep], idx[keep], indptr), shape=(ei.size, n_cols))
    m.sort_indices()
    return m


def all_rows(p: Pairs, n_records: int, n_out: int, balanced: bool = True) -> tuple[sp.csr_matrix, np.ndarray]:
    """Every row of ``p`` for every output over z = vec(Z) row-major (column i K + k), numbered
    (pair, k) in C order: the (p.size K, n_records K) matrix and its (p.size K,) capped mask."""
    ei = np.repeat(np.arange(p.size), n_out)
    ki = np.tile(np.arange(n_out), p.size)
    cols = np.arange(n_records, dtype=np.int64) * n_out
    return rows(p, ei, ki, cols, n_records * n_out, balanced), p.capped[ei]


@dataclass(frozen=True)
class Terms:
    """A^T lam over a model's columns, split by the rule of the module docstring: ``exact`` from rows
    with exact ratios, ``capped`` from capped rows (None when no capped row carries a multiplier)."""

    exact: np.ndarray
    capped: np.ndarray | None = None


def dual_terms(a: sp.spmatrix, capped: np.ndarray, row_dual: np.ndarray) -> Terms:
    """:class:`Terms` of privacy rows ``a`` ((m, n) "<= 0" rows, ``capped`` (m,) bool) from their row
    duals ``row_dual`` (the first m are used): lam = max(-y, 0)."""
    lam = np.maximum(-np.asarray(row_dual[: a.shape[0]], dtype=np.float64), 0.0)
    at = a.T
    on_capped = capped & (lam > 0)
    if not on_capped.any():
        return Terms(np.asarray(at @ lam).ravel())
    return Terms(np.asarray(at @ np.where(on_capped, 0.0, lam)).ravel(), np.asarray(at @ (lam * on_capped)).ravel())


def stack(terms: Sequence[Terms]) -> Terms:
    """(n, K) :class:`Terms` from K per-output (n,) terms (colgen's pricing LPs, one per output)."""
    exact = np.column_stack([t.exact for t in terms])
    if all(t.capped is None for t in terms):
        return Terms(exact)
    return Terms(exact, np.column_stack([np.zeros_like(t.exact) if t.capped is None else t.capped for t in terms]))


def min_sum(costs: np.ndarray, terms: np.ndarray) -> float:
    """sum_i min_k (costs + terms)_ik: the bound (L) of the module docstring for the rows the terms
    come from. ``costs`` (n, K) p_i c_ik (any unit); ``terms`` A^T lam, (n, K) or (n K,) row-major."""
    return float(np.min(costs + np.reshape(terms, costs.shape), axis=1).sum())


def uncap(bound: float, costs: np.ndarray) -> float:
    """A bound on the exact LP from a bound ``bound`` on the capped LP over ``costs`` ((n, K) p_i c_ik,
    same unit): (bound - w c.U) / (1 - w), w = K e^{-MAX_LOG_RATIO}, c.U = sum_i mean_k costs_ik
    (proof: module docstring, rule (ii)). -inf when w >= 1 (K above e^30)."""
    k = costs.shape[1]
    w = k * np.exp(-MAX_LOG_RATIO)
    if w >= 1.0:
        return -np.inf
    return float((bound - w * float(costs.mean(axis=1).sum())) / (1.0 - w))


def lagrangian_bound(costs: np.ndarray, terms: Terms) -> float:
    """A proven lower bound on the exact PMO optimum over ``costs`` ((n, K) p_i c_ik) from privacy-row
    multipliers (``terms``, (n, K) or (n K,)): rule (i) and, when capped rows carry multipliers, the
    larger of (i) and (ii) (module docstring)."""
    zeroed = min_sum(costs, terms.exact)
    if terms.capped is None:
        return zeroed
    return max(
        zeroed,
        uncap(min_sum(costs, np.reshape(terms.exact, costs.shape) + np.reshape(terms.capped, costs.shape)), costs),
    )
