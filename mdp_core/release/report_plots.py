"""The figures of a release's report (matplotlib, Agg backend, PNG): the released outputs over the mDP graph, the
count noise, the bounds per iteration, the partition, the comparison against planar Laplace and the curves.

Every plot function writes one PNG atomically and returns its path. No timestamps are embedded
(``metadata={"Software": None}``), so the same data gives the same bytes. numpy, scipy, pandas and matplotlib
are imported inside the functions: importing this module costs nothing (:mod:`mdp_core.release.report`, the
text, re-exports these names).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mdp_core.declarations.methods import REGISTRY
from mdp_core.runtime.files import atomic_write

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

_PNG_META = {"Software": None}


def _plt():
    """matplotlib.pyplot on the Agg backend, imported on first use (it costs ~1 s)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=100, metadata=_PNG_META))
    _plt().close(fig)
    return path


# What the bounds plot is titled and its curves labelled, per method that ran: each method's declared
# ``bounds`` (mdp_core.declarations.methods); a method without them: its own name and the generic labels.
BOUND_PLOTS: dict[str, tuple[str, str, str]] = {n: m.bounds for n, m in REGISTRY.items() if m.bounds is not None}


def bounds_title(method: str) -> str:
    """The bounds plot's title for the method that ran (``rowgen`` -> "Row generation: bounds")."""
    return f"{BOUND_PLOTS.get(method, (method, '', ''))[0]}: bounds"


def plot_bounds(trace: pd.DataFrame, path: Path, method: str = "benders") -> Path:
    """Upper / lower bound per iteration of the decomposition ``method`` that ran (Qiu 2024 Figs. 17-20),
    from its trace table (columns ``iteration``, ``lower_bound``, ``upper_bound``; an infinite UB is not
    drawn), titled for that method (:func:`bounds_title`)."""
    import numpy as np

    _, lower, upper = BOUND_PLOTS.get(method, (method, "lower bound", "upper bound (best feasible)"))
    fig, ax = _plt().subplots(figsize=(6, 3.5))
    it = trace["iteration"].to_numpy()
    ax.plot(it, trace["lower_bound"].to_numpy(dtype=float), label=lower)
    ub = trace["upper_bound"].to_numpy(dtype=float)
    ax.plot(it, np.where(np.isfinite(ub), ub, np.nan), label=upper)
    ax.set_xlabel("iteration")
    ax.set_ylabel("expected utility loss")
    ax.set_title(bounds_title(method))
    ax.legend()
    fig.tight_layout()
    return _save(fig, path)


def plot_partition(
    points: np.ndarray, labels: np.ndarray, boundary: np.ndarray, path: Path, lonlat: bool = False
) -> Path:
    """Records coloured by subset, boundary records ringed (Figs. 13-16). >2-D points: first 2 PCs."""
    import numpy as np

    pts = np.asarray(points, dtype=float)
    if pts.shape[1] > 2:
        centred = pts - pts.mean(axis=0)
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
        pts = centred @ vt[:2].T
    elif lonlat:
        pts = pts[:, ::-1]  # (lat, lon) -> x = lon, y = lat
    fig, ax = _plt().subplots(figsize=(5.5, 5))
    ax.scatter(pts[:, 0], pts[:, 1], c=labels, cmap="tab20", s=14, linewidths=0)
    b = np.asarray(boundary, bool)
    ax.scatter(pts[b, 0], pts[b, 1], facecolors="none", edgecolors="k", s=28, linewidths=0.6, label="boundary")
    ax.set_title(f"partition: {int(labels.max()) + 1} subsets, {int(b.sum())} boundary records")
    ax.legend(loc="best", fontsize=8)
    ax.set_aspect("equal", adjustable="datalim")
    fig.tight_layout()
    return _save(fig, path)


