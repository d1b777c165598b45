"""Row generation ("rowgen"): the exact PMO LP with its privacy rows generated lazily.

Privacy contract
    input:      an instance: records, outputs, costs and the mDP graph (edges with d_ij <= eta).
    guarantee:  eps-mDP per distance unit: z_ik <= exp(eps d_ij) z_jk on every edge, both ways; with
                ``SolverOptions.all_pairs`` on every two records of one component, d_ij their metric distance.
    holds by:   the certify gate (:func:`mdp_core.solvers.verify.certify`); the mechanism returned here is
                the conic closure of an LP point and normally passes unchanged.
    reference:  Qiu et al. 2024, Eqs. 4-7 (the PMO LP); Lagrangian bound as in :mod:`mdp_core.solvers.lp`.

Why. On the papers' dense settings (eps * eta = 20: N(0, 1) points with eta = 2, Rome roads with
eta = 2 km) every record has hundreds of neighbours and the full LP has 2 E K privacy rows (10.9 M
for synthetic N = 500, K = 100), far beyond what HiGHS solves here. Yet at a vertex optimum at most
N K of them bind, almost all on short edges: a pair at distance d allows a ratio e^{eps d}, which
is e^20 at d = eta. So the LP is solved over a growing subset R of its rows.

Algorithm (one HiGHS model, every record and output; connected components need no special case):

1. R = for every record a its ``neighbours`` shortest edges (a, b), for every output k.
2. Solve LP_R: min c.z s.t. the rows in R, sum_k z_ik = 1, z >= 0 (interior point without
   crossover by default, cold each round: faster here than warm dual simplex after many new rows;
   it stops at a relative duality gap of a tenth of the requested gap, :func:`ipm_tolerance`, or at
   ``loose_tolerance`` (1e-2) in a round that cannot close the gap, :func:`round_tolerance`: 25-40 %
   cheaper, and its point chooses rows at least as well).
3. Lower bound (valid for the full LP, see below) from LP_R's duals.
4. Upper bound: the cost of the *closure* of LP_R's point z: every column raised to its smallest
   majorant in the privacy cone (z'_ik = max_j z_jk e^{-eps D_ij}, D = graph path distance), rows
   renormalised, repeated until the mechanism passes :func:`mdp_core.solvers.verify.verify`
   (:func:`mdp_core.solvers.mechanisms.smooth_to_mdp`, Newton steps: 4-5 sub-rounds here); also the closure
   of :func:`softened` z (the rows that the closure raises from re-optimised against the raises they force),
   and the cheapest verified one counts (:func:`_closure`). The best closure is returned. It runs in a
   second thread beside the next round's LP (see :func:`method`).
4b. With ``lagrangian_steps`` > 0, the same background thread then raises the lower bound with the
   row-sum Lagrangian (:mod:`mdp_core.solvers.lagrangian`): its K subproblems (one per output, N variables,
   the privacy rows of every output being the same block) are evaluated at LP_R's row-sum duals
   (their rows generated lazily: holding LP_R's rows too would make this first value >= LP_R's bound,
   but it is within 1e-7 of it without them, at 2-3x the subproblems' memory), then up to ``lagrangian_steps`` Polyak
   subgradient steps towards the best upper bound, stopping as soon as the gap is closed. The
   subproblems live on ``lagrangian_executor`` and stay warm across rounds. The round's lower bound
   is the larger of the two (both proven; trace column ``lower_bound``; ``extra["lagrangian"]``).
4c. With ``lagrangian_rows`` as well, the next round's rows wait for the ascent: a round that may close
   the gap (a tight one, :func:`round_tolerance`) also gets, for every output k, the rows binding
   (nonzero dual) in subproblem k at the ascent's best multipliers (:func:`_with_binding`). Why these
   rows: at optimal multipliers lam*, every column z*_k of an optimal mechanism minimises
   (c_k - lam*) . x over P (LP duality), so the rows it needs tight are rows tight on that
   subproblem's optimal face; near lam* the subproblems' binding rows are a guess at them, made
   over all of P's rows, where the LP point's violated rows only see the rows it breaks. A guess
   only: the bounds stay those of steps 3-4 whichever rows are held. Before a round that cannot
   close (loose) the ascent is skipped, as its rows would not be used. It saves a round on some instances and
   costs time where it saves none: off by default (bench/HISTORY.md, "Lagrangian rows").
5. Stop when UB - LB is within the requested gap, or at the time limit (a round whose LP the limit cut
   gives its lower bound only: :func:`_cut_by_limit`). Otherwise add the violated rows
   z_ak - g_ab z_bk > 0 (g_ab = exp(eps d_ab)) with the largest *deficit* (z_ak / g_ab - z_bk: the
   mass the closure must add to z_bk; rows with e^20 ratios and tiny z_ak cost nothing to repair
   and are not worth a row), at most ``rows_per_round`` of them, and go to 2. With ``deficit_share``
   s > 0 (off by default) the count rises to the number of largest-deficit rows whose deficits sum
   to s of all violated rows' deficit, when that is more, from the rows chosen after round
   ``share_from_round``'s LP on (:func:`share_count`; bench/HISTORY.md, "Rows per round and the
   upper bound"). A restricted LP over
   nonnegative per-output combinations of the rounds' closures cannot beat the best closure (proof
   there), so the upper bound stays the best closure.

Why the lower bound is valid: :mod:`mdp_core.solvers.privacy_rows` (the Lagrangian bound, rule for capped
rows) with multipliers lam = max(-y, 0) from LP_R's row duals y and 0 on the rows outside R; it
bounds the full LP whatever HiGHS's tolerances were, tight when y is optimal for LP_R and LP_R's
optimum is the full LP's. It is computed in float64 from the rows' own arrays (no HiGHS objective
is trusted).

Support (``support_tau`` > 0; issue 43). The model's variables are then only the pairs (i, k) of a
support S, and its rows only rows whose two pairs are both in S; every other z_ik is held at 0.
S starts from :func:`support_estimate` (where the nearest-output mechanism's closure reaches tau) and
grows each round by two rules: (a) a violated row (step 5, scanned over the full N x K point) brings
the pairs it joins, so a record's mass at (a, k) pulls its neighbour (b, k) in when the row needs it;
(b) pricing (:func:`price`): a pair outside S joins when its reduced cost c_ik - y_i at the LP's
unit-row duals y is negative. The rounds stop as before: the gap closed, or nothing left to add.

Why the bounds stay valid with S. The upper bound is the closure of the LP point extended by zeros
to all N K pairs: a verified mechanism of the full problem, whatever S was. The lower bound is the
same Lagrangian bound over the *full* problem (:func:`mdp_core.solvers.privacy_rows.lagrangian_bound`):
for any multipliers mu >= 0 on the full problem's privacy rows,
    L(mu) = sum_i min_k (c_ik + (A^T mu)_ik) <= c . z   for every feasible z of the full problem,
because c . z >= c . z + mu . (A z) (A z <= 0, mu >= 0) = sum_ik (c_ik + (A^T mu)_ik) z_ik and each
row of z sums to 1 over k. Taking mu = the held rows' duals and mu = 0 on every other row (including
every row that touches a pair outside S) is one choice of mu >= 0: fixing the pairs outside S at zero
in the LP only chooses the multipliers, it never enters the bound's inequality. The pairs outside S
enter the minimum with their own cost c_ik (no held row touches them), so the bound is over all N K
pairs; it is below the held LP's value by exactly the records whose cheapest outside pair undercuts
y_i, which is what rule (b) prices in.

A non-uniform prior (issue 51; a DP histogram of the people, a file prior): skewed priors reach the LP's optimum
at the requested gap on the support (tests/test_rowgen.py). The upper bound froze because a record of little
prior mass costs the LP almost nothing wherever its mass goes, and the closure then pays for that spike at its
neighbours' weights: each round's upper bound is therefore the cheaper verified closure of the LP point and of
:func:`lowered` (the spikes that cost more to spread than to cut, lowered to what their neighbours allow;
:func:`row_caps`). Measurements: bench/HISTORY.md, "Why the upper bound froze under a DP prior".

Every pair in the metric (``SolverOptions.all_pairs``, issue 51; :mod:`mdp_core.solvers.metric_pairs`). The
rows of every two records of one component that are not an edge are found lazily too (:func:`far_violated`:
pairs whose log rows differ by more than ln g, and only rows the graph majorant of z breaks as well, since the
edges' rows mend the others), at most ``far_rows_per_round`` a round (by default many when they are worth a tenth
of the requested gap to the upper bound, else one while an edge row is violated: :func:`far_count`); they take
pair ids after the 2E edges
(:meth:`_Rows.far_ids`), so the held keys, the bound and the support treat them as any row. The closure is
the metric one (:meth:`mdp_core.solvers.metric_pairs.MetricPairs.majorant`), the support estimate is made
from the metric (:func:`_metric_support`), and the bound stays valid: every held row is a row of the
all-pairs LP, multipliers 0 elsewhere.

Memory: the model holds N K columns (|S| with a support) and |R| rows (|R| ~ 0.2-0.5 M at N = 500 dense), and
this module the held rows' keys (|R| int64, no (2 E, K) mask) and the directed edges (2 E); violation checks
stream over the 2 E K (edge, output) pairs in chunks, keeping only the batch's best candidates
(:func:`violated`; peaks measured: bench/HISTORY.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse import csgraph

from mdp_core.declarations import tables
from mdp_core.declarations.methods import RowgenOptions
from mdp_core.declarations.solver_options import SolverOptions
from mdp_core.problem.instance import Instance
from mdp_core.runtime import control
from mdp_core.solvers import highs, lagrangian
from mdp_core.solvers import privacy_rows as pr
from mdp_core.solvers.mechanisms import _majorant, column_majorant, smooth_to_mdp
from mdp_core.solvers.metric_pairs import MetricPairs
from mdp_core.solvers.result import RawSolution, Status, gap_closed
from mdp_core.solvers.verify import MAX_LOG_RATIO, objective, passes

TRACE_COLUMNS = list(tables.TRACE_COLUMNS["rowgen"])  # trace.parquet's, declared in mdp_core.declarations.tables
CHUNK = 1 << 22  # (directed edge, output) pairs examined at once
# min c.z over z >= 0 with c >= 0 is bounded and feasible (the uniform mechanism satisfies every row):
# any status but optimal or a limit is a numerical breakdown, retried with the other algorithm, cold.
ACCEPT = frozenset({Status.OPTIMAL, Status.TIME_LIMIT, Status.ITERATION_LIMIT})
RETRIES = highs.SWITCH_ALGORITHM + highs.COLD_NO_PRESOLVE
FAR_ROWS_MIN, FAR_ROWS_SHARE = 2_000, 10  # rows beyond the edges per round: max(MIN, edge rows' limit / SHARE)
FAR_ROWS_FEW = 1  # ... or this many while an edge row is violated and the far pairs are worth little (far_count)
FAR_COST_SHARE = 0.1  # far pairs matter when the metric closure adds more than this share of the requested gap
LOOSE_GAP = 0.05  # a round is loosened only after a relative gap above this (round_tolerance)
GAP_RATIO = 70.0  # the next round can close only when this gap is within GAP_RATIO x the target (round_tolerance)


@dataclass
class Support:
    """Which (record, output) pairs are variables of the model: all N K, or a support S (``support_tau``).

    ``col`` (N, K) int64 is the model's column of (i, k), -1 outside S; columns are numbered in the
    order they joined, so a column keeps its number as S grows (HiGHS appends)."""

    col: np.ndarray
    flat: np.ndarray  # (|S|,) i K + k of the model's columns, in column order

    @classmethod
    def of(cls, mask: np.ndarray) -> Support:
        """S = the True entries of ``mask`` (N, K), numbered in C order."""
        col = np.full(mask.shape, -1, dtype=np.int64)
        flat = np.flatnonzero(mask)
        col.flat[flat] = np.arange(flat.size)
        return cls(col, flat)

    @property
    def count(self) -> int:
        return int(self.flat.size)

    @property
    def full(self) -> bool:
        return self.count == self.col.size

    def join(self, flat: np.ndarray) -> np.ndarray:
        """Give the pairs ``flat`` (i K + k, any not yet in S, duplicates allowed) columns; their
        flat ids, ascending, in the order of their new columns."""
        new = np.unique(flat[self.col.flat[flat] < 0])
        self.col.flat[new] = np.arange(self.count, self.count + new.size)
        self.flat = np.r_[self.flat, new]
        return new

    def scatter(self, x: np.ndarray) -> np.ndarray:
        """(N, K) z from the model's column values ``x`` (zero outside S)."""
        z = np.zeros(self.col.size)
        z[self.flat] = x[: self.count]
        return z.reshape(self.col.shape)


