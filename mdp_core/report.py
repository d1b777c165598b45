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


def plot_released_points(points: np.ndarray, counts: np.ndarray, path: Path, lonlat: bool = False) -> Path:
    """The released outputs: one dot per output location ``points`` (K, D), area proportional to the number
    of individuals released there ``counts`` (K,) (public: counted from microdata.parquet). >2-D: first 2 PCs."""
    pts = np.asarray(points, dtype=float)
    if pts.shape[1] > 2:
        centred = pts - pts.mean(axis=0)
        pts = centred @ np.linalg.svd(centred, full_matrices=False)[2][:2].T
    elif lonlat:
        pts = pts[:, ::-1]
    c = np.asarray(counts, dtype=float)
    fig, ax = _plt().subplots(figsize=(5.5, 5))
    ax.scatter(pts[:, 0], pts[:, 1], s=4 + 200 * c / max(c.max(), 1.0), alpha=0.6, linewidths=0)
    ax.set_xlabel("lon" if lonlat else "x0")
    ax.set_ylabel("lat" if lonlat else "x1")
    ax.tick_params(axis="x", labelrotation=30)
    ax.set_title(f"released outputs: {int(c.sum())} individuals on {int((c > 0).sum())} of {c.size} outputs")
    ax.set_aspect("equal", adjustable="datalim")
    fig.tight_layout()
    return _save(fig, path)


def plot_noise(scale: float, path: Path) -> Path:
    """The distribution of the noise added to each released count: discrete Laplace of ``scale`` b,
    P(k) = (1 - q) / (1 + q) q^|k|, q = exp(-1 / b)."""
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


CLAIMS_TAG = "mdp-release-claims"


def release_claims(inst_meta: dict, info: dict, prov: dict) -> dict:
    """Every privacy / solver figure the report states, as one JSON block that ``mdp-release audit``
    checks against the released files (``<!-- mdp-release-claims {...} -->`` at the end of report.md)."""
    cert = info["certificate"]
    return {
        "epsilon": inst_meta["epsilon"],
        "eta": inst_meta["eta"],
        "distance_unit": inst_meta["distance_unit"],
        "counts_epsilon": prov["eps_counts"],
        "prior_epsilon": prov["eps_prior"],
        "additive_epsilon": prov["guarantee"]["additive_epsilon"],
        "ledger_total_so_far": prov["ledger"]["total_so_far"],
        "n_individuals": prov["n_individuals"],
        "method": info["method"],
        "objective": info["objective"],
        "lower_bound": info.get("lower_bound"),
        "gap": info.get("gap"),
        "max_realised_epsilon": cert["max_realised_epsilon"],
        "certificate_passed": bool(cert["passed"]),
    }


