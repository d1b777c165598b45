"""The markdown report of a release (its figures: :mod:`mdp_core.release.report_plots`, re-exported here; the
officer's page's approval bullet: :mod:`mdp_core.release.report_approval`).

report.md of a release is a pure function of its claims (:func:`release_claims`: every figure it states,
each checked by ``mdp-release audit`` against the released files), the evaluation table's markdown and the
released figure names (:func:`render_report`): the audit regenerates the whole text and compares it, so
an edited sentence -- on the officer's page or in the technical appendix -- is a finding. This part
imports no numpy / pandas (the door's audit of a cached re-run runs without them).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdp_core.release.report_approval import approval_claim, approval_sentence
from mdp_core.release.report_plots import (  # re-exported: the report's figures
    BOUND_PLOTS,
    LAPLACE_ROWS,
    PEOPLE_ROWS,
    STREET_NEIGHBOURS,
    bounds_title,
    count_error_curve,
    nearest_edges,
    plot_against_laplace,
    plot_bounds,
    plot_lines,
    plot_noise,
    plot_partition,
    plot_released_points,
    utility_curve,
)

if TYPE_CHECKING:
    import pandas as pd


def markdown_table(frame: pd.DataFrame, floatfmt: str = ".6g") -> str:
    """A GitHub-style markdown table (no extra dependency)."""
    import numpy as np

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
REPORT_VERSION = 3  # claims carrying everything the report states; the report is a function of them
# The figures a report shows, in order: (png name, title). The officer's page shows the first two.
PAGE_FIGURES = (
    ("released.png", "Released outputs"),
    ("count_noise.png", "Noise added to each released count"),
    ("against_laplace.png", "Against planar Laplace at the same guarantee"),  # issue 40
)
APPENDIX_FIGURES = (
    ("utility_vs_eps.png", "Utility vs epsilon (Qiu 2024 Fig. 7)"),
    ("cbdp_error.png", "Count error vs eps_counts (Fioretto Fig. 5)"),
    ("bounds.png", "Bounds per iteration ({method_run})"),
    ("partition.png", "Partition of the mDP graph"),
)


def _count_levels(c: dict) -> tuple[int, str, str, str]:
    """(k, the count queries, what the outputs add up to, the coarser counts) of the release's counts."""
    if (c.get("n_zones") or 0) > 1:
        return 3, "each output, each zone, the total", "the zone counts and the total", "zone and total"
    return 2, "each output and the total", "the total", "total"


def figure_caption(name: str, c: dict) -> str | None:
    """The one sentence printed under figure ``name`` (a png of :data:`PAGE_FIGURES` /
    :data:`APPENDIX_FIGURES`), a pure function of the claims ``c`` (the audit regenerates it with the
    report); None for a figure without one. A report without claims (:func:`technical_markdown`) passes
    the instance's epsilon, eta, distance_unit, method and method_run."""
    unit = c.get("distance_unit", "unit")
    if name == "released.png":
        return (
            "Each blue dot is a released output location, its area proportional to the number of individuals "
            f"released there; the grey dots are the records and the grey lines join each record to its "
            f"{STREET_NEIGHBOURS} nearest neighbours in the mDP graph (records within eta = {_g(c['eta'], 'g')} "
            f"{unit}, which the mechanism keeps hard to tell apart), with a spanning tree of the graph so that "
            "records look connected exactly when the graph connects them; drawn in place of a street map, which "
            "the release does not hold."
        )
    if name == "count_noise.png":
        return (
            "The probability of each amount of noise added to a published count before post-processing: "
            f"discrete Laplace of scale {_g(c['count_noise_scale'], 'g')}, set by eps_counts = "
            f"{_g(c['counts_epsilon'], 'g')}; a count is off by {mean_abs_error(c['count_noise_scale']):.3g} "
            "individuals on average before the counts are made consistent."
        )
    if name == "utility_vs_eps.png":
        return (
            f"Expected utility loss (lower is better) of the released method `{c['method']}` and of each "
            f"baseline, each re-solved at multiples of eps = {_g(c['epsilon'], 'g')} per {unit}: a larger eps "
            "(a weaker guarantee) lets released locations stay closer to the true records, so the optimal "
            "mechanism's loss can only fall as eps grows."
        )
    if name == "cbdp_error.png":
        k, queries, sums, coarse = _count_levels(c)
        return (
            "Mean absolute error of one output's count (log scale) in a seeded simulation on the released counts. "
            f"CBDP, the method of the published counts, spends eps_counts / {k} on each of its {k} count queries "
            f"({queries}), so each output count carries about {k} times the noise of the Laplace baseline, "
            "which spends all of eps_counts on the output counts alone: on a single output CBDP is expected to "
            f"be up to about {k} times worse. It is used because its counts are consistent non-negative integers "
            f"(the outputs add up exactly to {sums}) and its {coarse} counts are far more accurate than sums of "
            "the baseline's output counts (mae_features in cbdp_error.parquet)."
        )
    if name == "bounds.png":
        return (
            f"The proven lower bound and the expected loss of the best feasible mechanism found (upper bound) "
            f"after each iteration of `{c['method_run']}`: the optimum lies between them, and the solve stopped "
            "when they met within the requested gap or at a limit."
        )
    if name == "partition.png":
        return (
            "The records coloured by the subset of the mDP graph Benders decomposition assigned them to; ringed "
            "records are boundary records, with neighbours in another subset, which tie the subproblems together."
        )
    if name == "against_laplace.png":
        return against_laplace_caption(c)
    return None


