"""Plots (matplotlib, Agg backend, PNG) and the markdown report of a release.

Every function writes one PNG atomically and returns its path. No timestamps are embedded
(``metadata={"Software": None}``), so the same data gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from mdp_core.io import atomic_write

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


def plot_bounds(trace: pd.DataFrame, path: Path) -> Path:
    """Benders upper / lower bound per iteration (Qiu 2024 Figs. 17-20), from a Benders trace table
    (columns ``iteration``, ``lower_bound``, ``upper_bound``; an infinite UB is not drawn)."""
    fig, ax = _plt().subplots(figsize=(6, 3.5))
    it = trace["iteration"].to_numpy()
    ax.plot(it, trace["lower_bound"].to_numpy(dtype=float), label="lower bound (master)")
    ub = trace["upper_bound"].to_numpy(dtype=float)
    ax.plot(it, np.where(np.isfinite(ub), ub, np.nan), label="upper bound (best feasible)")
    ax.set_xlabel("iteration")
    ax.set_ylabel("expected utility loss")
    ax.set_title("Benders decomposition: bounds")
    ax.legend()
    fig.tight_layout()
    return _save(fig, path)


def plot_partition(
    points: np.ndarray, labels: np.ndarray, boundary: np.ndarray, path: Path, lonlat: bool = False
) -> Path:
    """Records coloured by subset, boundary records ringed (Figs. 13-16). >2-D points: first 2 PCs."""
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


def markdown_table(frame: pd.DataFrame, floatfmt: str = ".6g") -> str:
    """A GitHub-style markdown table (no extra dependency)."""
    cols = list(frame.columns)

    def fmt(v) -> str:
        if isinstance(v, (float, np.floating)):
            return format(float(v), floatfmt)
        return str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(fmt(v) for v in row) + " |")
    return "\n".join(lines)
