"""Ours vs published: one comparison table with a verdict per quantity and, where it differs, why.

The published numbers live in ``published.json`` beside this module (:func:`published_numbers`); the
verdict rules are stated in the report (:data:`VERDICT_RULES`).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from flows.reproduce.experiments import cbdp_factors, utility_gain

UTILITY_TOL_PP = 10.0  # percentage points around the published D.1 gain


def _strip_comments(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip_comments(v) for k, v in obj.items() if not k.startswith("_")}
    return obj


@functools.cache
def published_numbers() -> dict[str, Any]:
    """The papers' numbers (``published.json``, without its ``_comment`` keys); Tables 1-2 entries are
    [mean, 1.96 sd], Table 3 seconds are None where the paper reports "max iter. ex."."""
    text = resources.files("flows.reproduce").joinpath("published.json").read_text(encoding="utf-8")
    data: dict[str, Any] = _strip_comments(json.loads(text))
    return data


VERDICT_RULES = (
    "Tables 1-2 agree when our mean lies within the published mean +- (published + our 1.96 sd); D.1 within "
    f'+- {UTILITY_TOL_PP:g} percentage points; Table 3 compares outcomes (converged vs "max iter. ex."), not '
    "seconds; Imola and Fioretto compare the papers' qualitative claims."
)


# --------------------------------------------------------------------------- comparison
COMPARISON_COLUMNS = [
    "experiment",
    "dataset",
    "quantity",
    "method",
    "ours",
    "published",
    "published_hw",
    "verdict",
    "why",
]


def verdict(ours: float | None, published: float | None, half_width: float | None = None, rel_tol: float = 0.5) -> str:
    """ "agrees" when ``ours`` lies in published +- max(half_width, rel_tol * |published|), "differs"
    otherwise; "n/a" when either side is missing / NaN."""
    if ours is None or published is None or not (np.isfinite(ours) and np.isfinite(published)):
        return "n/a"
    tol = max(float(half_width or 0.0), rel_tol * abs(float(published)))
    return "agrees" if abs(float(ours) - float(published)) <= tol else "differs"


# What the paper used, per dataset (our side comes from the dataset actually built: DatasetSpec.as_dict()).
PAPER_DATASETS = {
    "road": "the paper: 500 road nodes over the whole Rome box with eta = 2",
    "grid": "the paper: the same 20 x 25 grid and eta = 2 km; with 12 neighbours per cell the boundary cells of "
    "adjacent subsets join into one MP component under the paper's stated definition, so its small MP "
    "components (3.6 mean) suggest a sparser grid graph than the stated eta gives",
    "text": "the paper: MATLAB word2vec 300-d vectors with eta = 2",
    "synthetic": "the paper: 3-D Gaussian points, sigma not stated",
}


def dataset_note(ds: str, dataset: dict[str, Any] | None) -> str:
    """What we used for ``ds`` (from its DatasetSpec dict: source and target degree) vs the paper."""
    ours = ""
    if dataset:
        degree = dataset.get("mean_degree")
        ours = f"ours: {dataset.get('source', ds)}" + (f", eta for mean degree {degree:g}" if degree else "")
    return "; ".join(x for x in (ours, PAPER_DATASETS.get(ds, "")) if x)


def _partition_why(row: pd.Series, dataset: dict[str, Any] | None) -> str:
    bf = float(row["boundary_fraction"])
    reasons = []
    if bf > 0.8:
        reasons.append(
            f"{bf:.0%} of records are boundary records at this graph density, so few internal records "
            "remain and the MP graph is one large component"
        )
    elif bf < 0.05:
        reasons.append(
            f"only {bf:.0%} boundary records: the subsets follow connected components of the mDP graph, "
            "so the MP is (almost) empty"
        )
    reasons.append(dataset_note(str(row["dataset"]), dataset))
    return "; ".join(r for r in reasons if r)


def compare_partitions(summary: pd.DataFrame, datasets: dict[str, dict[str, Any]] | None = None) -> pd.DataFrame:
    """Tables 1-2: ours (mean over instances) vs published mean +- 1.96 sd, per dataset, method, statistic.

    ``datasets``: {name: DatasetSpec.as_dict()} of the data actually used (named in the reasons)."""
    rows = []
    qiu = published_numbers()["qiu2024"]
    for pub_table, table_name in ((qiu["table1"], "Qiu T1"), (qiu["table2"], "Qiu T2")):
        for stat, by_ds in pub_table.items():
            for _, r in summary.iterrows():
                pub = by_ds.get(r["dataset"], {}).get(r["method"])
                if pub is None:
                    continue
                ours = float(r[stat])
                v = verdict(ours, pub[0], pub[1] + float(r.get(f"{stat}_hw", 0.0)), rel_tol=0.0)
                rows.append(
                    {
                        "experiment": table_name,
                        "dataset": r["dataset"],
                        "quantity": stat,
                        "method": r["method"],
                        "ours": ours,
                        "published": pub[0],
                        "published_hw": pub[1],
                        "verdict": v,
                        "why": "" if v == "agrees" else _partition_why(r, (datasets or {}).get(r["dataset"])),
                    }
                )
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def balance_claim(summary: pd.DataFrame) -> pd.DataFrame:
    """The paper's claim: k-m-DV gives the smallest largest subproblem + MP component. Per dataset:
    ours = kmdv's internal_max + mp_component_max rank among the partitioners (1 = best)."""
    rows = []
    for ds, g in summary.groupby("dataset", sort=False):
        size = (g["internal_max"] + g["mp_component_max"]).to_numpy()
        methods = g["method"].tolist()
        if "kmdv" not in methods:
            continue
        rank = int(1 + np.sum(size < size[methods.index("kmdv")] - 1e-9))
        best = methods[int(np.argmin(size))]
        rows.append(
            {
                "experiment": "Qiu T1-2 claim",
                "dataset": ds,
                "quantity": "rank of kmdv by max subproblem + max MP component",
                "method": "kmdv",
                "ours": float(rank),
                "published": 1.0,
                "published_hw": 0.0,
                "verdict": "agrees" if rank == 1 else "differs",
                "why": ""
                if rank == 1
                else f"{best} balances better here (max sizes: "
                + ", ".join(f"{m} {float(v):.1f}" for m, v in zip(methods, size, strict=True))
                + ")",
            }
        )
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def compare_utility(gain: pd.DataFrame) -> pd.DataFrame:
    """Appendix D.1: our mean percent below ExpMech vs published, within ``UTILITY_TOL_PP`` points."""
    rows = []
    for _, r in gain.iterrows():
        pub = published_numbers()["qiu2024"]["d1_utility_gain_pct"].get(r["dataset"])
        ours = float(r["gain_mean"])
        v = verdict(ours, pub, UTILITY_TOL_PP, rel_tol=0.0)
        why = ""
        if v == "differs":
            why = (
                "likely causes: we compare with the exact LP optimum (the value BD converges to; the paper "
                "stops BD at an absolute gap of 0.01, so its BD loss sits higher) on smaller instances with other "
                "data (see the differences above); "
            )
            if ours > (pub or 0):
                why += (
                    "ExpMech z ~ exp(-eps d / 2) ignores the destination-based costs, and at eps * eta near 20 "
                    "the optimum is close to reporting the true record, so the relative gain grows with eps"
                )
            else:
                why += "here the costs follow ExpMech's distance ordering closely, so less is gained"
            why += f" (gain ranges {r['gain_min']:.1f}..{r['gain_max']:.1f} % over eps)"
        rows.append(
            {
                "experiment": "Qiu D.1",
                "dataset": r["dataset"],
                "quantity": "% expected loss below ExpMech (mean over eps 2..10)",
                "method": "optimal vs exp",
                "ours": ours,
                "published": pub,
                "published_hw": UTILITY_TOL_PP,
                "verdict": v,
                "why": why,
            }
        )
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def compare_timing(timing: pd.DataFrame) -> pd.DataFrame:
    """Table 3: per dataset and method our seconds / status vs the paper's. Absolute seconds are not
    comparable (N, K, hardware, solver differ); the verdict compares *outcomes*: converged vs
    "max iter. ex.", and whether k-m-DV is the fastest converging partitioner."""
    rows = []
    for ds, g in timing.groupby("dataset", sort=False):
        pub = published_numbers()["qiu2024"]["table3_seconds"].get(ds, {})
        paper_n = published_numbers()["qiu2024"]["setting"]["solve_n_records"]
        bd = g[(g["status"] == "optimal") & g["method"].str.startswith("benders")]
        fastest = bd.loc[bd["seconds"].idxmin(), "method"] if len(bd) else None
        for _, r in g.iterrows():
            key = r["partitioner"] if isinstance(r["partitioner"], str) else r["method"]
            p = pub.get(key, "absent")
            if p == "absent":
                continue
            ours_conv = r["status"] == "optimal"
            pub_conv = p is not None
            v = "agrees" if ours_conv == pub_conv else "differs"
            why = ""
            if v == "differs":
                if r["method"].startswith("lp") and ours_conv:
                    why = (
                        f"HiGHS solves the full LP at our size (N = {int(r['n_records'])}, K = {int(r['n_outputs'])}) "
                        f"in {r['seconds']:.1f} s; the paper's MATLAB linprog stopped at 10,000 iterations on "
                        f"N = {paper_n}"
                    )
                elif r["status"] == "failed":
                    why = f"our run failed: {r.get('error')}"
                elif r["method"].startswith("benders") and not ours_conv:
                    why = (
                        f"our Benders stopped with status {r['status']} (relative gap "
                        f"{r['relative_gap'] if pd.notna(r['relative_gap']) else float('nan'):.3g}); "
                        f"boundary fraction {r['boundary_fraction'] if pd.notna(r['boundary_fraction']) else float('nan'):.2f}: "
                        "a dense master and Lagrangian cuts converge slowly (bench/README.md)"
                    )
                else:
                    why = "our run converged where the paper's hit the iteration limit (smaller N, different cut strategy)"
            rows.append(
                {
                    "experiment": "Qiu T3",
                    "dataset": ds,
                    "quantity": "seconds (converged?)",
                    "method": r["method"],
                    "ours": float(r["seconds"]) if ours_conv else float("nan"),
                    "published": p,
                    "published_hw": None,
                    "verdict": v,
                    "why": why,
                }
            )
        pub_fast = min(
            (k for k, s in pub.items() if s is not None and not k.startswith("lp")), key=lambda k: pub[k], default=None
        )
        ours_fast = fastest.removeprefix("benders-") if isinstance(fastest, str) else None
        rows.append(
            {
                "experiment": "Qiu T3 claim",
                "dataset": ds,
                "quantity": "fastest converging partitioner",
                "method": ours_fast or "none converged",
                "ours": None,
                "published": None,
                "published_hw": None,
                "verdict": "agrees" if ours_fast == pub_fast else "differs",
                "why": ""
                if ours_fast == pub_fast
                else f"paper: {pub_fast}; ours: {ours_fast or 'no Benders run converged'}",
            }
        )
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def compare_scalability(df: pd.DataFrame) -> pd.DataFrame:
    """Imola Table 2 claims: ConstOPTMech is faster and sparser than OPTMech at every size where both ran,
    and OPTMech stops being solvable at a size where ConstOPTMech still runs."""
    rows = []
    lp = df[df["method"] == "optmech"].set_index("n_records")
    for m in sorted(set(df["method"]) - {"optmech"}):
        c = df[df["method"] == m].set_index("n_records")
        both = c.index.intersection(lp.index[lp["status"] == "optimal"])
        faster = bool(len(both)) and bool(np.all(c.loc[both, "seconds"] < lp.loc[both, "seconds"]))
        sparser = bool(np.all(c["lp_nonzeros"] < lp.reindex(c.index)["lp_nonzeros"]))
        ratio = float(np.median(c.loc[both, "seconds"] / lp.loc[both, "seconds"])) if len(both) else float("nan")
        rows.append(
            {
                "experiment": "Imola T2",
                "dataset": "text",
                "quantity": "median seconds ratio vs OPTMech",
                "method": m,
                "ours": ratio,
                "published": None,
                "published_hw": None,
                "verdict": "agrees" if faster and sparser else "differs",
                "why": ""
                if faster and sparser
                else (
                    "ConstOPTMech solves 3 LPs (one per lambda) and our full LP is sparse (neighbour pairs only, "
                    "Imola constrain all pairs), so it is not always slower"
                    if not faster
                    else "more non-zeros than the full LP"
                ),
            }
        )
    small = int(df["n_records"].min())
    if "constopt-r10" in set(df["method"]) and small in lp.index and lp.loc[small, "status"] == "optimal":
        c10 = df[(df["method"] == "constopt-r10") & (df["n_records"] == small)]["expected_loss"].iloc[0]
        ratio = float(c10 / lp.loc[small, "expected_loss"]) if lp.loc[small, "expected_loss"] > 0 else float("inf")
        rows.append(
            {
                "experiment": "Imola T2",
                "dataset": "text",
                "quantity": f"ConstOPTMech (r=10) loss / OPTMech loss at N={small}",
                "method": "constopt-r10",
                "ours": ratio,
                "published": 1.0,
                "published_hw": 0.5,
                "verdict": verdict(ratio, 1.0, 0.5, rel_tol=0.0),
                "why": ""
                if verdict(ratio, 1.0, 0.5, rel_tol=0.0) == "agrees"
                else (
                    "ConstOPTMech solves its LP at eps/2 with most entries fixed to an exponential mechanism; at "
                    "eps * eta = 20 the optimum nearly reports the true word (loss close to 0), so the ratio is "
                    "large; Imola compare at eps = 2 on all-pairs mDP, where the optimum is far from 0"
                ),
            }
        )
    ok = lp[lp["status"] == "optimal"]
    largest = int(ok.index.max()) if len(ok) else 0
    rows.append(
        {
            "experiment": "Imola T2",
            "dataset": "text",
            "quantity": "largest N the full LP solved in the time limit",
            "method": "optmech",
            "ours": float(largest),
            "published": float(published_numbers()["imola2022"]["optmech_timeout_at"] - 50),
            "published_hw": None,
            "verdict": "agrees" if largest < df["n_records"].max() else "differs",
            "why": ""
            if largest < df["n_records"].max()
            else "our full LP only constrains neighbour pairs within eta (mDP graph), Imola's OPTMech all N^2 pairs, "
            "so ours stays solvable at every size run here",
        }
    )
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def compare_cbdp(factors: pd.DataFrame) -> pd.DataFrame:
    """Fioretto: for every eps_counts < 1 both baseline/CBDP error factors should be >= 10."""
    pub = published_numbers()["fioretto2018"]
    rows = []
    small = factors[factors["eps_counts"] < pub["eps_below"]]
    for base in ("laplace", "hierarchical"):
        f = small[f"{base}_factor"]
        worst = float(f.min()) if len(f) else float("nan")
        ok = bool(len(f)) and worst >= pub["cbdp_factor"]
        rows.append(
            {
                "experiment": "Fioretto Fig. 5",
                "dataset": "counts",
                "quantity": f"min over eps<1 of {base} error / CBDP error",
                "method": "cbdp",
                "ours": worst,
                "published": pub["cbdp_factor"],
                "published_hw": None,
                "verdict": "agrees" if ok else "differs",
                "why": ""
                if ok
                else (
                    "our universe is small (K outputs, 3 features) and fairly dense; CBDP's gain comes from "
                    "non-negativity on sparse counts and from combining many features (Fioretto: thousands of "
                    "trip types, 5 features)"
                ),
            }
        )
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def compare_all(
    partition_summary: pd.DataFrame | None = None,
    utility: pd.DataFrame | None = None,
    timing: pd.DataFrame | None = None,
    scalability: pd.DataFrame | None = None,
    cbdp: pd.DataFrame | None = None,
    datasets: dict[str, dict[str, Any]] | None = None,
) -> pd.DataFrame:
    """Every comparison as one table (:data:`COMPARISON_COLUMNS`); missing experiments are skipped.

    ``datasets``: {name: DatasetSpec.as_dict()} of the data actually used (named in the reasons)."""
    parts: list[pd.DataFrame] = []
    if partition_summary is not None and len(partition_summary):
        parts += [compare_partitions(partition_summary, datasets), balance_claim(partition_summary)]
    if utility is not None and len(utility):
        parts.append(compare_utility(utility_gain(utility)))
    if timing is not None and len(timing):
        parts.append(compare_timing(timing))
    if scalability is not None and len(scalability):
        parts.append(compare_scalability(scalability))
    if cbdp is not None and len(cbdp):
        parts.append(compare_cbdp(cbdp_factors(cbdp)))
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    for c in ("ours", "published", "published_hw"):
        out[c] = pd.to_numeric(out[c], errors="coerce").astype("float64")
    return out