def _figure(title: str, name: str, c: dict, heading: bool = False) -> list[str]:
    """A figure's markdown lines: (a heading,) the image and its caption (:func:`figure_caption`)."""
    caption = figure_caption(name, c)
    lines = [f"## {title}", ""] if heading else []
    return lines + [f"![{title}]({name})", ""] + ([caption, ""] if caption else [])


def _markdown_rows(md: str) -> list[dict[str, str]]:
    """The rows of a :func:`markdown_table` ({column: cell text}); other lines are ignored."""
    lines = [ln for ln in md.split("\n") if ln.startswith("| ") and ln.endswith(" |")]
    if not lines:
        return []
    head = lines[0][2:-2].split(" | ")
    cells = (ln[2:-2].split(" | ") for ln in lines[1:])
    return [dict(zip(head, row, strict=True)) for row in cells if len(row) == len(head)]


def _cell(text: str | None) -> float | None:
    """A finite number of a markdown cell, else None."""
    try:
        x = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def against_laplace(c: dict, evaluation_md: str) -> dict[str, float] | None:
    """The comparison's figures, from the evaluation table's markdown (rows :data:`LAPLACE_ROWS`, written by
    mdp_core.release.people for people, by mdp_core.release.baseline before issue 50): the stated guarantee per
    unit, planar Laplace's (continuous; remapped to the outputs, its standard error and samples) and the floor;
    the release's expected error -- for people (rows :data:`PEOPLE_ROWS`: ``release`` from where the person
    is, ``release_se``, ``snap`` the move to the record alone, ``from_records`` the claim ``dist_loss_mean``,
    ``people`` 1.0) or, in a release made before, from the records (``release`` = the claim). None when the
    table has no such rows (no coordinates; a release made before issue 40)."""
    rows = {r.get("method"): r for r in _markdown_rows(evaluation_md)}
    if c.get("dist_loss_mean") is None or not all(m in rows for m in LAPLACE_ROWS):
        return None
    cont, remap, floor = (rows[m] for m in LAPLACE_ROWS)
    out = {
        "release": _cell(str(c["dist_loss_mean"])),
        "metric_epsilon": _cell(cont.get("metric_epsilon")),
        "continuous": _cell(cont.get("dist_loss_mean")),
        "remap": _cell(remap.get("dist_loss_mean")),
        "remap_se": _cell(remap.get("dist_loss_se")),
        "samples": _cell(remap.get("mc_samples")),
        "floor": _cell(floor.get("dist_loss_mean")),
    }
    if all(m in rows for m in PEOPLE_ROWS):
        mine, snap = (rows[m] for m in PEOPLE_ROWS)
        out |= {
            "from_records": out["release"],
            "release": _cell(mine.get("dist_loss_mean")),
            "release_se": _cell(mine.get("dist_loss_se")),
            "snap": _cell(snap.get("dist_loss_mean")),
            "people": 1.0,
        }
    if any(v is None for v in out.values()) or not (out["metric_epsilon"] or 0) > 0:
        return None
    return {k: float(v) for k, v in out.items() if v is not None}


def people_error_line(evaluation_md: str, method: str, unit: str, measured: dict[str, Any] | None = None) -> str | None:
    """One line for ``mdp-release run`` (issue 50): the release's expected error per person beside planar
    Laplace's at the person, from the evaluation table's markdown (``method``: the released one; ``measured``: the
    provenance's ``people_error``, the table's own people's DP-estimated figure, shown first); None for a table
    without the people's rows, unless ``measured`` (charged: then stated alone)."""
    rows = {r.get("method"): r for r in _markdown_rows(evaluation_md)}
    mine = _cell(rows.get(method, {}).get("dist_loss_mean"))
    a = against_laplace({"dist_loss_mean": mine}, evaluation_md) if mine is not None else None
    if measured and not (a and a.get("people")):  # charged and measured: stated even without the people's rows
        return (
            f"expected error for this table's people, DP-estimated at eps_error {measured['epsilon']:g}: "
            f"{_g(measured['estimate'], '.4g')} {unit} +- {_g(measured['noise_scale'], '.2g')} (the evaluation has no "
            "people's rows to compare with planar Laplace)"
        )
    if not a or not a.get("people"):
        return None
    if measured:  # this table's own people (issue 50): the DP estimate first, the prior's figure beside it
        return (
            f"expected error for this table's people, DP-estimated at eps_error {measured['epsilon']:g}: "
            f"{_g(measured['estimate'], '.4g')} {unit} +- {_g(measured['noise_scale'], '.2g')}; planar Laplace at "
            f"{_g(a['metric_epsilon'], '.4g')} per {unit}: {_g(a['continuous'], '.4g')} continuous (exact); for "
            f"people spread as the prior {_g(a['release'], '.4g')} (snap alone {_g(a['snap'], '.4g')}), planar Laplace "
            f"remapped {_g(a['remap'], '.4g')}"
        )
    return (
        f"expected error per person (people spread as the prior, snapping included): {_g(a['release'], '.4g')} {unit} "
        f"(the snap to the record alone {_g(a['snap'], '.4g')}, from the records {_g(a['from_records'], '.4g')}); "
        f"planar Laplace at the person at {_g(a['metric_epsilon'], '.4g')} per {unit}: {_g(a['remap'], '.4g')} "
        f"remapped, {_g(a['continuous'], '.4g')} continuous; the release is {laplace_verdict(a)}"
    )


def _percent(x: float) -> str:
    return f"{100 * x:.3g} %"


