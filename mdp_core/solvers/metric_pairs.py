"""Every two records of a component in the data's metric ("all pairs", issue 51): the lazy pair scans.

Privacy contract
    input:      an instance whose records carry coordinates of its metric (``x0..`` euclidean, ``lat, lon``
                haversine km), its mDP graph (edges within eta) and eps per distance unit.
    guarantee:  with ``SolverOptions.all_pairs``, a certified mechanism meets z_ik <= exp(eps d(i, j)) z_jk for
                every two records i, j of one component of the mDP graph and every output k, d the metric
                distance: the stated rate is eps for any two records (stretch 1), not eps x the graph's
                stretch beyond eta.
    holds by:   the certify gate (:func:`mdp_core.solvers.verify.verify` with ``all_pairs``, every pair
                checked in chunks); the closure here (:func:`MetricPairs.majorant`) and the exact repair
                (:func:`mdp_core.solvers.verify.repair`) meet it by construction, proofs below.
    reference:  Chatzikokolakis et al. 2013 (d-privacy over a metric); Andres et al. 2013 (geo-indistinguishability);
                Qiu et al. 2024, Property 3.2 (the guarantee the mDP graph alone gives: eps D_G, D_G >= d).

Why. A mechanism certified on the mDP graph's edges (d <= eta) is eps D_G-private between any two records,
D_G the graph's path distance, hence eps x stretch in the metric (:mod:`mdp_core.release.protection`).
Certifying the metric itself for every pair removes the stretch. The full LP then has N (N - 1) K privacy
rows per component; almost none of them bind (a pair at distance d allows a ratio e^{eps d}), so they are
found lazily, never as an N x N x K array.

The scans. Records are taken in slabs of ``b`` rows (``b N K`` <= :data:`CHUNK` entries). For a slab, the
metric distances d (b, N) and the Chebyshev distances between rows of log Z, ``cheb(i, j) = max_k |ln z_ik -
ln z_jk|`` (scipy ``cdist``, C speed), are computed; a pair can break a row z_ik <= e^{c} z_jk for some k
(either direction) only when ``cheb(i, j) > c``. Only those *flagged* pairs are expanded over the K outputs.
A nearly private point (a closure round, a mechanism to verify) flags few pairs; an LP point of row
generation flags the pairs whose rows it breaks.

The metric closure (:meth:`MetricPairs.majorant`). For a column l = ln z_.k, its smallest majorant whose
every pair of a component meets l'_i - l'_j <= eps d(i, j) is

    l'_i = max_{j in comp(i)} (l_j - eps d(i, j))        (j = i included: l' >= l).

Proof that it meets every pair: let m attain l'_i; then l'_j >= l_m - eps d(m, j) >= l_m - eps d(m, i) -
eps d(i, j) = l'_i - eps d(i, j) by the triangle inequality of the metric d. Smallest: any majorant L of l
meeting the pairs has L_i >= L_j - eps d(i, j) >= l_j - eps d(i, j) for every j. One pass suffices (the
metric's own closure is itself: a second pass gives max_m (l_m - eps d(m, j) - eps d(j, i)) <= l'_i by
the same triangle inequality), unlike the graph majorant's Bellman-Ford sweeps, and the maximiser m is a
root: an entry that was not raised (else l_m < l_q - eps d(q, m) for some q and q would beat m for i).
With the mDP graph's shortest paths D instead (the graph-only closure), the same argument holds with
min(D, d) = d, since D >= d within a component (its edges are metric distances).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.spatial.distance import cdist

from mdp_core.errors import InputError
from mdp_core.problem.graph import components
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import haversine_rows_km, pairwise

CHUNK = 1 << 22  # (pair, output) entries of one slab
LOG_FLOOR = -690.0  # ln of the floor put under zeros where a scan only needs ratios up to e^{MAX_LOG_RATIO}


@dataclass(frozen=True)
class Slab:
    """A block of records ``rows`` (b,) against every record: metric distances ``d`` (b, N), ``same`` (b, N)
    bool (j in the component of i, j != i) and ``edge`` (b, N) bool (i, j an edge of the mDP graph)."""

    rows: np.ndarray
    d: np.ndarray
    same: np.ndarray
    edge: np.ndarray


@dataclass(frozen=True)
class MetricPairs:
    """The instance's records in its metric, their components and edges: what the all-pair scans need."""

    points: np.ndarray  # (N, D) record coordinates of the metric
    metric: str  # "euclidean" or "haversine"
    epsilon: float
    labels: np.ndarray  # (N,) component of each record in the mDP graph
    adj: sp.csr_matrix  # (N, N) bool, the mDP graph's edges both ways

    @classmethod
    def of(cls, instance: Instance) -> MetricPairs:
        """The all-pair scans of ``instance``; InputError when its records carry no coordinates of its metric
        (a table-only metric cannot say how far two records that are not neighbours are)."""
        cols = instance.coordinate_columns()
        if instance.metric not in ("euclidean", "haversine") or not cols:
            raise InputError(
                f"all_pairs needs record coordinates of the metric (euclidean x0.. or haversine lat, lon); this "
                f"instance's metric is {instance.metric!r} with coordinate columns {cols}: certify the mDP graph's "
                "edges instead (all_pairs = false)"
            )
        n = instance.n_records
        _, labels = components(n, instance.edges)
        e = instance.edges
        adj = sp.csr_matrix(
            (np.ones(2 * e.shape[0], dtype=bool), (np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]])), shape=(n, n)
        )
        return cls(instance.record_points(), instance.metric, instance.epsilon, labels, adj)

    @property
    def n(self) -> int:
        return int(self.labels.size)

    def count(self) -> int:
        """Undirected pairs of records in one component: sum over components of s (s - 1) / 2."""
        s = np.bincount(self.labels).astype(np.int64)
        return int(np.sum(s * (s - 1) // 2))

    def distance(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(m,) metric distances of the pairs (a_j, b_j)."""
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        if a.size == 0:
            return np.zeros(0)
        if self.metric == "euclidean":
            return np.linalg.norm(self.points[a] - self.points[b], axis=1)
        return haversine_rows_km(self.points[a], self.points[b])

    def slabs(self, width: int, rows: np.ndarray | None = None) -> Iterator[Slab]:
        """Slabs of ``rows`` (None: every record) of b records each, b N ``width`` <= :data:`CHUNK`."""
        r = np.arange(self.n) if rows is None else np.asarray(rows, np.int64)
        step = max(1, CHUNK // max(self.n * max(width, 1), 1))
        for s in range(0, r.size, step):
            block = r[s : s + step]
            d = pairwise(self.metric, self.points[block], self.points)
            same = self.labels[block][:, None] == self.labels[None, :]
            same[np.arange(block.size), block] = False
            yield Slab(block, d, same, self.adj[block].toarray())

    def majorant(self, z: np.ndarray, roots: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """The metric closure of every column of ``z`` (N, K) >= 0 (module docstring) and, with ``roots``,
        (N, K) int64: the record each entry was raised from (its own when not raised; the largest index
        among ties). Entries not raised keep their exact value; zeros stay zero unless raised (ln 0 is
        taken as :data:`LOG_FLOOR`, e^-690: a value below it is not raised, as e^{l - eps d} underflows).
        Same shape and contract as :func:`mdp_core.solvers.mechanisms.column_majorant`'s private worker."""
        z = np.maximum(np.asarray(z, dtype=np.float64), 0.0)
        k = z.shape[1]
        with np.errstate(divide="ignore"):
            logz = np.maximum(np.log(z), LOG_FLOOR)
        out = logz.copy()
        src = np.broadcast_to(np.arange(self.n)[:, None], z.shape).copy() if roots else None
        eps = self.epsilon
        for slab in self.slabs(k):
            cheb = cdist(logz[slab.rows], logz, "chebyshev")
            ii, jj = np.nonzero(slab.same & (cheb > eps * slab.d))
            if ii.size == 0:
                continue
            step = max(1, CHUNK // k)
            for s in range(0, ii.size, step):
                i, j = ii[s : s + step], jj[s : s + step]
                rec = slab.rows[i]
                vals = logz[j] - eps * slab.d[i, j][:, None]  # (f, K): what j allows at i
                starts = np.flatnonzero(np.r_[True, rec[1:] != rec[:-1]])  # pairs come row by row
                heads = rec[starts]
                best = np.maximum.reduceat(vals, starts, axis=0)
                up = best > out[heads]
                if src is not None and up.any():
                    head_of = np.repeat(np.arange(heads.size), np.diff(np.r_[starts, i.size]))
                    cand = np.maximum.reduceat(np.where(vals == best[head_of], j[:, None], -1), starts, axis=0)
                    src[heads] = np.where(up, cand, src[heads])
                out[heads] = np.where(up, best, out[heads])
        return np.where(out > logz, np.exp(out), z), src

    def deficits(
        self, z: np.ndarray, cap: float, min_deficit: float, ref: np.ndarray | None = None
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """The rows z_ak - g z_bk <= 0 (g = exp(min(eps d_ab, ``cap``))) of the pairs (a, b) of one component
        that are not edges of the mDP graph, broken by ``z`` (N, K) with deficit z_ak / g - z_bk >
        ``min_deficit``: blocks of (a, b, k, deficit), streamed. A deficit needs ln z_ak - ln z_bk > ln g, so
        only pairs with cheb(a, b) > ln g are expanded (zeros floored at e^-690, far below e^-cap).

        ``ref`` (N, K): only the rows that ``ref`` breaks too (by more than ``min_deficit``), pairs flagged
        on ``ref``'s log rows. Row generation passes the graph majorant of z
        (:func:`mdp_core.solvers.mechanisms.column_majorant`): a row z breaks but its majorant meets is one the
        edges' rows would mend (the majorant raised z_bk along a path), so it is left to them."""
        k = z.shape[1]
        with np.errstate(divide="ignore"):
            logz = np.maximum(np.log(np.maximum(z if ref is None else ref, 0.0)), LOG_FLOOR)
        eps = self.epsilon
        for slab in self.slabs(k):
            logg = np.minimum(eps * slab.d, cap)
            cheb = cdist(logz[slab.rows], logz, "chebyshev")
            ii, jj = np.nonzero(slab.same & ~slab.edge & (cheb > logg))
            step = max(1, CHUNK // k)
            for s in range(0, ii.size, step):
                i, j = ii[s : s + step], jj[s : s + step]
                a, inv = slab.rows[i], np.exp(-logg[i, j])[:, None]
                deficit = z[a] * inv - z[j]
                broken = deficit > min_deficit
                if ref is not None:
                    broken &= ref[a] * inv - ref[j] > min_deficit
                p, kk = np.nonzero(broken)
                if p.size:
                    yield a[p], j[p], kk, deficit[p, kk]
