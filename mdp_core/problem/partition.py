"""Secret-dataset partitioning for Benders decomposition (Qiu 2024, section 3.4 and appendix C).

A partition assigns every record a subset id l in 0..M'-1 (M' <= M: k-means may leave a cluster
empty; ids are compacted). A record is a *boundary* record when it has an mDP neighbour in another
subset, else *internal* (Definition 3.2). Four partitioners, all seeded (numpy ``default_rng``):

* ``kmdv``  -- k-means on distance vectors d_i = [d_i1 .. d_iN] (Eq. 21). d_ij is the instance's
  metric distance when the records have coordinates, else the shortest-path distance in the mDP
  graph (unreachable pairs get twice the largest finite distance). For N <= ``DENSE_LIMIT`` the
  (N, N) matrix is formed. Above that it is never stored: its rows are generated in blocks and
  multiplied by a seeded Gaussian (N, ``JL_DIM``) matrix / sqrt(JL_DIM), i.e. k-means runs on a
  Johnson-Lindenstrauss sketch of the distance vectors, which preserves every ||d_i - d_j|| (and
  so the k-means objective) within a small relative error w.h.p. Memory O(N * JL_DIM), time O(N^2).
* ``kmrec`` -- k-means on the records' coordinates / embeddings (``instance.record_points()``).
* ``kmadj`` -- k-means on adjacency rows (0/1 neighbour indicators, Eq. 60), kept sparse: it runs on
  a JL sketch A @ G when N > ``DENSE_LIMIT``.
* ``bsc``   -- balanced spectral clustering (appendix C.3): the M eigenvectors of the unnormalised
  Laplacian L = D - A (0/1 adjacency, RatioCut) with the smallest eigenvalues, from ARPACK in
  shift-invert mode (sparse LU of L + sigma I), then k-means on the rows of that (N, M) matrix.

k-means is Lloyd's algorithm with k-means++ seeding (scipy ``kmeans2``), best of ``N_INIT`` runs.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.cluster.vq import kmeans2
from scipy.sparse import csgraph
from scipy.sparse.linalg import eigsh

from mdp_core.declarations.methods import PARTITIONERS  # defined there, importing no scipy
from mdp_core.errors import InputError
from mdp_core.problem.graph import adjacency, components, path_distances
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import pairwise

DENSE_LIMIT = 2000  # N above which distance / adjacency vectors are sketched instead of stored
JL_DIM = 128  # sketch dimension
N_INIT = 4  # k-means restarts (best inertia wins)
_BLOCK = 512  # rows of the distance matrix generated at once


@dataclass
class Partition:
    """Subsets and roles of the records.

    Attributes:
        labels: (N,) int64 subset id in 0..n_subsets-1.
        boundary: (N,) bool, True for boundary records (a neighbour in another subset).
        n_subsets: number of non-empty subsets.
        method: partitioner name (or "given").
    """

    labels: np.ndarray
    boundary: np.ndarray
    n_subsets: int
    method: str = "given"

    @property
    def roles(self) -> np.ndarray:
        """(N,) array of "boundary" / "internal"."""
        return np.where(self.boundary, "boundary", "internal")


def roles(edges: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(N,) bool: True where the record has a neighbour with a different label (Definition 3.2)."""
    labels = np.asarray(labels)
    cut = labels[edges[:, 0]] != labels[edges[:, 1]]
    boundary = np.zeros(labels.shape[0], dtype=bool)
    boundary[edges[cut, 0]] = True
    boundary[edges[cut, 1]] = True
    return boundary