def laplace_verdict(a: dict[str, float]) -> str:
    """Which is better, by how much: the release's expected distance against planar Laplace's on the same
    outputs (within two standard errors of its Monte Carlo: the same), then against continuous planar Laplace."""
    rel, remap, cont = a["release"], a["remap"], a["continuous"]
    same = "planar Laplace sent to the same outputs"
    if abs(rel - remap) <= 2 * math.hypot(a["remap_se"], a.get("release_se", 0.0)):
        text = f"the same as {same}, within two standard errors of its Monte Carlo"
    elif rel < remap:
        text = f"{_percent(1 - rel / remap)} below {same} (the release is better)"
    else:
        text = f"{_percent(rel / remap - 1)} above {same} (planar Laplace is better)"
    if rel <= cont:
        return f"{text}, and {_percent(1 - rel / cont)} below continuous planar Laplace"
    return f"{text}, and {_percent(rel / cont - 1)} above continuous planar Laplace, which may release any point"


def laplace_sentence(c: dict) -> str | None:
    """The officer's page's comparison (issues 40, 50): the release's expected error per person next to planar
    Laplace's at the same stated guarantee, in the data's metric; None without the comparison's figures
    (``c["against_laplace"]``: :func:`against_laplace`)."""
    a, unit = c.get("against_laplace"), c["distance_unit"]
    if not a:
        return None
    eps = _g(a["metric_epsilon"], ".4g")
    dim = round(a["continuous"] * a["metric_epsilon"])
    form = "" if dim == 2 else f", in its {dim}-dimensional form for {dim}-dimensional records"
    if a.get("people"):
        return (
            f"- **Against planar Laplace.** At the same rate, {eps} per {unit} {_scope(c)}, planar "
            f"Laplace (Andres et al. 2013{form}) applied where the person is moves them {_g(a['continuous'], '.4g')} "
            f"{unit} on average (exactly {dim} / {eps}); sent to the nearest of the same {c['n_outputs']} outputs, "
            f"{_g(a['remap'], '.4g')} {unit} (standard error {_g(a['remap_se'], '.2g')}). This release: "
            f"{_g(a['release'], '.4g')} {unit}, {laplace_verdict(a)}. No mechanism releasing these outputs does better "
            f"than {_g(a['floor'], '.4g')} {unit} (each person's nearest output, no privacy)."
        )
    return (
        f"- **Against planar Laplace.** At the same guarantee, {eps} per {unit} "
        + ("for any two records" if every_pair(c) else f"for two records within the protection radius{_beyond(c, a)}")
        + ", the "
        f"mechanism an analyst would write instead, planar Laplace (Andres et al. 2013{form}), moves a person "
        f"{_g(a['continuous'], '.4g')} {unit} on average (exactly {dim} / {eps}); sent to the nearest of the same "
        f"{c['n_outputs']} outputs, {_g(a['remap'], '.4g')} {unit} (Monte Carlo, {a['samples']:.0f} samples per "
        f"record, fixed public seed, standard error {_g(a['remap_se'], '.2g')} {unit}). This release: "
        f"{_g(a['release'], '.4g')} {unit}, {laplace_verdict(a)}. No mechanism releasing these outputs does better "
        f"than {_g(a['floor'], '.4g')} {unit} (each record's nearest output, no privacy). Each figure is a "
        "person's expected distance from their record to what is released, averaged over the instance's public "
        "prior (the people's own histogram is secret and is not used)."
    )


def every_pair(c: dict) -> bool:
    """Whether the release's mechanism is certified over every two records of a component in the metric itself
    (claim ``every_pair``, the certificate's ``pairs`` "all": ``[solve] all_pairs``, issue 51): its plain words then
    say "for any two records", as provenance and ``check`` do. A report whose claims predate the key (absent)
    keeps the words it was rendered with."""
    return bool(c.get("every_pair"))


def _scope(c: dict) -> str:
    """The pairs the stated rate is for, in plain words: any two records (:func:`every_pair`), else two records
    within the protection radius (what the release was asked for and is charged at)."""
    return "for any two records" if every_pair(c) else "within the protection radius"


def _beyond(c: dict, a: dict[str, float]) -> str:
    """The comparison's scope (``a["metric_epsilon"]``: the rate within the protection radius, what the release
    was asked for and is charged at): what each mechanism promises farther apart, when the two differ."""
    g = c.get("guarantee") or {}
    radius, anywhere = _finite(g.get("protection_radius")), _finite(g.get("metric_epsilon_per_unit"))
    unit = c.get("distance_unit", "unit")
    within = f" ({_g(radius)} {unit}: what the release was asked for and is charged at)" if radius is not None else ""
    if anywhere is None or anywhere <= a["metric_epsilon"] * (1 + 1e-12):
        return within
    return (
        f"{within}; farther apart planar Laplace keeps {_g(a['metric_epsilon'], '.4g')} per {unit} and this release "
        f"states {_g(anywhere, '.4g')} per {unit} (eps x the mDP graph's stretch)"
    )