def release_summary(inst_meta: dict, info: dict, prov: dict, row: dict, count_scale: float, n_zones: int) -> list[str]:
    """The report's first page, in plain language, for the officer who signs the release: what was
    released, the guarantee and the budget spent, the method actually run, the certificate and the
    expected error in the data's units. ``row``: the released mechanism's evaluation row
    (``expected_loss``, ``dist_loss_mean``, ``adversary_error``); ``count_scale``: the count noise scale."""
    from mdp_core.noise import mean_abs_error

    unit = inst_meta["distance_unit"]
    eps, eta = inst_meta["epsilon"], inst_meta["eta"]
    g, led = prov["guarantee"], prov["ledger"]
    auto = (info.get("extra") or {}).get("auto") or {}
    run = auto.get("method", info["method"])
    chosen = f" (chosen by `auto`: {auto['reason']})" if auto.get("reason") else ""
    cert = info["certificate"]
    simulated = prov["microdata_source"] == "simulated"
    who = (
        f"{prov['n_individuals']} **simulated** individuals (a demonstration: no real person is in this release)"
        if simulated
        else f"{prov['n_individuals']} individuals of the agency's microdata file"
    )
    prior = {
        "dataset": "the dataset's public prior",
        "uniform": "a uniform prior",
        "file": "a public prior file",
        "dp": f"a differentially private histogram of the microdata (eps_prior = {prov['eps_prior']:g})",
    }[prov["prior_source"]]
    limit = led["max_total_epsilon"]
    gap = info.get("gap")
    return [
        "# Release report",
        "",
        "## Summary for the signing officer",
        "",
        f"- **What is released.** `microdata.parquet`: {who}, one row each in the input order, holding only the "
        f"perturbed output (an id and its coordinates) -- nothing else about the person. `aggregates.parquet`: "
        f"counts of the *true* data per output cell ({inst_meta['n_outputs']}), "
        + (f"per zone ({n_zones}), " if n_zones > 1 else "")
        + f"and the total ({prov['n_individuals']}, exact: it is the number of microdata rows), with noise, made "
        "consistent non-negative integers.",
        f"- **Guarantee.** {g['statement']}.",
        f"- **Budget.** Mechanism eps = {eps:g} per {unit} (neighbours within eta = {eta:g} {unit}); counts "
        f"eps = {prov['eps_counts']:g}; prior: {prior}. This release spends {led['this_release']:.6g} "
        f"(eps x eta + additive); this table's total so far is {led['total_so_far']:.6g} over "
        f"{led['releases_so_far']} release(s)" + (f", limit {limit:g}." if limit is not None else ", no limit set."),
        f"- **Method run.** `{run}`{chosen}: {info['status']}, expected loss {info['objective']:.6g}, proven lower "
        f"bound {info.get('lower_bound')}, gap {gap}.",
        f"- **Certificate.** {'PASS' if cert['passed'] else 'FAIL'}: every one of {cert['n_pairs']} neighbour pairs "
        f"checked in both directions for every output; realised eps {cert['max_realised_epsilon']:.10g} per {unit}; "
        f"{cert['n_violations']} violations.",
        f"- **Expected error.** A released location lies on average {row['dist_loss_mean']:.4g} {unit} from the "
        f"person's record; the best possible (Bayes) adversary's expected error locating a person is "
        f"{row['adversary_error']:.4g} {unit}; expected utility loss {row['expected_loss']:.4g}. Each noisy count "
        f"is off by {mean_abs_error(count_scale):.3g} individuals on average before post-processing "
        f"(noise scale {count_scale:g}).",
        "- **Reproducibility.** The randomness came from OS entropy; its secret stays in the store's private part, "
        f"and the manifest holds only the commitment `{prov['draw_commitment'][:16]}...`. A re-run from the "
        "manifest on the same store reproduces these files byte for byte.",
        "",
    ]


def technical_markdown(inst, info: dict, table: pd.DataFrame, figures: list[tuple[str, str]], appendix: bool) -> str:
    """The technical evaluation: the instance, the released mechanism's solve and certificate, the
    evaluation table (one row per mechanism) and the ``figures`` ((title, png name) pairs)."""
    cert = info["certificate"]
    lines = [
        "# Appendix: technical evaluation" if appendix else "# mdp-release evaluation",
        "",
        f"N = {inst.n_records} records, K = {inst.n_outputs} outputs, |E| = {inst.n_edges} neighbour pairs, "
        f"eps = {inst.epsilon:g} per {inst.distance_unit}, eta = {inst.eta:g} {inst.distance_unit}.",
        "",
        f"Released mechanism: **{info['method']}** ({info['status']}), expected loss {info['objective']:.6g}, "
        f"lower bound {info.get('lower_bound')}, gap {info.get('gap')}, {info['iterations']} iterations, "
        f"{info['seconds']} s.",
        f"Privacy certificate: {'PASS' if cert['passed'] else 'FAIL'}, realised eps {cert['max_realised_epsilon']}, "
        f"{cert['n_violations']} violations over {cert['n_pairs']} pairs.",
        "",
        markdown_table(table),
        "",
    ]
    for title, name in figures:
        lines += [f"## {title}", "", f"![{title}]({name})", ""]
    return "\n".join(lines)


def utility_curve(sweep: list[dict], distance_unit: str, path: Path) -> tuple[pd.DataFrame, str | None]:
    """Utility vs eps (Qiu 2024 Fig. 7): the table of ``sweep`` entries (factor, epsilon, method,
    expected_loss) sorted by method and eps, and its plot at ``path`` when there is more than one eps
    (returns the figure's title, else None)."""
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
    from mdp_core.postprocess import error_curve

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