@dataclass
class _Rows:
    """The directed edges of the mDP graph, which (edge, output) rows the model holds, over which columns."""

    pairs: pr.Pairs  # (2E + F,) directed pairs: edges as given, then reversed, then the F far pairs met so far
    held: np.ndarray  # (|R|,) int64, ascending: e K + k of the (directed pair, output) rows in the model
    n_records: int
    n_outputs: int
    support: Support
    edge: list[np.ndarray] = field(default_factory=list)  # per block of added rows: directed pair ids
    out: list[np.ndarray] = field(default_factory=list)  # ... and their outputs
    metric: MetricPairs | None = None  # with all_pairs: the scans of every pair of a component in the metric
    n_edge: int = 0  # directed edges: the first 2E pairs
    far_key: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # a N + b of the far pairs, ascending
    far_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # ... their pair ids
    far_found: int = 0  # rows beyond the edges chosen so far (violated by a round's LP point)

    @classmethod
    def of(cls, instance: Instance, support: Support | None = None, all_pairs: bool = False) -> _Rows:
        p = pr.pairs(instance.edges, instance.distances, instance.epsilon)
        n, k = instance.n_records, instance.n_outputs
        support = support or Support.of(np.ones((n, k), dtype=bool))
        metric = MetricPairs.of(instance) if all_pairs else None
        return cls(p, np.zeros(0, np.int64), n, k, support, metric=metric, n_edge=p.size)

    @property
    def count(self) -> int:
        return int(sum(x.size for x in self.edge))

    @property
    def full_count(self) -> int:
        """The full LP's privacy rows: 2 E K, or with all pairs every ordered pair of a component times K."""
        pairs = self.n_edge if self.metric is None else 2 * self.metric.count()
        return pairs * self.n_outputs

    def far_ids(self, a: np.ndarray, b: np.ndarray, create: bool = True) -> np.ndarray:
        """Pair ids of the far pairs (a, b) (records of one component, not an edge), appended to ``pairs``
        (ratio g from their metric distance) when new and ``create``, else -1 for a pair not met yet."""
        assert self.metric is not None
        key = np.asarray(a, np.int64) * self.n_records + np.asarray(b, np.int64)
        pos = np.searchsorted(self.far_key, key)
        found = np.zeros(key.shape, dtype=bool)
        if self.far_key.size:
            found = (pos < self.far_key.size) & (self.far_key[np.minimum(pos, self.far_key.size - 1)] == key)
        if create and not found.all():
            new = np.unique(key[~found])
            na, nb = new // self.n_records, new % self.n_records
            extra = pr.pairs(np.column_stack([na, nb]), self.metric.distance(na, nb), self.metric.epsilon, both=False)
            p = self.pairs
            ids = np.arange(p.size, p.size + new.size)
            self.pairs = pr.Pairs(np.r_[p.a, na], np.r_[p.b, nb], np.r_[p.g, extra.g], np.r_[p.capped, extra.capped])
            order = np.argsort(np.r_[self.far_key, new], kind="stable")
            self.far_key, self.far_id = np.r_[self.far_key, new][order], np.r_[self.far_id, ids][order]
            return self.far_ids(a, b, create=False)
        out = np.full(key.shape, -1, np.int64)
        out[found] = self.far_id[pos[found]]
        return out

    def is_held(self, ei: np.ndarray, ki: np.ndarray) -> np.ndarray:
        """Whether the model holds the rows (ei, ki) (bool, their shape)."""
        keys = np.asarray(ei, np.int64) * self.n_outputs + ki
        pos = np.minimum(np.searchsorted(self.held, keys), max(self.held.size - 1, 0))
        return (self.held[pos] == keys) if self.held.size else np.zeros(keys.shape, dtype=bool)

    def hold(self, ei: np.ndarray, ki: np.ndarray) -> None:
        """Record the rows (ei, ki) as held (memory O(|R|): no (2E, K) mask)."""
        self.held = np.union1d(self.held, np.asarray(ei, np.int64) * self.n_outputs + ki)

    def held_in(self, first: int, stop: int) -> np.ndarray:
        """Flat offsets e K + k - first K of the held rows of the directed edges first..stop-1."""
        k = self.n_outputs
        lo, hi = np.searchsorted(self.held, [first * k, stop * k])
        return self.held[lo:hi] - first * k

    def matrix(self, ei: np.ndarray, ki: np.ndarray, n: int, k: int) -> sp.csr_matrix:
        """The balanced rows of the (directed edge, output) pairs (ei, ki) over the model's columns."""
        return pr.rows_at(self.pairs, ei, ki, self.support.col, self.support.count)