def against_laplace_caption(c: dict) -> str:
    """The bar figure's caption: which is better and by how much (``c["against_laplace"]``), else what it shows."""
    a, unit = c.get("against_laplace"), c.get("distance_unit", "unit")
    if not a:
        return (
            f"Expected distance in {unit} from a person's record to what is released (lower is better): this "
            "release, planar Laplace at the same stated guarantee (sent to the same outputs, and continuous) and "
            "each record's nearest output (no privacy, the floor)."
        )
    if a.get("people"):
        return (
            f"Expected distance in {unit} from where a person is to what is released (lower is better), for people "
            f"spread as the public prior, at the same guarantee of {_g(a['metric_epsilon'], '.4g')} per {unit}: this "
            f"release {_g(a['release'], '.4g')} (of which the move to the nearest record alone averages "
            f"{_g(a['snap'], '.4g')}), planar Laplace at the person sent to the same outputs {_g(a['remap'], '.4g')}, "
            f"continuous {_g(a['continuous'], '.4g')}, the person's nearest output {_g(a['floor'], '.4g')} (no "
            f"privacy); the lines: two standard errors of the sampling each way. The release is {laplace_verdict(a)}."
        )
    return (
        f"Expected distance in {unit} from a person's record to what is released (lower is better), averaged over "
        f"the instance's public prior, at the same guarantee of {_g(a['metric_epsilon'], '.4g')} per {unit} "
        + ("for any two records" if every_pair(c) else f"within the protection radius{_beyond(c, a)}")
        + ": "
        f"this release {_g(a['release'], '.4g')}, planar Laplace sent to the same outputs {_g(a['remap'], '.4g')} "
        f"(the line: two Monte Carlo standard errors each way), continuous planar Laplace "
        f"{_g(a['continuous'], '.4g')}, each record's nearest output {_g(a['floor'], '.4g')} (no privacy). The "
        f"release's expected distance is {laplace_verdict(a)}."
    )


def loss_of(provenance: dict) -> str | None:
    """The loss c_ik an instance's mechanism minimises, as its loader states it (the instance provenance's
    ``cost``, which names the loss: "loss distance: ..." or "loss travel: ..." for grid and road; issue 40), or
    None when the loader states none (synthetic and text: the data's metric; points: the metric or a file)."""
    cost = provenance.get("cost") if isinstance(provenance, dict) else None
    return cost if isinstance(cost, str) and cost else None


def loss_sentence(c: dict) -> str | None:
    """The officer's page's bullet naming the loss the mechanism minimises (claim ``loss``), or None."""
    loss = c.get("loss")
    if not loss:
        return None
    return (
        f"- **Loss optimised.** {loss}. Every *expected loss* in this report is the expectation of this loss; the "
        f"expected error is the distance in {c['distance_unit']} whatever the loss."
    )


def release_claims(
    inst_meta: dict,
    info: dict,
    prov: dict,
    row: dict,
    count_scale: float,
    n_zones: int,
    approval: dict | None = None,
) -> dict[str, Any]:
    """Every figure the report states, as one JSON object: ``mdp-release audit`` checks each against
    the released files (``<!-- mdp-release-claims {...} -->`` at the end of report.md) and regenerates
    the whole report from it (:func:`render_report`), so an edited sentence is a finding.

    ``inst_meta``: the instance's epsilon, eta, distance_unit, n_records, n_outputs, n_edges, loss
    (:func:`loss_of`); ``info``:
    solve.json; ``prov``: release_provenance.json (v2 or v3); ``row``: the released mechanism's
    evaluation row; ``count_scale``: the output level's noise scale; ``n_zones``: zone rows of the counts;
    ``approval``: the officer's approval record (:func:`mdp_core.release.report_approval.approval_claim` of the
    manifest's, issue 52; None: no claim)."""
    cert = info["certificate"]
    auto = (info.get("extra") or {}).get("auto") or {}
    return ({} if approval is None else {"approval": approval_claim(approval)}) | {
        "report_version": REPORT_VERSION,
        "epsilon": inst_meta["epsilon"],
        "eta": inst_meta["eta"],
        "distance_unit": inst_meta["distance_unit"],
        "n_records": inst_meta["n_records"],
        "n_outputs": inst_meta["n_outputs"],
        "n_edges": inst_meta["n_edges"],
        "loss": inst_meta.get("loss"),
        "n_zones": int(n_zones),
        "n_individuals": prov["n_individuals"],
        "microdata_source": prov["microdata_source"],
        "population": prov.get("population"),
        "counts_epsilon": prov["eps_counts"],
        "count_noise_scale": float(count_scale),
        "prior_epsilon": prov["eps_prior"],
        "prior_source": prov["prior_source"],
        "people_error": prov.get("people_error"),
        "additive_epsilon": prov["guarantee"]["additive_epsilon"],
        "guarantee": prov["guarantee"],
        "ledger": prov["ledger"],
        "protection": prov.get("protection"),
        "draw_commitment": prov["draw_commitment"],
        "method": info["method"],
        "method_run": auto.get("method", info["method"]),
        "auto_reason": auto.get("reason"),
        "status": info["status"],
        "objective": info["objective"],
        "lower_bound": info.get("lower_bound"),
        "gap": info.get("gap"),
        "iterations": info.get("iterations"),
        "seconds": info.get("seconds"),
        "certificate_passed": bool(cert["passed"]),
        "certificate_pairs": cert["n_pairs"],
        "certificate_violations": cert["n_violations"],
        "certificate_ratio_tol": cert["ratio_tol"],
        "max_realised_epsilon": cert["max_realised_epsilon"],
        "every_pair": cert.get("pairs") == "all",
        "dist_loss_mean": _finite(row.get("dist_loss_mean")),
        "adversary_error": _finite(row.get("adversary_error")),
        "expected_loss": float(row["expected_loss"]),
    }


def _finite(value: object) -> float | None:
    """A float cell as JSON can hold it: NaN / None -> None."""
    if value is None:
        return None
    x = float(value)  # type: ignore[arg-type]
    return None if math.isnan(x) else x


def _g(value: object, fmt: str = ".6g") -> str:
    """A number in the prose (``fmt``), "none" for a missing one."""
    if value is None:
        return "none"
    if isinstance(value, str):
        return value
    return format(float(value), fmt)  # type: ignore[arg-type]