def _plane(points: np.ndarray, lonlat: bool, basis: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """(P, 2) plot coordinates of ``points`` (P, D): x = lon, y = lat for ``lonlat``; the first 2 principal
    components for D > 2 (of ``basis``'s points when given, so two sets share one projection); and the
    (mean, (D, 2) axes) used, None for D <= 2."""
    import numpy as np

    pts = np.asarray(points, dtype=float)
    if pts.shape[1] > 2:
        ref = pts if basis is None else np.asarray(basis, dtype=float)
        mean = ref.mean(axis=0)
        axes = np.linalg.svd(ref - mean, full_matrices=False)[2][:2].T
        return (pts - mean) @ axes, axes
    if lonlat:
        return pts[:, ::-1], None
    return pts, None


STREET_NEIGHBOURS = 3  # the released-points plot joins each record to this many of its nearest graph neighbours


def nearest_edges(points: np.ndarray, edges: np.ndarray, per_record: int = STREET_NEIGHBOURS) -> np.ndarray:
    """The edges (E', 2) of ``edges`` (E, 2) that are among the ``per_record`` shortest (by distance between
    ``points`` (N, 2), ties by edge order) of one of their two records, or on a minimum spanning forest of
    the graph (same lengths): a sparse, street-like backbone of a dense mDP graph, in the input order. Every
    record keeps its nearest neighbours, and two records are joined by a path of kept edges exactly when the
    graph joins them (a picture of the backbone never shows components the graph does not have)."""
    import numpy as np
    import scipy.sparse as sp
    from scipy.sparse.csgraph import minimum_spanning_tree

    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    if e.shape[0] == 0 or per_record <= 0:
        return e[:0]
    pts = np.asarray(points, dtype=float)
    length = np.linalg.norm(pts[e[:, 0]] - pts[e[:, 1]], axis=1)
    node = np.concatenate([e[:, 0], e[:, 1]])
    idx = np.concatenate([np.arange(e.shape[0])] * 2)
    order = np.lexsort((idx, np.concatenate([length, length]), node))  # by node, then length, then edge
    node, idx = node[order], idx[order]
    starts = np.r_[0, np.flatnonzero(np.diff(node)) + 1]
    rank = np.arange(node.size) - np.repeat(starts, np.diff(np.r_[starts, node.size]))
    keep = np.zeros(e.shape[0], dtype=bool)
    keep[idx[rank < per_record]] = True
    n = int(max(e.max() + 1, pts.shape[0]))
    # edge i + 1 as the weight's tie-breaker would lose precision: lengths get a tiny positive floor instead
    weights = sp.coo_matrix((np.maximum(length, 1e-300), (e[:, 0], e[:, 1])), shape=(n, n)).tocsr()
    tree = minimum_spanning_tree(weights).tocoo()
    pairs = {(int(min(a, b)), int(max(a, b))) for a, b in zip(tree.row, tree.col, strict=True)}
    keep |= np.fromiter(((int(min(a, b)), int(max(a, b))) in pairs for a, b in e), dtype=bool, count=e.shape[0])
    return e[keep]


def plot_released_points(
    points: np.ndarray,
    counts: np.ndarray,
    path: Path,
    lonlat: bool = False,
    records: np.ndarray | None = None,
    edges: np.ndarray | None = None,
) -> Path:
    """The released outputs over the streets: one dot per output location ``points`` (K, D), area
    proportional to the number of individuals released there ``counts`` (K,) (public: counted from
    microdata.parquet), drawn over the mDP graph -- ``edges`` (E, 2) record index pairs between the
    ``records`` (N, D), each record joined to its :data:`STREET_NEIGHBOURS` nearest graph neighbours and a
    spanning forest (:func:`nearest_edges`) in light grey lines, the records as small grey dots -- in place of a street map
    (the instance holds no road geometry; for road data its records are street nodes). >2-D: first 2 PCs
    (of the records when given). lon/lat: x = lon, y = lat, the aspect corrected by cos(latitude)."""
    import numpy as np

    c = np.asarray(counts, dtype=float)
    fig, ax = _plt().subplots(figsize=(6, 5.5))
    if records is not None:
        rec, _ = _plane(records, lonlat)
        pts, _ = _plane(points, lonlat, basis=records)
        if edges is not None and np.asarray(edges).size:
            from matplotlib.collections import LineCollection

            scale = np.array([math.cos(math.radians(float(np.mean(rec[:, 1])))), 1.0]) if lonlat else 1.0
            e = nearest_edges(rec * scale, edges)  # lon shrunk by cos(lat): lengths as on the ground
            ax.add_collection(
                LineCollection(
                    list(np.stack([rec[e[:, 0]], rec[e[:, 1]]], axis=1)),
                    colors="0.75",
                    linewidths=0.5,
                    zorder=0,
                    label=f"mDP graph: each record's {STREET_NEIGHBOURS} nearest neighbours",
                )
            )
        ax.scatter(rec[:, 0], rec[:, 1], s=2, c="0.55", linewidths=0, zorder=1, label="records")
    else:
        pts, _ = _plane(points, lonlat)
    ax.scatter(
        pts[:, 0],
        pts[:, 1],
        s=4 + 200 * c / max(c.max(), 1.0),
        alpha=0.6,
        linewidths=0,
        zorder=2,
        color="tab:blue",
        label="released outputs",
    )
    ax.set_xlabel("lon" if lonlat else "x0")
    ax.set_ylabel("lat" if lonlat else "x1")
    ax.tick_params(axis="x", labelrotation=30)
    ax.set_title(f"released outputs: {int(c.sum())} individuals on {int((c > 0).sum())} of {c.size} outputs")
    if lonlat and np.asarray(points).shape[1] == 2:
        mid = float(np.mean(pts[:, 1]))
        ax.set_aspect(1.0 / max(math.cos(math.radians(mid)), 1e-3), adjustable="datalim")
    else:
        ax.set_aspect("equal", adjustable="datalim")
    ax.autoscale_view()
    if records is not None:
        ax.legend(loc="best", fontsize=7, markerscale=1.5)
    fig.tight_layout()
    return _save(fig, path)


def plot_noise(scale: float, path: Path) -> Path:
    """The distribution of the noise added to each released count: discrete Laplace of ``scale`` b,
    P(k) = (1 - q) / (1 + q) q^|k|, q = exp(-1 / b)."""
    import numpy as np

    q = float(np.exp(-1.0 / scale))
    k = np.arange(-int(np.ceil(6 * scale)), int(np.ceil(6 * scale)) + 1)
    fig, ax = _plt().subplots(figsize=(6, 3.2))
    ax.bar(k, (1 - q) / (1 + q) * q ** np.abs(k), width=0.9)
    ax.set_xlabel("noise added to a count (individuals)")
    ax.set_ylabel("probability")
    ax.set_title(f"count noise: discrete Laplace, scale {scale:g}")
    fig.tight_layout()
    return _save(fig, path)


def plot_lines(
    x: Sequence[float],
    series: dict[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    title: str,
    path: Path,
    logy: bool = False,
) -> Path:
    """Generic line plot: utility vs eps per mechanism (Fig. 7), CBDP error vs eps_counts (Fioretto Fig. 5)."""
    fig, ax = _plt().subplots(figsize=(6, 3.5))
    for name, ys in series.items():
        ax.plot(list(x), list(ys), marker="o", label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return _save(fig, path)


# ----------------------------------------------------------------------------- against planar Laplace (issue 40)
# = mdp_core.release.baseline.METHODS (not imported: it pulls in numpy): continuous, remapped, the floor
LAPLACE_ROWS = ("planar_laplace", "planar_laplace_remap", "nearest_output")


# = mdp_core.release.people's RELEASE, SNAP (issue 50): the release from where people are, the snap alone
PEOPLE_ROWS = ("release_per_person", "snap_to_record")


def plot_against_laplace(
    rows: Sequence[dict], method: str, unit: str, path: Path, every_pair: bool = False
) -> Path | None:
    """The comparison as bars (``rows``: evaluation rows, as in evaluation.parquet; ``method``: the row of the
    release to draw, ``release_per_person`` for people): expected distance of the release (with the snap to the
    record, when its row is there, as a hatched part), planar Laplace remapped, continuous, and the floor, the
    sampled ones with two standard errors; ``every_pair``: the compared rate is for any two records (a mechanism
    certified over every pair, issue 51), else within the protection radius. None (nothing drawn) without
    :data:`LAPLACE_ROWS`."""
    by: dict[str, dict] = {}
    for r in rows:
        by.setdefault(str(r.get("method")), r)  # each method's first row
    if method not in by or not all(m in by for m in LAPLACE_ROWS):
        return None
    cont, remap, floor = LAPLACE_ROWS
    values = [float(by[m]["dist_loss_mean"]) for m in (method, remap, cont, floor)]
    who = "from the person" if method == PEOPLE_ROWS[0] else method
    labels = [f"this release\n({who})", "planar Laplace\nto the outputs", "planar Laplace\n(continuous)"]
    labels.append("nearest output\n(no privacy)")
    fig, ax = _plt().subplots(figsize=(6, 3.5))
    bars = ax.bar(labels, values, color=["tab:blue", "tab:orange", "tab:orange", "0.6"])
    if PEOPLE_ROWS[1] in by:
        snap = float(by[PEOPLE_ROWS[1]]["dist_loss_mean"])
        ax.bar([labels[0]], [snap], color="none", edgecolor="k", hatch="//", label="of which the snap to the record")
        ax.legend(fontsize=7, loc="upper right")
    se = [float(by[m].get("dist_loss_se") or 0.0) for m in (method, remap)]
    ax.errorbar([0, 1], values[:2], yerr=[2.0 * x for x in se], fmt="none", ecolor="k", capsize=4)
    ax.bar_label(bars, labels=[format(v, ".3g") for v in values], padding=2, fontsize=8)
    ax.set_ylabel(f"expected distance ({unit})")
    eps = float(by[cont]["metric_epsilon"])
    scope = "for any two records" if every_pair else "within the protection radius"
    ax.set_title(f"At the same guarantee {scope}: {eps:.4g} per {unit}")
    ax.margins(y=0.15)
    fig.tight_layout()
    return _save(fig, path)


def utility_curve(sweep: list[dict], distance_unit: str, path: Path) -> tuple[pd.DataFrame, str | None]:
    """Utility vs eps (Qiu 2024 Fig. 7): the table of ``sweep`` entries (factor, epsilon, method,
    expected_loss) sorted by method and eps, and its plot at ``path`` when there is more than one eps
    (returns the figure's title, else None)."""
    import numpy as np
    import pandas as pd

    utility = pd.DataFrame(sweep).sort_values(["method", "epsilon"], kind="stable").reset_index(drop=True)
    if utility["epsilon"].nunique() <= 1:
        return utility, None
    series = {m: g.set_index("epsilon")["expected_loss"] for m, g in utility.groupby("method", sort=True)}
    eps_grid = sorted(utility["epsilon"].unique())
    plot_lines(
        eps_grid,
        {m: [s.get(e, np.nan) for e in eps_grid] for m, s in series.items()},
        f"epsilon (per {distance_unit})",
        "expected utility loss",
        "Utility vs privacy budget",
        path,
    )
    return utility, "Utility vs epsilon (Qiu 2024 Fig. 7)"


def count_error_curve(
    counts: np.ndarray, zones: np.ndarray, eps_values: Sequence[float], n_seeds: int, path: Path
) -> tuple[pd.DataFrame, str]:
    """CBDP vs Laplace vs hierarchical error per eps_counts (Fioretto Fig. 5) on ``counts`` (K,) with the
    release's features (outputs, ``zones`` (K,) when more than one, total): a simulation on public counts
    (the released microdata's), seeded; the table and its plot at ``path`` (and the figure's title)."""
    import numpy as np

    from mdp_core.release.postprocess import error_curve

    k = counts.size
    feats = [np.arange(k)] + ([zones] if np.unique(zones).size > 1 else []) + [np.zeros(k, np.int64)]
    curve = error_curve(counts, feats, eps_values, n_seeds=n_seeds, seed=0)
    piv = curve.pivot(index="eps_counts", columns="method", values="mae_singletons")
    plot_lines(
        list(piv.index),
        {m: list(piv[m]) for m in piv.columns},
        "eps_counts",
        "mean abs. error per output count",
        "Released counts: CBDP vs baselines",
        path,
        logy=True,
    )
    return curve, "Count error vs eps_counts (Fioretto Fig. 5)"