def initial_rows(rows: _Rows, distances: np.ndarray, neighbours: int) -> np.ndarray:
    """Directed edge ids: for every head record its ``neighbours`` shortest edges."""
    dd = np.r_[distances, distances]
    a = rows.pairs.a
    order = np.lexsort((dd, a))
    _, starts, counts = np.unique(a[order], return_index=True, return_counts=True)
    rank = np.arange(order.size) - np.repeat(starts, counts)
    return np.sort(order[rank < neighbours])


def _with_binding(
    rows: _Rows, ei: np.ndarray, ki: np.ndarray, binding: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(edge ids, outputs): the rows (ei, ki) and, for every output k, the pairs ``binding[k]`` whose
    rows bind in the Lagrangian subproblem k and the model does not hold; ascending (edge, output)."""
    k = rows.n_outputs
    extra = [p[~rows.is_held(p, np.full(p.size, kk))] * k + kk for kk, p in enumerate(binding)]
    key = np.unique(np.concatenate([ei * k + ki, *extra]))
    return key // k, key % k


def _add(
    h: Any,
    rows: _Rows,
    ei: np.ndarray,
    ki: np.ndarray,
    n: int,
    k: int,
    priced: np.ndarray | None = None,
    c: np.ndarray | None = None,
) -> None:
    """Append the balanced privacy rows (:func:`mdp_core.solvers.privacy_rows.rows`) of the (directed edge,
    output) pairs (ei, ki) to the model; with a support, first the columns they need and the ``priced``
    pairs (flat i K + k) with their scaled costs ``c`` ((N K,)) and unit-row entries."""
    if not rows.support.full and c is not None:
        need = [np.asarray(priced if priced is not None else [], dtype=np.int64)]
        need += [rows.pairs.a[ei] * k + ki, rows.pairs.b[ei] * k + ki]
        new = rows.support.join(np.concatenate(need))
        if new.size:
            unit = sp.csc_matrix(
                (np.ones(new.size), new // k, np.arange(new.size + 1)), shape=(h.getNumRow(), new.size)
            )
            highs.add_cols(h, c[new], unit)
    if ei.size == 0:
        return
    highs.add_rows(h, rows.matrix(ei, ki, n, k), np.full(ei.size, -highs.INF), np.zeros(ei.size))
    rows.hold(ei, ki)
    rows.edge.append(ei)
    rows.out.append(ki)


def lower_bound(c: np.ndarray, rows: _Rows, priv_dual: np.ndarray, k: int) -> float:
    """:func:`mdp_core.solvers.privacy_rows.lagrangian_bound` of the model's rows (multipliers 0 outside R).

    Args:
        c: (N K,) scaled weighted costs p_i c_ik / s; priv_dual: duals of the privacy rows in the
            order they were added. Returns the bound in the scaled unit.
    """
    ei = np.concatenate(rows.edge) if rows.edge else np.zeros(0, np.int64)
    ki = np.concatenate(rows.out) if rows.out else np.zeros(0, np.int64)
    n = c.size // k
    terms = pr.dual_terms(rows.matrix(ei, ki, n, k), rows.pairs.capped[ei], priv_dual)
    # to the (N K,) pairs; every pair outside S has multiplier terms 0: its own cost ("Support" above)
    capped = None if terms.capped is None else _spread(rows.support, terms.capped)
    terms = pr.Terms(_spread(rows.support, terms.exact), capped)
    return pr.lagrangian_bound(c.reshape(n, k), terms)


def _spread(support: Support, t: np.ndarray) -> np.ndarray:
    """(N K,) values of the model's columns ``t`` (|S|,) at their pairs, 0 elsewhere."""
    out = np.zeros(support.col.size)
    out[support.flat] = t
    return out


def violated(
    z: np.ndarray, rows: _Rows, min_deficit: float, limit: int, share: float = 0.0, chunk: int = CHUNK
) -> tuple[np.ndarray, np.ndarray]:
    """(edge ids, outputs) of at most ``limit`` rows outside the model with deficit
    z_ak / g - z_bk > ``min_deficit``, largest deficit first (ties by edge, then output), ascending
    (edge, output) order; streamed in chunks of edges.

    Memory O(chunk + limit): the candidates are cut back to the ``limit`` best (:func:`_best`, a total order,
    so the result is the same as choosing among all) whenever they pass 4 ``limit``. Violated rows can be
    far more than the batch: at N = 2,000-5,000 dense, with a support, every row from a held pair to one
    outside S is violated, and keeping them all took 1-4 GB. ``share`` > 0 raises ``limit`` to the number
    of largest-deficit rows whose deficits sum to that share of all violated rows' deficit
    (:func:`share_count`): that needs every violated row, so nothing is cut then."""
    k = z.shape[1]
    step = max(1, chunk // max(k, 1))
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    count = 0
    p = rows.pairs
    for s in range(0, rows.n_edge, step):
        control.check("rowgen's search for violated rows")  # a long scan at N = 2,000 (2 E K pairs)
        sl = slice(s, min(s + step, rows.n_edge))
        deficit = z[p.a[sl]] / p.g[sl, None] - z[p.b[sl]]
        deficit.reshape(-1)[rows.held_in(s, s + deficit.shape[0])] = 0.0
        e, kk = np.nonzero(deficit > min_deficit)
        found.append((e + s, kk, deficit[e, kk]))
        count += e.size
        if share <= 0 and count > 4 * limit:
            found = [_best(*_joined(found), limit)]
            count = found[0][0].size
    ei, ki, score = _joined(found)
    if share > 0 and ei.size > limit:
        limit = max(limit, share_count(score, share))
    if ei.size > limit:
        ei, ki, score = _best(ei, ki, score, limit)
    order = np.lexsort((ki, ei))  # deterministic order
    return ei[order], ki[order]


def _joined(found: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (edge ids, outputs, deficits) of the blocks ``found``, concatenated."""
    if not found:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    return (
        np.concatenate([f[0] for f in found]),
        np.concatenate([f[1] for f in found]),
        np.concatenate([f[2] for f in found]),
    )


def _best(ei: np.ndarray, ki: np.ndarray, score: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``limit`` rows of largest ``score``, ties broken by smaller edge id, then output (a total order:
    cutting a stream to its best ``limit`` at any points keeps the same rows as one cut at the end)."""
    keep = np.lexsort((ki, ei, -score))[:limit]
    return ei[keep], ki[keep], score[keep]


def _violated_rows(
    instance: Instance, z: np.ndarray, rows: _Rows, params: RowgenOptions, limit: int, share: float
) -> tuple[np.ndarray, np.ndarray]:
    """(pair ids, outputs): :func:`violated`'s rows (at most ``limit``), then with all pairs :func:`far_violated`'s
    among the rows that the graph majorant of z breaks too, at most ``far_rows_per_round``, or with 0 (the
    default) :func:`far_count`'s; counted in ``rows.far_found``. Why fewer than the edges' limit: romeR150
    (2 shared cores, gap 1e-2), far rows at the edges' limit (20,000) made round 2's LP 2.3x slower and the solve
    44-69 s, at 2,000 it took 26.6 s against the graph-only 27.6 s in the same rounds (bench/HISTORY.md, "Every
    pair in the metric")."""
    ei, ki = violated(z, rows, params.min_deficit, limit, share)
    if rows.metric is None:
        return ei, ki
    ref = column_majorant(instance, z)
    far_limit = params.far_rows_per_round or far_count(instance, z, ref, rows.metric, params, limit, ei.size > 0)
    fe, fk = far_violated(z, rows, params.min_deficit, far_limit, ref)
    rows.far_found += int(fe.size)
    return np.r_[ei, fe], np.r_[ki, fk]


def far_count(
    instance: Instance,
    z: np.ndarray,
    ref: np.ndarray,
    metric: MetricPairs,
    params: RowgenOptions,
    limit: int,
    edges_violated: bool,
) -> int:
    """Rows beyond the edges for the next round (``far_rows_per_round`` 0): max(:data:`FAR_ROWS_MIN`, ``limit`` /
    :data:`FAR_ROWS_SHARE`) when the far pairs matter at the requested gap, else :data:`FAR_ROWS_FEW` while an edge
    row is still violated (``edges_violated``). They matter when no edge row is violated (only rows beyond
    them can raise the bound then) or when the metric closure of ``ref`` (z's graph majorant, (N, K)) costs more
    than :data:`FAR_COST_SHARE` x the requested gap (relative to z's cost, or ``gap_abs``) above ``ref``: what
    the all-pair rows still to add are worth to the upper bound.

    Why (bench/HISTORY.md, "Far rows by their worth"): on roads the far pairs are worth +0.04 % at the release
    size and a few rows a round cost what the graph costs (romeR500: 1 a round, the graph's CPU seconds; 12,500,
    1.3x); on the city grid at 2 per km (1.5 km cells) they are worth 2.9 %, and 1 a round froze both bounds
    (13 rounds, gap 2.79 %) where the bulk certifies in 2 rounds."""
    bulk = max(FAR_ROWS_MIN, limit // FAR_ROWS_SHARE)
    if not edges_violated:
        return bulk
    weighted = instance.prior[:, None] * instance.costs
    worth = float(np.sum(weighted * (metric.majorant(ref)[0] - ref)))
    target = max(params.gap_rel * abs(float(np.sum(weighted * np.maximum(z, 0.0)))), params.gap_abs)
    return bulk if worth > FAR_COST_SHARE * target else FAR_ROWS_FEW


def far_violated(
    z: np.ndarray, rows: _Rows, min_deficit: float, limit: int, ref: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """With all pairs (``rows.metric``): (pair ids, outputs) of at most ``limit`` rows of pairs of one component
    that are not edges, outside the model, with deficit z_ak / g - z_bk > ``min_deficit`` (g capped at
    :data:`mdp_core.solvers.verify.MAX_LOG_RATIO`), largest deficit first, ascending (pair, output); the
    pairs get ids (:meth:`_Rows.far_ids`). Streamed: :meth:`mdp_core.solvers.metric_pairs.MetricPairs.deficits`
    expands only the pairs whose log rows differ by more than ln g; candidates are cut to the ``limit`` best
    (:func:`_best`, the same total order as :func:`violated`, on the key a N + b) as they pass 4 ``limit``.
    ``ref``: only rows it breaks too (:meth:`mdp_core.solvers.metric_pairs.MetricPairs.deficits`)."""
    if rows.metric is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    n = rows.n_records
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    count = 0
    for a, b, kk, deficit in rows.metric.deficits(z, MAX_LOG_RATIO, min_deficit, ref):
        control.check("rowgen's search for violated rows beyond the edges")
        ids = rows.far_ids(a, b, create=False)
        held = np.zeros(ids.shape, dtype=bool)
        known = ids >= 0
        held[known] = rows.is_held(ids[known], kk[known])
        found.append((a[~held] * n + b[~held], kk[~held], deficit[~held]))
        count += int((~held).sum())
        if count > 4 * limit:
            found = [_best(*_joined(found), limit)]
            count = found[0][0].size
    key, ki, score = _joined(found)
    if key.size > limit:
        key, ki, score = _best(key, ki, score, limit)
    ei = rows.far_ids(key // n, key % n) if key.size else np.zeros(0, np.int64)
    order = np.lexsort((ki, ei))
    return ei[order], ki[order]


def price(support: Support, c: np.ndarray, unit_dual: np.ndarray, bound: float, gap_rel: float) -> np.ndarray:
    """Pairs outside the support that join it (flat i K + k, ascending): reduced cost
    c_ik - y_i below -max(1e-12, gap_rel |bound| / (100 N)) at the unit rows' duals y (scaled unit,
    ``bound`` too). Such a pair would lower the Lagrangian bound's record term below the LP's y_i:
    pricing it in is what lets the bound over every pair reach the held LP's value. Empty without a
    support."""
    if support.full:
        return np.zeros(0, np.int64)
    n, k = support.col.shape
    threshold = max(1e-12, gap_rel * abs(bound) / (100 * n)) if np.isfinite(bound) else 1e-12
    reduced = c.reshape(n, k) - np.asarray(unit_dual, dtype=np.float64)[:, None]
    return np.flatnonzero((reduced < -threshold) & (support.col < 0))


def share_count(deficit: np.ndarray, share: float) -> int:
    """How many of the largest ``deficit`` values it takes for their sum to reach ``share`` of the sum
    of all (at least 1 when any is positive)."""
    if deficit.size == 0 or share <= 0:
        return 0
    cum = np.cumsum(np.sort(deficit)[::-1])
    return int(min(deficit.size, np.searchsorted(cum, share * cum[-1]) + 1))


def ipm_tolerance(gap_rel: float) -> float:
    """Relative duality gap at which each round's interior point stops: a tenth of the requested
    relative gap, within [1e-8 (HiGHS's default), 1e-3].

    The Lagrangian bound is valid for any duals (module docstring); a looser interior point only
    makes it less tight, by about the tolerance (rome500 round 1 at 1e-4: 1.2e-5 relative), so a
    tenth of the target spends at most about a tenth of the gap. ``optimality_tolerance`` (HiGHS's
    own check of the returned primal-dual gap) must follow it, or HiGHS reports "unknown"."""
    return min(1e-3, max(1e-8, 0.1 * gap_rel))


def round_tolerance(params: RowgenOptions, upper: float, lower: float, tol: float, full: bool = True) -> float:
    """The interior point's relative gap tolerance for the next round, from the bounds (``upper``,
    ``lower``; any one unit) after the current round, whose LP stopped at ``tol``; ``full``: the rows
    added for the next round filled the round's batch (``rows_per_round``: violated rows were left out).

    ``params.loose_tolerance`` when the bounds show that the next round cannot close the gap, else
    :func:`ipm_tolerance`. A loose round's LP costs 25-40 % less and its point chooses rows at least as
    well (on Rome roads the rounds after it close as fast or faster, and 2 of 4 rome500 seeds that
    needed a fourth round no longer do), but its own bounds are worse (its upper bound by up to
    0.5 %), so a round that might close must be tight. The next round is loosened only when all hold:

    - the current relative gap, less ``tol`` (a loose round's bound is looser by less than its
      tolerance), exceeds :data:`LOOSE_GAP` (5 %) and :data:`GAP_RATIO` times the target (or the
      absolute gap GAP_RATIO times ``gap_abs``). Measured (bench/HISTORY.md, "Loose rounds"): of 148
      pairs of consecutive rounds at a 0.1 % target none ended with less than a 68th of its
      predecessor's gap, and the largest gap a closing round followed was 2.3 % (syn1000); but at a
      1e-6 target a round after a 0.5 % gap can close outright (its rows were all that was missing),
      so the gap itself must be large, as after Rome's first round (10-15 %);
    - the batch was full: one that held every violated row left may be the last to add rows, and a
      loose last round costs one more LP of the same rows, tight (:func:`method`);
    - an upper bound is known: round 2 starts tight beside round 1's closure and is solved again,
      loose, when that closure shows its gap (:func:`method`).

    ``lp_solver`` "simplex" and ``loose_tolerance`` 0 keep every round tight.
    """
    tight = ipm_tolerance(params.gap_rel)
    if params.lp_solver != "ipm" or params.loose_tolerance <= tight or not full:
        return tight
    return params.loose_tolerance if out_of_reach(params, upper, lower, tol) else tight


def out_of_reach(params: RowgenOptions, upper: float, lower: float, tol: float) -> bool:
    """The bounds (``upper``, ``lower``) after a round whose LP stopped at ``tol`` show that the next
    round cannot close the gap (:func:`round_tolerance`'s first condition; False without both bounds)."""
    if not (np.isfinite(upper) and np.isfinite(lower)):
        return False
    scale = max(abs(upper), 1e-300)
    gap = (upper - lower) / scale - tol
    return gap > max(LOOSE_GAP, GAP_RATIO * max(params.gap_rel, params.gap_abs / scale))


def new_model(
    instance: Instance, options: SolverOptions, params: RowgenOptions
) -> tuple[Any, _Rows, np.ndarray, float]:
    """The restricted LP of round 1: every z_ik >= 0 with scaled costs, the N unit rows, the initial
    privacy rows (:func:`initial_rows`). Returns (Highs object, rows, (N K,) scaled costs, scale)."""
    n, k = instance.n_records, instance.n_outputs
    c, scale = highs.scale_costs(instance.prior[:, None] * instance.costs)
    c = c.ravel()
    metric = MetricPairs.of(instance) if options.all_pairs else None
    support = Support.of(support_estimate(instance, params.support_tau, metric)) if params.support_tau > 0 else None
    rows = _Rows.of(instance, support, options.all_pairs)
    h = highs.new_highs(highs.with_options(options, solver=params.lp_solver, presolve=False))
    if params.lp_solver == "ipm":
        tol = ipm_tolerance(params.gap_rel)
        highs.set_options(h, run_crossover="off", ipm_optimality_tolerance=tol, optimality_tolerance=tol)
    held = rows.support.flat
    h.addVars(held.size, np.zeros(held.size), np.full(held.size, highs.INF))
    highs.change_costs(h, np.arange(held.size), c[held])
    unit = sp.csr_matrix(
        (np.ones(held.size), np.arange(held.size), np.r_[0, np.cumsum(np.bincount(held // k, minlength=n))]),
        shape=(n, held.size),
    )
    highs.add_rows(h, unit, np.ones(n), np.ones(n))
    first = initial_rows(rows, instance.distances, params.neighbours)
    ei, ki = np.repeat(first, k), np.tile(np.arange(k), first.size)
    inside = (rows.support.col[rows.pairs.a[ei], ki] >= 0) & (rows.support.col[rows.pairs.b[ei], ki] >= 0)
    _add(h, rows, ei[inside], ki[inside], n, k)
    return h, rows, c, scale


def support_estimate(instance: Instance, tau: float, metric: MetricPairs | None = None) -> np.ndarray:
    """(N, K) bool: the pairs where the closure of the nearest-output mechanism reaches ``tau``.

    The nearest-output mechanism puts each record's mass on its cheapest output; its closure
    (:func:`mdp_core.solvers.mechanisms.smooth_to_mdp`, before renormalising) is
    z_ik = exp(-eps D(i, R_k)), R_k the records whose cheapest output is k and D the mDP graph's path
    distance. So (i, k) is kept when D(i, R_k) <= ln(1 / tau) / eps: K multi-source shortest-path
    searches cut off at that distance (scipy.sparse.csgraph.dijkstra with ``limit``), never an N x N
    distance matrix. Every record keeps its cheapest output (D = 0). With ``metric`` (all pairs) the closure
    is the metric one, D replaced by the metric distance within a component (:func:`_metric_support`)."""
    n, k = instance.n_records, instance.n_outputs
    best = np.argmin(instance.costs, axis=1)
    if metric is not None:
        return _metric_support(metric, best, k, np.log(1.0 / tau) / instance.epsilon)
    e = np.asarray(instance.edges, dtype=np.int64).reshape(-1, 2)
    d = np.asarray(instance.distances, dtype=np.float64)
    graph = sp.csr_matrix((np.r_[d, d], (np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]])), shape=(n, n))
    cut = np.log(1.0 / tau) / instance.epsilon
    mask = np.zeros((n, k), dtype=bool)
    for kk in np.unique(best):
        control.check("rowgen's support estimate")
        dist = csgraph.dijkstra(graph, directed=False, indices=np.flatnonzero(best == kk), min_only=True, limit=cut)
        mask[:, kk] = dist <= cut
    return mask


def _metric_support(metric: MetricPairs, best: np.ndarray, k: int, cut: float) -> np.ndarray:
    """:func:`support_estimate` in the metric: (i, k) kept when some record of i's component whose cheapest
    output is k lies within ``cut`` of i (i itself for its own cheapest output). Slabs of records: O(N^2)."""
    n = best.size
    mask = np.zeros((n, k), dtype=bool)
    mask[np.arange(n), best] = True
    order = np.argsort(best, kind="stable")
    outs, starts = np.unique(best[order], return_index=True)
    for slab in metric.slabs(1):
        control.check("rowgen's support estimate")
        near = np.where(slab.same, slab.d, np.inf)[:, order]
        mask[np.ix_(slab.rows, outs)] |= np.minimum.reduceat(near, starts, axis=1) <= cut
    return mask


def _closure(
    instance: Instance,
    z: np.ndarray,
    metric: MetricPairs | None = None,
    lower: float | None = None,
    deadline: float = np.inf,
) -> tuple[np.ndarray, float]:
    """The upper bound of one round: the cheapest of the closures of the LP point z (N, K), of :func:`softened`
    z (on the mDP graph, without ``metric``, and unless the plain closure is more than :data:`LOOSE_GAP` above
    the proven bound ``lower``: a round 1, where softening saves little and would delay the restart of round 2's
    LP, :func:`method`) and, with a non-uniform prior, of :func:`lowered` z, among those
    that pass :func:`mdp_core.solvers.verify.passes`; and its cost, inf when none passes (the closure of z is
    then returned unverified, no upper bound: ``certify`` decides). The softened point gets at most
    :data:`SOFT_ROUNDS` rounds of :func:`smooth_to_mdp` and its sweeps stop at ``deadline``
    (``time.perf_counter()``): a point it does not close there is dropped. With ``metric`` every closure is
    the one over every pair of a component in the metric (:meth:`MetricPairs.majorant`).

    Why (issue 51): the LP puts mass in rows it does not hold (a spike), and the closure then raises every
    neighbour up to that spike at their own weights. Rome N = 1,000 round 4: one record's spike was 81 % of the
    closure's raises, and the closure of the softened point is 0.086 % above the LP point where the plain
    closure is 0.157 %, which certifies in four rounds instead of five (bench/HISTORY.md, "A softened point").
    A record of small prior mass costs the LP almost nothing wherever its mass goes: cutting its spike
    (:func:`lowered`) then pays (bench/HISTORY.md, "Why the upper bound froze under a DP prior")."""
    z = np.maximum(z, 0.0)
    every = metric is not None
    best, _ = smooth_to_mdp(instance, z, metric=metric)
    ub = objective(instance, best)
    ok = passes(instance, best, all_pairs=every)
    far = lower is not None and ub - lower > LOOSE_GAP * abs(ub)
    points = [] if every or far else [(softened(instance, z, deadline=deadline), SOFT_ROUNDS)]
    if np.ptp(instance.prior) > 1e-12 * float(instance.prior.max()):
        points.append((lowered(instance, z, metric), 50))
    for point, rounds in points:
        cand, _ = smooth_to_mdp(instance, point, max_rounds=rounds, metric=metric)
        cost = objective(instance, cand)
        if passes(instance, cand, all_pairs=every) and (cost < ub or not ok):
            best, ub, ok = cand, cost, True
    return best, ub if ok else np.inf


SOFT_SWEEPS = 2  # softened's Gauss-Seidel sweeps (rome1000 round 4: 0.157 % -> 0.086 %, 0.078 %, 0.076 % after 1-3)
SOFT_ROUNDS = 8  # smooth_to_mdp's rounds for the softened point (Newton needs 4-5 on LP points); else dropped
SOFT_CHECK_ROWS = 64  # softened checks for a stop request and its deadline every this many rows


def softened(instance: Instance, z: np.ndarray, sweeps: int = SOFT_SWEEPS, deadline: float = np.inf) -> np.ndarray:
    """z (N, K) >= 0 with the rows of the records whose entries the closure raises from (:func:`_majorant`'s
    roots, largest raise cost first) re-optimised one at a time (:func:`_soft_row`), ``sweeps`` times, the
    roots found again before each sweep. Rows sum to 1 where changed. Only a point to close: the upper bound
    is its closure, verified, kept when cheaper (:func:`_closure`). Stops where it is (the point so far) at
    ``deadline`` (``time.perf_counter()``), checked every :data:`SOFT_CHECK_ROWS` rows with a stop request."""
    w = np.array(z, dtype=np.float64)
    n, k = w.shape
    if instance.n_edges == 0:
        return w
    e, d = np.asarray(instance.edges, np.int64), np.asarray(instance.distances, np.float64)
    a, b, g = np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]], np.exp(instance.epsilon * np.r_[d, d])
    order = np.argsort(a, kind="stable")
    b, g = b[order], g[order]
    start = np.searchsorted(a[order], np.arange(n + 1))
    weighted = instance.prior[:, None] * instance.costs
    for _ in range(sweeps):
        control.check("rowgen's softened closure point")
        m, src = _majorant(instance, w, roots=True)
        assert src is not None
        cost = np.bincount(src.ravel(), weights=(weighted * (m - w)).ravel(), minlength=n)
        for j, i in enumerate(np.argsort(-cost, kind="stable")[: int(np.count_nonzero(cost > 0))]):
            if j % SOFT_CHECK_ROWS == 0:
                control.check("rowgen's softened closure point")
                if time.perf_counter() >= deadline:
                    return w
            sl = slice(start[i], start[i + 1])
            row = _soft_row(w, weighted, int(i), b[sl], g[sl])
            if row is not None:
                w[i] = row
    return w


def _soft_row(w: np.ndarray, weighted: np.ndarray, i: int, nb: np.ndarray, g: np.ndarray) -> np.ndarray | None:
    """Record i's row (K,) minimising its own cost plus the cost of the raises it forces on its neighbours
    ``nb`` (ratios ``g`` = exp(eps d)) one edge away, the other rows of w (N, K) fixed:
        min_x  sum_k [ weighted_ik x_k + sum_j weighted_jk max(0, x_k / g_j - w_jk) ]
        s.t.   sum_k x_k = 1,  x_k >= max_j w_jk / g_j  (below that the closure raises x_k back).
    Separable and convex in each x_k (piecewise linear, breakpoints g_j w_jk): the cheapest segments are
    filled first, an exact solution. ``weighted``: (N, K) prior x cost. None when the lower limits alone
    exceed 1 (the row is left as it is)."""
    if nb.size == 0:
        return None
    k = w.shape[1]
    lo = np.max(w[nb] / g[:, None], axis=0)
    rest = 1.0 - float(lo.sum())
    if rest <= 0:
        return None
    t = g[:, None] * w[nb]  # (J, K): above t_jk the closure raises neighbour j's entry
    o = np.argsort(t, axis=0, kind="stable")
    ts = np.take_along_axis(t, o, axis=0)
    inc = np.take_along_axis(weighted[nb] / g[:, None], o, axis=0)
    slope = weighted[i][None, :] + np.vstack([np.zeros((1, k)), np.cumsum(inc, axis=0)])  # (J + 1, K)
    begin = np.maximum(np.vstack([np.zeros((1, k)), ts]), lo)
    end = np.maximum(np.vstack([ts, np.full((1, k), np.inf)]), lo)
    pick = np.argsort(slope, axis=None, kind="stable")  # within a column, its segments in order
    length = (end - begin).ravel()[pick]
    filled = np.cumsum(length)
    stop = int(np.searchsorted(filled, rest))
    take = np.zeros_like(length)
    take[:stop] = length[:stop]
    take[stop] = rest - (filled[stop - 1] if stop > 0 else 0.0)
    return lo + np.bincount(pick % k, weights=take, minlength=k)


def row_caps(instance: Instance, z: np.ndarray, chunk: int = CHUNK) -> np.ndarray:
    """(N, K): min over the mDP graph's neighbours b of a of exp(eps d_ab) z_bk, the largest z_ak that breaks
    no row (a, b) of output k (inf for a record without edges). Streams the directed edges grouped by head in
    blocks of about ``chunk`` (edge, output) entries."""
    cap = np.full(z.shape, np.inf)
    if instance.n_edges == 0:
        return cap
    e, d = np.asarray(instance.edges, np.int64), np.asarray(instance.distances, np.float64)
    a, b, g = np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]], np.exp(instance.epsilon * np.r_[d, d])
    order = np.argsort(a, kind="stable")
    a, b, g = a[order], b[order], g[order]
    step = max(1, chunk // max(z.shape[1], 1))
    lo = 0
    while lo < a.size:
        hi = min(lo + step, a.size)
        hi = int(np.searchsorted(a, a[hi - 1], side="right"))  # whole heads in one block
        heads, starts = np.unique(a[lo:hi], return_index=True)
        cap[heads] = np.minimum.reduceat(g[lo:hi, None] * z[b[lo:hi]], starts, axis=0)
        lo = hi
    return cap


def lowered(instance: Instance, z: np.ndarray, metric: MetricPairs | None = None) -> np.ndarray:
    """z (N, K) >= 0 with the entries lowered to their :func:`row_caps` where that pays: where the cost the
    closure spends raising entries from that entry (its root's raises, :func:`column_majorant`'s paths,
    weighted p_j c_jk) exceeds what lowering it adds to its own record's cost (p_i times the change of the
    row's mean cost once the row is renormalised). Each entry is judged alone; a row that would lose all
    its mass keeps z's. Rows are not renormalised here. The result is only a point to close: the upper bound
    is its closure, verified, kept when cheaper (:func:`_closure`)."""
    n, k = z.shape
    m, src = _majorant(instance, z, roots=True) if metric is None else metric.majorant(z, roots=True)
    assert src is not None
    weighted = instance.prior[:, None] * instance.costs
    key = (src * k + np.arange(k)[None, :]).ravel()
    raise_cost = np.bincount(key, weights=(weighted * (m - z)).ravel(), minlength=n * k).reshape(n, k)
    cut = np.minimum(z, row_caps(instance, z))
    drop = z - cut
    mass = z.sum(axis=1, keepdims=True)
    spent = (instance.costs * z).sum(axis=1, keepdims=True)
    left = mass - drop
    with np.errstate(divide="ignore", invalid="ignore"):
        change = np.where(left > 0, (spent - drop * instance.costs) / left - spent / mass, np.inf)
    out = np.where((drop > 0) & (raise_cost > instance.prior[:, None] * change), cut, z)
    empty = out.sum(axis=1) <= 0
    out[empty] = z[empty]
    return out


def _bounds(
    instance: Instance,
    z: np.ndarray,
    lag: lagrangian.Lagrangian | None,
    lam: np.ndarray,
    lb: float,
    best_ub: float,
    params: RowgenOptions,
    deadline: float,
    tol: float,
    notify: Callable[[float, float, int], None] | None = None,
    metric: MetricPairs | None = None,
) -> tuple[np.ndarray, float, lagrangian.Ascent | None]:
    """One round's bounds beside the next LP: the closure (the upper bound), then, when it does not
    close the gap with ``lb`` and ``lag`` is set, the Lagrangian bound at the round's row-sum duals
    ``lam`` (instance's cost unit) and ``params.lagrangian_steps`` subgradient steps towards the best
    upper bound, stopping as soon as the gap is closed (:func:`mdp_core.solvers.lagrangian.ascend`).
    ``deadline``: ``time.perf_counter()``; ``tol``: the round's LP tolerance. With
    ``lagrangian_rows`` the next round waits for this, so the ascent is skipped when the bounds show
    that round cannot close (:func:`out_of_reach`: it is loose and takes no Lagrangian rows).
    ``notify(bound, upper, evaluations)`` hears each better Lagrangian bound as it is found; ``metric``: the
    closure over every pair in the metric (all pairs)."""
    cz, ub = _closure(instance, z, metric, lb, deadline)
    target = min(ub, best_ub)
    if lag is None or not np.isfinite(target) or gap_closed(target, lb, params.gap_abs, params.gap_rel):
        return cz, ub, None
    if params.lagrangian_rows and out_of_reach(params, target, lb, tol):
        return cz, ub, None  # the next round waits for the ascent and would not take its rows (loose)
    wall = time.time() + (deadline - time.perf_counter())
    asc = lagrangian.ascend(
        lag,
        lam,
        params.lagrangian_steps,
        target,
        lambda bound: gap_closed(target, bound, params.gap_abs, params.gap_rel),
        wall,
        on_bound=None if notify is None else lambda bound, evals: notify(bound, target, evals),
    )
    return cz, ub, asc


def _lagrangian_progress(
    progress: Callable[[str], None] | None,
    options: SolverOptions,
    params: RowgenOptions,
    t0: float,
    it: int,
    lb: float,
) -> Callable[[float, float, int], None]:
    """Round ``it``'s Lagrangian bounds as they improve, reported as progress lines (from the closure's
    thread, while the next round's LP runs)."""

    def notify(bound: float, upper: float, evals: int) -> None:
        line = _line(options, params, t0, f"round {it} Lagrangian", (max(lb, bound), upper), f"evaluation {evals}")
        control.report(progress, line)

    return notify


def _line(
    options: SolverOptions, params: RowgenOptions, t0: float, step: str, bounds: tuple[float, float], detail: str
) -> control.Progress:
    """A progress line of rowgen's ``step`` with bounds (lower, upper), ``t0`` its start (perf_counter)."""
    lb, ub = bounds
    return control.Progress(
        "rowgen",
        step,
        lower=lb,
        upper=ub,
        gap_abs=params.gap_abs,
        gap_rel=params.gap_rel,
        elapsed=time.perf_counter() - t0,
        time_limit=options.time_limit,
        detail=detail,
    )


def _discard(lp: control.Background[highs.LpSolution], token: control.StopToken, why: str) -> None:
    """Stop a round's LP that is no longer needed and wait for it (it ends at HiGHS's next interrupt
    check); a stop of the stage itself still raises."""
    token.request(why)
    try:
        lp.result()
    except Exception:  # noqa: BLE001 -- its answer is not needed: only a stop of the stage itself matters
        control.check("rowgen")


def method(
    instance: Instance, options: SolverOptions, progress: Callable[[str], None] | None, params: RowgenOptions
) -> RawSolution:
    """The "rowgen" entry of :data:`mdp_core.solvers.solve.METHODS` (module docstring).

    Rounds overlap on two threads: round r's closure (the upper bound) runs while round r + 1's LP,
    whose rows depend only on round r's LP point, is already being solved; when the closure closes
    the gap, that LP is stopped and discarded. That LP starts at the tolerance the bounds known then
    allow (:func:`round_tolerance`); when round r's upper bound changes it (round 1's, the first upper
    bound, or one that puts the gap within reach), the LP is stopped and solved again at the new one.
    The result, the trace and every bound are those of the same rounds run one after the other (only
    the seconds differ)."""
    t0 = time.perf_counter()
    deadline = t0 + options.time_limit
    h, rows, c, scale = new_model(instance, options, params)
    lag = None
    if params.lagrangian_steps > 0:  # K subproblems, warm across rounds (mdp_core.solvers.lagrangian)
        lag = lagrangian.Lagrangian(
            instance,
            highs.with_options(options, threads=1),
            params.lagrangian_executor,
            scheduler=params.scheduler,
            pairs=rows.pairs,
        )
    lag_rounds: list[dict[str, Any]] = []
    try:
        return _rounds(instance, options, progress, params, t0, deadline, h, rows, c, scale, lag, lag_rounds)
    finally:
        if lag is not None:
            lag.close()


def _solve_lp(
    h: Any,
    rows: _Rows,
    params: RowgenOptions,
    deadline: float,
    it: int,
    tol: float | None = None,
    *,
    c: np.ndarray | None = None,
) -> highs.LpSolution:
    """Round ``it``'s LP over the rows the model holds now (cold interior point, or warm simplex);
    ``tol``: the interior point's relative gap tolerance (default :func:`ipm_tolerance`).

    With a support the held rows can be infeasible with every pair outside S at 0 (a coarse S: a record
    whose only pair is pinned by its neighbours' rows to more mass than they can give). Then, given ``c``
    ((N K,) scaled costs), every pair joins S and the LP is solved again: the uniform mechanism satisfies
    every row, so the model is feasible again, and the bound and closure are as before (module docstring)."""
    highs.set_time_limit(h, deadline - time.perf_counter())
    if params.lp_solver == "ipm":
        tol = ipm_tolerance(params.gap_rel) if tol is None else tol
        highs.set_options(h, ipm_optimality_tolerance=tol, optimality_tolerance=tol)
        highs.clear_solver(h)
    what = f"rowgen round {it} LP ({rows.count} rows)"
    sol = highs.run_robust(
        h, RETRIES, want_duals=True, accept=ACCEPT, solver=params.lp_solver, deadline=deadline, what=what
    )
    if sol.status != Status.INFEASIBLE or rows.support.full or c is None:
        return sol
    none = np.zeros(0, np.int64)
    _add(h, rows, none, none, rows.n_records, rows.n_outputs, np.flatnonzero(rows.support.col.ravel() < 0), c)
    return _solve_lp(h, rows, params, deadline, it, tol, c=c)


def _rounds(
    instance: Instance,
    options: SolverOptions,
    progress: Callable[[str], None] | None,
    params: RowgenOptions,
    t0: float,
    deadline: float,
    h: Any,
    rows: _Rows,
    c: np.ndarray,
    scale: float,
    lag: lagrangian.Lagrangian | None,
    lag_rounds: list[dict[str, Any]],
) -> RawSolution:
    """The rounds of :func:`method` (its docstring); ``lag``: the live Lagrangian subproblems or None."""
    n, k = instance.n_records, instance.n_outputs
    limit = params.rows_per_round or max(20_000, n * k // 2)
    best_z, best_ub, lb = np.full((n, k), 1.0 / k), np.inf, -np.inf
    trace: list[dict] = []
    status = Status.TIME_LIMIT

    solve_lp = partial(_solve_lp, h, rows, params, deadline, c=c)
    it, held = 1, rows.count
    tol = ipm_tolerance(params.gap_rel)
    sol = solve_lp(1, tol) if deadline > time.perf_counter() else None
    while sol is not None:
        if sol.x.size == 0:
            status = Status.TIME_LIMIT if sol.status in (Status.TIME_LIMIT, Status.INTERRUPTED) else sol.status
            break
        z = rows.support.scatter(sol.x)
        lb = max(lb, scale * lower_bound(c, rows, sol.row_dual[n:], k))
        if _cut_by_limit(sol, deadline, best_ub):  # past the time limit: this LP's lower bound only
            held, note = rows.count, ", its LP cut by the time limit: lower bound only"
            _report(progress, options, params, t0, it, (lb, best_ub), (held, 0), sol, (tol, note), trace)
            status = Status.OPTIMAL if gap_closed(best_ub, lb, params.gap_abs, params.gap_rel) else Status.TIME_LIMIT
            break
        lam = scale * np.asarray(sol.row_dual[:n], dtype=np.float64)
        notify = _lagrangian_progress(progress, options, params, t0, it, lb) if lag is not None else None
        bounds = partial(_bounds, instance, z, lag, lam, lb, best_ub, params, deadline, tol, notify, rows.metric)
        upper = control.Background(bounds, name="rowgen-closure")
        share = params.deficit_share if it >= params.share_from_round else 0.0
        ei, ki = _violated_rows(instance, z, rows, params, limit, share)  # while the closure runs
        priced = price(rows.support, c, sol.row_dual[:n], lb / scale, params.gap_rel)
        held = rows.count
        again, more = _continue(ei.size + priced.size, tol, it, params, deadline)
        sync = more and lag is not None and params.lagrangian_rows  # the next rows wait for the ascent
        ready = upper.result(f"rowgen round {it} closure") if sync else None
        known = (lb, best_ub) if ready is None else (max(lb, _lag_bound(ready[2], lb)), min(best_ub, ready[1]))
        more = more and not gap_closed(known[1], known[0], params.gap_abs, params.gap_rel)
        if more:  # round it + 1's LP starts now, beside the closure, with the bounds known so far
            asc_now = None if ready is None else ready[2]
            nxt, added = _next_lp(
                solve_lp, h, rows, params, it + 1, (ei, ki, priced, c), (tol, again, ei.size >= limit), known, asc_now
            )
        cz, ub, asc = ready if ready is not None else _closure_result(upper, it, nxt if more else None)
        if ub < best_ub or not np.isfinite(best_ub):  # best_ub from verified closures only (inf: none passed)
            best_z, best_ub = cz, min(ub, best_ub)
        lag_note = ""
        if asc is not None:
            lb = max(lb, asc.bound)
            lag_rounds.append({"round": it} | asc.stats())
            lag_note = f", Lagrangian {asc.bound:.6g} ({asc.evaluations} evals, {asc.seconds:.1f}s)"
        closed = gap_closed(best_ub, lb, params.gap_abs, params.gap_rel)
        held_added = (held, 0 if closed else added if more else int(ei.size))
        _report(progress, options, params, t0, it, (lb, best_ub), held_added, sol, (tol, lag_note), trace)
        if closed or not more:  # closed, no row left worth adding, the round limit or the time limit
            if more:
                _discard(nxt.lp, nxt.spec, f"round {it} closed the gap")
            status = _final_status(closed, int(ei.size + priced.size), it, params)
            break
        nxt = _retune(nxt, solve_lp, params, (lb, best_ub), tol)
        sol, tol = nxt.lp.result(f"rowgen round {it + 1} LP"), nxt.tol
        it += 1
    extra: dict[str, Any] = {"rows": held, "full_rows": rows.full_count, "columns": rows.support.count}
    extra |= {"lower_bound": lb, "upper_bound": best_ub, "lp_solver": params.lp_solver}
    extra |= {} if lag is None else {"lagrangian": lag_rounds}
    extra |= {} if rows.metric is None else {"pairs": "all", "metric_rows_found": rows.far_found}
    return RawSolution(
        best_z, status, lb if np.isfinite(lb) else None, len(trace), extra, pd.DataFrame(trace, columns=TRACE_COLUMNS)
    )


def _cut_by_limit(sol: highs.LpSolution, deadline: float, best_ub: float) -> bool:
    """The round's LP ended at the time limit (HiGHS stopped it there, or the limit passed while it ran) and an
    upper bound is known: the round then gives only its lower bound, valid at any duals (module docstring), and
    the rounds stop. Its closure and violation scan are skipped: on a point the limit cut short they rarely help,
    and at dense N = 10,000 they take about 1,000 s, which a one-hour limit overran (bench/HISTORY.md)."""
    return bool(np.isfinite(best_ub)) and (sol.status == Status.TIME_LIMIT or time.perf_counter() >= deadline)


def _continue(to_add: int, tol: float, it: int, params: RowgenOptions, deadline: float) -> tuple[bool, bool]:
    """(again, more) after round ``it``'s LP (stopped at ``tol``) left ``to_add`` rows and columns to add:
    ``again`` when nothing is left after a loose LP (its point is feasible but its bound loose: once more,
    tight); ``more`` when there is a next round to solve (within the round and time limits)."""
    again = to_add == 0 and tol > ipm_tolerance(params.gap_rel)
    return again, (to_add > 0 or again) and it < params.max_rounds and deadline > time.perf_counter()


def _lag_bound(asc: lagrangian.Ascent | None, lb: float) -> float:
    return lb if asc is None else asc.bound


def _closure_result(
    upper: control.Background[tuple[np.ndarray, float, lagrangian.Ascent | None]], it: int, nxt: _Next | None
) -> tuple[np.ndarray, float, lagrangian.Ascent | None]:
    """Round ``it``'s closure (and ascent) from ``upper``; on any exception the running next LP
    ``nxt`` is stopped first (no HiGHS run is left behind in this process)."""
    try:
        return upper.result(f"rowgen round {it} closure")
    except BaseException:
        if nxt is not None:
            nxt.spec.request("rowgen stopped")
        raise


def _next_lp(
    solve_lp: Callable[[int, float], highs.LpSolution],
    h: Any,
    rows: _Rows,
    params: RowgenOptions,
    it: int,
    picked: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    after: tuple[float, bool, bool],
    known: tuple[float, float],
    asc: lagrangian.Ascent | None,
) -> tuple[_Next, int]:
    """Add round ``it``'s rows and start its LP: (:class:`_Next`, rows added). ``picked``: the violated
    rows (edge ids, outputs), the priced pairs (:func:`price`) and the (N K,) scaled costs; ``after``: the tolerance the last LP stopped at, whether no row was left
    after that loose LP (``again``: this one is tight) and whether the batch was full; ``known``:
    (lower, best upper) bound so far; ``asc``: with ``lagrangian_rows``, the ascent whose subproblems'
    binding rows are added when this round is tight (None: none)."""
    (ei, ki, priced, c), (tol, again, full) = picked, after
    n, k = rows.n_records, rows.n_outputs
    tight = ipm_tolerance(params.gap_rel)
    nxt_tol = tight if again else round_tolerance(params, known[1], known[0], tol, full)
    if asc is not None and nxt_tol == tight:
        ei, ki = _with_binding(rows, ei, ki, asc.binding)
    _add(h, rows, ei, ki, n, k, priced, c)
    return _start_lp(solve_lp, it, nxt_tol, full, not np.isfinite(known[1])), int(ei.size)


@dataclass
class _Next:
    """Round ``it``'s LP, running in a background thread under a token of its own at tolerance ``tol``;
    ``full`` and ``blind`` (no upper bound yet) are what :func:`round_tolerance` knew when it started."""

    it: int
    tol: float
    full: bool
    blind: bool
    spec: control.StopToken
    lp: control.Background[highs.LpSolution]


def _start_lp(
    solve_lp: Callable[[int, float], highs.LpSolution], it: int, tol: float, full: bool, blind: bool
) -> _Next:
    """Start round ``it``'s LP at tolerance ``tol`` (:class:`_Next`)."""
    spec = control.StopToken(parent=control.current())
    return _Next(
        it, tol, full, blind, spec, control.Background(partial(solve_lp, it, tol), token=spec, name="rowgen-lp")
    )


def _retune(
    nxt: _Next,
    solve_lp: Callable[[int, float], highs.LpSolution],
    params: RowgenOptions,
    bounds: tuple[float, float],
    tol: float,
) -> _Next:
    """``nxt``, or the same round started again at the tolerance the bounds (lower, best upper) after
    the round before it (whose LP stopped at ``tol``) now give, when it started without an upper bound
    or when the round may now close (:func:`round_tolerance`)."""
    lb, ub = bounds
    need = round_tolerance(params, ub, lb, tol, nxt.full)
    if need == nxt.tol or not (nxt.blind or need == ipm_tolerance(params.gap_rel)):
        return nxt
    _discard(nxt.lp, nxt.spec, f"round {nxt.it} solved again at tolerance {need:.0e}")
    return _start_lp(solve_lp, nxt.it, need, nxt.full, nxt.blind)


def _final_status(closed: bool, violated_left: int, it: int, params: RowgenOptions) -> Status:
    """Why the rounds ended: the gap closed (optimal), no violated row left worth adding (feasible:
    every bound is proven but the gap is open), the round limit or else the time limit."""
    if closed:
        return Status.OPTIMAL
    if violated_left == 0:
        return Status.FEASIBLE
    return Status.ITERATION_LIMIT if it >= params.max_rounds else Status.TIME_LIMIT


def _report(
    progress: Callable[[str], None] | None,
    options: SolverOptions,
    params: RowgenOptions,
    t0: float,
    it: int,
    bounds: tuple[float, float],
    held_added: tuple[int, int],
    sol: highs.LpSolution,
    notes: tuple[float, str],
    trace: list[dict],
) -> None:
    """Append round ``it``'s trace row (bounds (lower, best upper), rows (held, added), notes (the LP's
    tolerance, the Lagrangian's note)) and report it."""
    (lb, ub), (held, added), (tol, lag_note) = bounds, held_added, notes
    tol = tol if params.lp_solver == "ipm" else float("nan")
    seconds = (round(sol.seconds, 3), round(time.perf_counter() - t0, 3))
    values = (it, lb, ub, ub - lb, held, added, *seconds, tol)
    trace.append(dict(zip(TRACE_COLUMNS, values, strict=True)))
    fallback = " " + sol.fallback if sol.fallback else ""
    loose = f" (tolerance {tol:.0e})" if tol > ipm_tolerance(params.gap_rel) else ""
    detail = f"{held} rows (+{added}), LP {sol.seconds:.1f}s{loose}{fallback}{lag_note}"
    control.report(progress, _line(options, params, t0, f"round {it}", (lb, ub), detail))