def mean_abs_error(scale: float) -> float:
    """E|X| of discrete Laplace noise of ``scale`` b: 2q / (1 - q^2), q = exp(-1/b) (= mdp_core.release.noise's,
    without numpy: the audit regenerates the report without numerical imports)."""
    if not scale > 0:
        return 0.0
    q = math.exp(-1.0 / scale)
    return 2.0 * q / (1.0 - q * q)


def interval_half_width(scale: float, level: float = 0.95) -> int:
    """The half-width t of a count's interval at ``level``: the smallest t >= 0 with P(|X| > t) <= 1 - level for
    discrete Laplace X of ``scale``, P(|X| > t) = 2 exp(-(t + 1) / s) / (1 + exp(-1 / s)) (what
    mdp_core.release.intervals computes, without numpy, up to its floating-point margin)."""
    if not scale > 0:
        return 0
    return max(0, math.ceil(scale * (math.log(2.0) - math.log1p(math.exp(-1.0 / scale)) - math.log(1 - level))) - 1)


def rounded_to_tolerance(value: float, rel_tol: float) -> str:
    """``value`` with the significant digits a relative tolerance ``rel_tol`` resolves (1e-9: 9 digits)."""
    digits = max(1, math.ceil(-math.log10(rel_tol))) if rel_tol > 0 else 17
    return format(float(value), f".{digits}g")


def _spend_sentence(c: dict) -> str:
    """The budget bullet: what this release is charged to whose budget, and what is left."""
    led, g, unit = c["ledger"], c["guarantee"], c["distance_unit"]
    prior = f" + eps_prior {c['prior_epsilon']:g} for the DP prior" if c["prior_source"] == "dp" else ""
    if c.get("people_error"):
        prior += f" + eps_error {c['people_error']['epsilon']:g} for the people's mean error"
    if c.get("population") is None:  # a provenance v2 release (before populations)
        limit = led.get("max_total_epsilon")
        return (
            f"- **Budget.** Mechanism eps = {c['epsilon']:g} per {unit} (neighbours within eta = {c['eta']:g} "
            f"{unit}); counts eps = {c['counts_epsilon']:g}{prior}. This release spends {_g(led['this_release'])} "
            f"(eps x eta + additive); this table's total so far is {_g(led['total_so_far'])} over "
            f"{led['releases_so_far']} release(s)" + (f", limit {limit:g}." if limit is not None else ", no limit set.")
        )
    within = g.get("stretch_within_radius", g["stretch"])  # the stretch the charge pays (issue 40)
    mech = c["epsilon"] * within * g["protection_radius"]
    cap = led.get("max_total_epsilon")
    budget = (
        f"total so far {_g(led['total_so_far'])} of the cap {cap:g}, {_g(led['left'])} left"
        if cap is not None
        else f"total so far {_g(led['total_so_far'])}, no cap (a simulated population)"
    )
    return (
        f"- **Budget.** This release is charged {_g(led['this_release'])} to population `{c['population']}`'s "
        f"budget: eps {c['epsilon']:g} per {unit} x stretch {_g(within, '.4g')}"
        f"{' (over the pairs within the radius)' if within != g['stretch'] else ''} x protection radius "
        f"{g['protection_radius']:g} {unit} = {_g(mech)} for the perturbed locations + eps_counts "
        f"{c['counts_epsilon']:g} for the counts{prior} (each charged once, before it was measured); {budget} "
        f"(ledger entry {led['ledger_seq']}, head "
        f"`{str(led['ledger_head'])[:16]}...`)." + _history_sentence(led.get("history"))
    )


def _rate_at(g: dict, d: float) -> float | None:
    """The guarantee's rate per unit for two records ``d`` apart: eps x the stretch within the protection
    radius up to it, eps x the graph's stretch beyond (None without the figures)."""
    eps, radius = _finite(g.get("epsilon_per_unit")), _finite(g.get("protection_radius"))
    within, anywhere = _finite(g.get("stretch_within_radius", g.get("stretch"))), _finite(g.get("stretch"))
    if eps is None or radius is None or within is None or anywhere is None:
        return None
    return eps * (within if d <= radius * (1 + 1e-12) else anywhere)


def _odds_sentence(
    g: dict, max_snap: float | None = None, prior: bool = False, error: bool = False, every: bool = False
) -> str:
    """The guarantee in plain words (issue 50): by how much seeing the release can change the odds between two
    records, and between two people (each at most ``max_snap`` from their record: their records are at most
    d + 2 x max_snap apart), at a few distances up to the protection radius; the factor includes the counts'
    (and DP prior's, and the people's mean error's: ``error``) share, exp(additive); ``every``: the rate is for any
    two records (:func:`every_pair`)."""
    radius, add = _finite(g.get("protection_radius")), _finite(g.get("additive_epsilon"))
    shares = "the counts" + (" and the DP prior" if prior else "") + (" and the people's mean error" if error else "")
    if radius is None or add is None or radius <= 0 or _rate_at(g, radius) is None:
        return ""
    unit = str(g.get("distance_unit", ""))
    steps = sorted({radius / 10, radius / 4, radius / 2, radius})

    def factor(d: float) -> str:
        return f"{math.exp(float(_rate_at(g, d) or 0.0) * d + add):.3g}x"

    records = ", ".join(f"{factor(d)} at {_g(d, '.3g')} {unit}" for d in steps)
    text = (
        f" In plain words: seeing this release (microdata, counts and all) changes the odds between any two records "
        f"a person could have by at most {records} apart (1x: no change; {_g(_rate_at(g, radius), '.4g')} per {unit} "
        f"{'for any two records' if every else 'within the protection radius'}; {shares} account for a factor "
        f"{math.exp(add):.3g} of each)."
    )
    if max_snap is not None and max_snap > 0:
        people = ", ".join(f"{factor(d + 2 * max_snap)} at {_g(d, '.3g')} {unit}" for d in steps)
        text += (
            f" Between two places a person could be, add twice the largest move to a record ({_g(max_snap, '.3g')} "
            f"{unit}) to their distance: at most {people} apart."
        )
    return text