def from_labels(instance: Instance, labels: np.ndarray, method: str = "given") -> Partition:
    """Validate (N,) subset ids (any integers), compact them to 0..M'-1 and classify the records."""
    labels = np.asarray(labels)
    if labels.shape != (instance.n_records,):
        raise InputError(f"labels must have shape (N={instance.n_records},), got {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise InputError(f"labels must be integers, got dtype {labels.dtype}")
    _, compact = np.unique(labels, return_inverse=True)
    compact = compact.astype(np.int64)
    return Partition(compact, roles(instance.edges, compact), int(compact.max()) + 1, method)


def balance_stats(instance: Instance, part: Partition) -> dict:
    """The paper's Tables 1-2 statistics (JSON-able).

    ``internal_mean`` / ``internal_max``: internal records per subset (the subproblem sizes);
    ``mp_component_mean`` / ``mp_component_max``: sizes of the connected components of the master
    problem's graph (boundary records, edges between boundary records); plus counts and the
    boundary fraction.
    """
    n = instance.n_records
    internal = np.bincount(part.labels[~part.boundary], minlength=part.n_subsets)
    ys = np.flatnonzero(part.boundary)
    if ys.size:
        local = np.full(n, -1, dtype=np.int64)
        local[ys] = np.arange(ys.size)
        e = instance.edges
        keep = part.boundary[e[:, 0]] & part.boundary[e[:, 1]]
        _, comp = components(ys.size, local[e[keep]])
        sizes = np.bincount(comp)
    else:
        sizes = np.zeros(1, dtype=np.int64)
    cut_edges = int(np.sum(part.labels[instance.edges[:, 0]] != part.labels[instance.edges[:, 1]]))
    return {
        "method": part.method,
        "n_records": n,
        "n_subsets": part.n_subsets,
        "n_boundary": int(ys.size),
        "boundary_fraction": float(ys.size / n),
        "internal_mean": float(internal.mean()),
        "internal_max": int(internal.max()),
        "subset_size_max": int(np.bincount(part.labels).max()),
        "empty_internal_subsets": int(np.sum(internal == 0)),
        "mp_components": int(sizes.shape[0]) if ys.size else 0,
        "mp_component_mean": float(sizes.mean()),
        "mp_component_max": int(sizes.max()),
        "cut_edges": cut_edges,
    }


# ----------------------------------------------------------------------------- embeddings
def _has_coordinates(instance: Instance) -> bool:
    try:
        instance.record_points()
    except InputError:
        return False
    return instance.metric in ("euclidean", "haversine")


def _distance_block(instance: Instance, rows: np.ndarray, pts: np.ndarray | None) -> np.ndarray:
    """(len(rows), N) distance vectors d_i for the given records."""
    if pts is not None:
        return pairwise(instance.metric, pts[rows], pts)
    d = path_distances(instance.n_records, instance.edges, instance.distances, rows)
    return d


def _sketch(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal((n, JL_DIM)) / np.sqrt(JL_DIM)


def distance_vectors(instance: Instance, rng: np.random.Generator) -> np.ndarray:
    """(N, N) distance vectors, or their (N, JL_DIM) Gaussian sketch when N > DENSE_LIMIT."""
    n = instance.n_records
    pts = instance.record_points() if _has_coordinates(instance) else None
    dense = n <= DENSE_LIMIT
    g = None if dense else _sketch(n, rng)
    out = np.empty((n, n if dense else JL_DIM))
    fill = None
    if pts is None:  # graph metric: unreachable pairs need a finite stand-in
        finite_max = 0.0
        for s in range(0, n, _BLOCK):
            blk = _distance_block(instance, np.arange(s, min(s + _BLOCK, n)), None)
            finite_max = max(finite_max, float(np.max(np.where(np.isfinite(blk), blk, 0.0))))
        fill = 2.0 * finite_max + instance.eta
    for s in range(0, n, _BLOCK):
        blk = _distance_block(instance, np.arange(s, min(s + _BLOCK, n)), pts)
        if fill is not None:
            blk[~np.isfinite(blk)] = fill
        out[s : s + blk.shape[0]] = blk if dense else blk @ g
    return out


def adjacency_vectors(instance: Instance, rng: np.random.Generator) -> np.ndarray:
    """(N, N) 0/1 adjacency rows (dense) or their (N, JL_DIM) sketch when N > DENSE_LIMIT."""
    n = instance.n_records
    a = adjacency(n, instance.edges, np.ones(instance.n_edges))
    if n <= DENSE_LIMIT:
        return a.toarray()
    return np.asarray(a @ _sketch(n, rng))


def spectral_embedding(instance: Instance, m: int) -> np.ndarray:
    """(N, m) eigenvectors of L = D - A (0/1 adjacency) for the m smallest eigenvalues."""
    n = instance.n_records
    a = adjacency(n, instance.edges, np.ones(instance.n_edges))
    lap = csgraph.laplacian(a).astype(np.float64)
    if n <= max(400, 3 * m):
        _, vecs = np.linalg.eigh(lap.toarray())
        return vecs[:, :m]
    # Shift-invert around a small negative sigma: L - sigma I is positive definite, so the LU is
    # stable and the eigenvalues nearest sigma are the smallest ones of L.
    _, vecs = eigsh(sp.csc_matrix(lap), k=m, sigma=-1e-3, which="LM", v0=np.ones(n) / np.sqrt(n))
    return vecs


def kmeans(x: np.ndarray, m: int, rng: np.random.Generator, n_init: int = N_INIT) -> np.ndarray:
    """(N,) labels from Lloyd's k-means with k-means++ seeding; best of ``n_init`` seeded runs."""
    n = x.shape[0]
    if m >= n:
        return np.arange(n, dtype=np.int64)
    best, best_cost = None, np.inf
    for _ in range(n_init):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cent, lab = kmeans2(x, m, minit="++", iter=50, seed=rng)
        cost = float(np.sum((x - cent[lab]) ** 2))
        if cost < best_cost:
            best, best_cost = lab, cost
    assert best is not None  # n_init >= 1
    return best.astype(np.int64)


def partition(instance: Instance, method: str = "kmdv", n_subsets: int = 25, seed: int = 0) -> Partition:
    """Partition the records into at most ``n_subsets`` subsets with the named partitioner.

    Args:
        method: one of ``PARTITIONERS``.
        n_subsets: 1 <= M <= N (an M above N is an error, not clamped: the provenance would lie).
        seed: seed of every random choice (k-means++ seeding, sketches).
    """
    if method not in PARTITIONERS:
        raise InputError(f"partitioner must be one of {PARTITIONERS}, got {method!r}")
    if int(n_subsets) != n_subsets or n_subsets < 1:
        raise InputError(f"n_subsets must be an integer >= 1, got {n_subsets}")
    if n_subsets > instance.n_records:
        raise InputError(f"n_subsets={n_subsets} exceeds the number of records N={instance.n_records}")
    m = int(n_subsets)
    rng = np.random.default_rng(seed)
    if m == 1:
        return from_labels(instance, np.zeros(instance.n_records, dtype=np.int64), method)
    if method == "kmdv":
        x = distance_vectors(instance, rng)
    elif method == "kmrec":
        x = instance.record_points()
    elif method == "kmadj":
        x = adjacency_vectors(instance, rng)
    else:
        x = spectral_embedding(instance, m)
    return from_labels(instance, kmeans(np.asarray(x, dtype=np.float64), m, rng), method)