def _odds_of(c: dict) -> tuple[bool, bool, bool]:
    """:func:`_odds_sentence`'s flags from the claims: a DP prior, the people's mean error measured, every pair."""
    return c["prior_source"] == "dp", bool(c.get("people_error")), every_pair(c)


def _history_sentence(history: object) -> str:
    """The budget's decisions (provenance ledger ``history``): every cap set, lowered or raised and every new
    budget, when, by whom, why, and what had been charged before it (this budget; every budget)."""
    if not isinstance(history, list) or not history:
        return ""
    words = {"cap": "cap set to", "lower": "cap lowered to", "raise": "cap raised to", "new-budget": "new budget, cap"}
    parts = [
        f"{e.get('at')} {words.get(str(e.get('kind')), str(e.get('kind')))} {_g(e.get('cap'))} by {e.get('by')} "
        f"({e.get('why')}; charged before: {_g(e.get('spent_before'))} in this budget, "
        f"{_g(e.get('spent_all_budgets'))} in every budget of this store)"
        for e in history
        if isinstance(e, dict)
    ]
    return " Budget history: " + "; ".join(parts) + "."


def _protection_sentence(c: dict) -> str | None:
    """The protection bullet (provenance v3): stretch, components (who is unprotected), snap distances."""
    p, unit = c.get("protection"), c["distance_unit"]
    if not p:
        return None
    g = c["guarantee"]
    text = (
        f"- **Protection in the data's metric.** Shortest paths in the mDP graph are at most "
        f"{_g(p['stretch'], '.4g')} times the distance in {unit} (stretch; allowed up to {_g(p['max_stretch'], 'g')}), "
        f"so two records of one component are protected at eps x stretch = {_g(g['metric_epsilon_per_unit'])} "
        f"per {unit}, charged up to the protection radius {p['protection_radius']:g} {unit}. "
    )
    if g["stretch"] <= 1.0:  # every pair at its own distance (all edges, or every pair certified: issue 51)
        text = (
            f"- **Protection in the data's metric.** One rate: eps {_g(g['metric_epsilon_per_unit'])} per {unit} for "
            f"any two records of one component, at their distance in {unit} (stretch 1: no graph stretch), charged "
            f"up to the protection radius {p['protection_radius']:g} {unit}. "
        )
    if p["connected"]:
        text += "The graph is connected: every individual is protected from every other record."
    else:
        sizes = ", ".join(str(s) for s in p["component_sizes"])
        text += (
            f"The graph has {p['n_components']} components (sizes {sizes}): individuals at the "
            f"{p['records_outside_largest']} record(s) outside the largest one are **not protected** from records "
            "of the other components, and every individual's component may be revealed (released because "
            f"allow_unprotected = {str(bool(p['allow_unprotected'])).lower()}). How many individuals that is, is a "
            "count of the secret table and is not published (`mdp-release check` shows it to the operator)."
        )
    if p.get("max_distance") is not None:
        text += (
            f" Every individual was mapped to a record at most {_g(p['max_distance'], '.4g')} {unit} away (checked "
            "for each one; their actual distances are not published)."
        )
    return text


def _people_error_sentence(c: dict) -> str:
    """The headline (issue 50): the expected error for people -- from where a person is, snapping included, for
    people spread as the prior in each record's cell -- with the snap alone and the records' figure beside it;
    a release made before issue 50 (no people's rows): the records' figure, said to be from the record, and the
    table's own people's measured figure when the claims carry one (:func:`own_people_sentence`)."""
    a, unit = c.get("against_laplace") or {}, c["distance_unit"]
    counts = (
        f" Each published count is off by {mean_abs_error(c['count_noise_scale']):.3g} people on average before it "
        f"is made consistent (noise scale {c['count_noise_scale']:g}); aggregates.parquet gives each count's 95 % "
        f"interval (ci_low, ci_high: about {interval_half_width(c['count_noise_scale'])} people either side of the "
        "noisy count, cut at 0 and the total) and intervals that hold for all counts together (sim_low, sim_high)."
    )
    if not a.get("people"):
        return (
            f"- **Expected error.** A released location lies on average {_g(c['dist_loss_mean'], '.4g')} {unit} from "
            f"the person's record (not from the person: the move to the record is not counted)."
            + own_people_sentence(c)  # a measured (charged) figure, stated here too; "" without it
            + counts
        )
    limit = (c.get("protection") or {}).get("max_distance")
    cell = (
        "the record"
        if not a["snap"]
        else (
            "its grid cell; on a road network, the streets nearer to it than to any other record, 20 m to either "
            "side; else the places nearer to it than to any other record"
            + (f" within {_g(limit, '.3g')} {unit}" if limit is not None else "")
        )
    )
    lead, after = "- **Expected error, for people.** A", own_people_sentence(c)
    if c.get("people_error"):  # this table's own people first (issue 50), once; the prior-spread figure beside it
        lead, after = f"- **Expected error, for people.**{after} For people spread as the prior: a", ""
    return (
        f"{lead} released location lies on average {_g(a['release'], '.4g')} {unit} "
        f"from where the person is (standard error {_g(a['release_se'], '.2g')}). Of this, the move to the nearest "
        f"record alone averages {_g(a['snap'], '.4g')} {unit}; from the records themselves the error is "
        f"{_g(a['from_records'], '.4g')} {unit}. The figure holds for people spread as the public prior over the "
        f"records, each anywhere in the area that would be mapped to their record ({cell}); it is computed from "
        "public geometry, not from the people's table." + after + counts
    )


def own_people_sentence(c: dict) -> str:
    """For this table's own people (issue 50): their DP-measured mean error (``c["people_error"]``, the provenance's
    :func:`mdp_core.release.people.measured_error`) against continuous planar Laplace at the stated rate (exact,
    wherever a person is: its dimension / rate); without it, that their figure is not measured (with snapping)."""
    a, m, unit = c.get("against_laplace") or {}, c.get("people_error"), c["distance_unit"]
    if not m:  # claims without the key: a report made before issue 50, re-rendered unchanged by the audit
        if not a.get("snap") or "people_error" not in c:
            return ""
        return (
            " This table's own people may stand nearer to or farther from their records than that: their own figure "
            "is not measured (the released counts do not say where people stand within a cell; [release] eps_error "
            "measures it, charged to the budget)."
        )
    text = (
        f" For this table's own {c['n_individuals']} people, DP-estimated at eps_error {m['epsilon']:g} (charged, in "
        f"the guarantee): {_g(m['estimate'], '.4g')} {unit}, +- {_g(m['noise_scale'], '.2g')} (the noise's scale; "
        "95 % of draws within 3 of it)"
    )
    text += {  # from where (the block's people_at): the metric the bounds were computed in
        "records": ", the error from their records (people known by their record stand at it: no snapping)",
        "lat_lon": f", measured in great-circle {unit} from each person's lat/lon (the metric they were mapped by)",
    }.get(m.get("people_at"), "")
    if a.get("continuous"):
        cont = a["continuous"]
        side = "below" if m["estimate"] <= cont else "above"
        text += (
            f", {_percent(abs(m['estimate'] / cont - 1))} {side} continuous planar Laplace at the same rate "
            f"({_g(cont, '.4g')} {unit}, exact wherever the person is)"
        )
    return text + "."


def summary_lines(c: dict) -> list[str]:
    """The officer's page's bullets, each a plain sentence or two (a pure function of the claims ``c``, with
    ``c["against_laplace"]``): what is released, the budget, the guarantee, the error for people against
    planar Laplace, the checks. A block another part adds (an approval, say) is one more entry of this list."""
    unit = c["distance_unit"]
    who = (
        f"{c['n_individuals']} **simulated** people (a demonstration: no real person is in this release)"
        if c["microdata_source"] == "simulated"
        else f"{c['n_individuals']} people of the agency's microdata file"
    )
    zones = f", per zone ({c['n_zones']})" if c["n_zones"] > 1 else ""
    g = c["guarantee"]
    snap = (c.get("protection") or {}).get("max_distance")
    lines = [
        f"- **What is released.** `microdata.parquet`: one perturbed location for each of {who}, and nothing else "
        f"about them. `aggregates.parquet`: noisy counts per output location ({c['n_outputs']}){zones} and the exact "
        f"total ({c['n_individuals']}).",
        _spend_sentence(c),
        f"- **Guarantee.**{_odds_sentence(g, snap, *_odds_of(c))} The formal statement is in the appendix's details.",
        _people_error_sentence(c),
    ]
    lines += [s] if (s := laplace_sentence(c)) else []
    lines.append(
        f"- **Checks.** `{c['method_run']}` solved the mechanism ({c['status']}, gap {_g(c['gap'])}); the "
        f"privacy certificate {'PASSED' if c['certificate_passed'] else 'FAILED'} on all {c['certificate_pairs']} "
        f"neighbour pairs{' and every other pair of one component, in the metric' if every_pair(c) else ''} (realised eps {rounded_to_tolerance(c['max_realised_epsilon'], c['certificate_ratio_tol'])} "
        f"per {unit} (checked to a relative tolerance of {c['certificate_ratio_tol']:g}), "
        f"{c['certificate_violations']} violations)."
    )
    return lines + ([s] if (s := approval_sentence(c)) else [])


def release_summary(c: dict, figures: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The report's first page, in plain language, for the officer who signs the release -- a pure
    function of the claims ``c`` (:func:`release_claims`) and the released figure names: :func:`summary_lines`,
    then the page's figures."""
    lines = ["# Release report", "", "## Summary for the signing officer", "", *summary_lines(c), ""]
    for name, title in PAGE_FIGURES:
        if name in figures:
            lines += _figure(title, name, c)
    return lines


def details_lines(c: dict) -> list[str]:
    """The details the officer's page leaves out: the protection in the data's metric, the loss, the method's
    bounds, the attacker's expected error, reproducibility."""
    unit = c["distance_unit"]
    order = (
        "sorted by output (nothing in it follows the input order)"
        if c.get("population") is not None
        else "in the input order"
    )
    chosen = f" (chosen by `auto`: {c['auto_reason']})" if c.get("auto_reason") else ""
    lines = ["## Details", "", f"- **Guarantee, formally.** {c['guarantee']['statement']}."]
    lines += [p] if (p := _protection_sentence(c)) else []
    lines += [s] if (s := loss_sentence(c)) else []  # issue 40: which loss the mechanism minimises
    return lines + [
        f"- **Method run.** `{c['method_run']}`{chosen}: {c['status']}, expected loss {_g(c['objective'])}, proven lower bound "
        f"{_g(c['lower_bound'])}, gap {_g(c['gap'])}; expected utility loss {_g(c['expected_loss'], '.4g')}.",
        f"- **Attacker.** The expected error of a Bayes-optimal attacker *when individuals follow the stated prior* "
        f"(an expectation under the prior, not a bound on what any attacker achieves) is "
        f"{_g(c['adversary_error'], '.4g')} {unit}.",
        f"- **Microdata order.** One row per person, {order}.",
        "- **Reproducibility.** The randomness came from OS entropy; its secret stays in the store's private part, "
        f"and the manifest holds only the commitment `{c['draw_commitment'][:16]}...`. A re-run from the "
        "manifest on the same store reproduces these files byte for byte.",
        "",
    ]


def appendix_markdown(c: dict, evaluation_md: str, figures: set[str] | frozenset[str]) -> list[str]:
    """The technical appendix, also a function of the claims: sizes, the solve, the certificate, the
    evaluation table (``evaluation_md``: :func:`evaluation_markdown` of evaluation.parquet) and the figures."""
    unit = c["distance_unit"]
    lines = [
        "# Appendix: technical evaluation",
        "",
        *details_lines(c),
        f"N = {c['n_records']} records, K = {c['n_outputs']} outputs, |E| = {c['n_edges']} neighbour pairs, "
        f"eps = {c['epsilon']:g} per {unit}, eta = {c['eta']:g} {unit}.",
        "",
        f"Released mechanism: **{c['method']}** ({c['status']}), expected loss {_g(c['objective'])}, "
        f"lower bound {_g(c['lower_bound'])}, gap {_g(c['gap'])}, {c['iterations']} iterations, {c['seconds']} s.",
        *([f"Loss c_ik: {c['loss']}."] if c.get("loss") else []),
        f"Privacy certificate: {'PASS' if c['certificate_passed'] else 'FAIL'}, realised eps "
        f"{rounded_to_tolerance(c['max_realised_epsilon'], c['certificate_ratio_tol'])}, "
        f"{c['certificate_violations']} violations over {c['certificate_pairs']} pairs.",
        "",
        evaluation_md,
        "",
    ]
    for name, title in APPENDIX_FIGURES:
        if name in figures:
            lines += _figure(title.format(method_run=c["method_run"]), name, c, heading=True)
    return lines


def render_report(c: dict, evaluation_md: str, figures: set[str] | frozenset[str]) -> str:
    """report.md of a release, entirely: the officer's page, the appendix, the claims block. A pure
    function of the claims ``c``, the evaluation table's markdown and the released figure names, so
    ``mdp-release audit`` regenerates it and compares every character."""
    page = c | {"against_laplace": against_laplace(c, evaluation_md)}  # from the table, not a claim
    text = "\n".join(release_summary(page, figures) + appendix_markdown(c, evaluation_md, figures))
    return f"{text}\n<!-- {CLAIMS_TAG} {json.dumps(c, sort_keys=True)} -->\n"


def evaluation_markdown(path: Path) -> str:
    """evaluation.parquet as the report's markdown table (read back from the file, so the writer and the
    audit render the same bytes)."""
    from mdp_core.problem.io import read_table

    return markdown_table(read_table(path))


def technical_markdown(inst, info: dict, table: pd.DataFrame, figures: list[tuple[str, str]]) -> str:
    """The evaluation report of a run without a release (no claims): the instance, the mechanism's
    solve and certificate, the evaluation table and the ``figures`` ((title, png name) pairs)."""
    cert = info["certificate"]
    lines = [
        "# mdp-release evaluation",
        "",
        f"N = {inst.n_records} records, K = {inst.n_outputs} outputs, |E| = {inst.n_edges} neighbour pairs, "
        f"eps = {inst.epsilon:g} per {inst.distance_unit}, eta = {inst.eta:g} {inst.distance_unit}.",
        "",
        f"Released mechanism: **{info['method']}** ({info['status']}), expected loss {info['objective']:.6g}, "
        f"lower bound {info.get('lower_bound')}, gap {info.get('gap')}, {info['iterations']} iterations, "
        f"{info['seconds']} s.",
        *([f"Loss c_ik: {loss}."] if (loss := loss_of(inst.provenance)) else []),
        f"Privacy certificate: {'PASS' if cert['passed'] else 'FAIL'}, realised eps {cert['max_realised_epsilon']}, "
        f"{cert['n_violations']} violations over {cert['n_pairs']} pairs.",
        "",
        markdown_table(table),
        "",
    ]
    c = {
        "epsilon": inst.epsilon,
        "eta": inst.eta,
        "distance_unit": inst.distance_unit,
        "method": info["method"],
        "method_run": ((info.get("extra") or {}).get("auto") or {}).get("method", info["method"]),
    }
    for title, name in figures:
        lines += _figure(title, name, c, heading=True)
    return "\n".join(lines)


__all__ = [
    "BOUND_PLOTS",
    "CLAIMS_TAG",
    "LAPLACE_ROWS",
    "PEOPLE_ROWS",
    "REPORT_VERSION",
    "STREET_NEIGHBOURS",
    "bounds_title",
    "count_error_curve",
    "evaluation_markdown",
    "every_pair",
    "markdown_table",
    "nearest_edges",
    "plot_against_laplace",
    "plot_bounds",
    "plot_lines",
    "plot_noise",
    "plot_partition",
    "plot_released_points",
    "release_claims",
    "render_report",
    "utility_curve",
]
