"""The UI tells the truth at a glance (issue 29, item 5): one artifact per key and content (a cached tick
adds none), this run's spend and the population's budget left, realised eps rounded to the tolerance it was
checked at, baselines labelled as baselines, plot titles for the method that ran, a progress bar that moves
inside a round, released points over the mDP graph, and one caption under each figure of the report.

The artifact tests run flows on the session's real Prefect server (``flow`` marker); the rest are fast.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import api_post

from artifacts.private import PrivateStore
from flows import operate_ui
from mdp_core.release import report, report_plots
from mdp_core.runtime import control
from tasks import progress
from tasks.progress import CEILING, Heartbeat, ProgressArtifact, lp_share, round_slot, within_round

ACT = "rowgen round {r} LP ({rows} rows): HiGHS interior point iteration {n} (3 s into this LP)"


# ------------------------------------------------------------------------------------- progress
def test_lp_share_is_monotone_below_one_and_reaches_nine_tenths_at_the_expected_count():
    shares = [lp_share(n, 30) for n in range(0, 400)]
    assert shares == sorted(shares) and shares[0] == 0.0 and max(shares) < 1.0
    assert lp_share(30, 30) == pytest.approx(0.9) and lp_share(15, 30) == pytest.approx(0.45)
    assert lp_share(60, 30) == pytest.approx(0.95)  # longer than expected: still creeping


def test_round_slot_first_guess_previous_increment_and_never_the_end():
    assert round_slot(0.0, None) == progress.FIRST_ROUND_SLOT
    assert round_slot(20.0, 20.0) == 20.0
    assert round_slot(20.0, 0.0) == progress.MIN_SLOT  # a round that proved nothing: the next still moves
    assert round_slot(90.0, 40.0) == pytest.approx((CEILING - 90.0) / 2)  # at most half of what is left
    assert within_round(20.0, 10.0, 1.0) < CEILING and within_round(20.0, 10.0, 0.5) == 25.0


def test_progress_moves_inside_the_first_round_never_back_and_100_only_at_the_end():
    bar = ProgressArtifact(None, "solve[rowgen]")  # no flow run: no artifact, the percentage is computed
    seen = []
    for n in range(1, 31):  # the first round's LP: against the documented first guess (30 iterations)
        bar.activity(ACT.format(r=1, rows=100, n=n))
        seen.append(bar.percent)
    assert seen == sorted(seen) and seen[0] > 0.0
    assert seen[-1] == pytest.approx(0.9 * progress.FIRST_ROUND_SLOT)  # 90 % of the first round's guessed slot
    # the round's line proves less than the estimate: the bar holds (never backwards)
    bar(control.Progress("rowgen", "round 1", lower=1.0, upper=2.0, gap_rel=1e-3))
    assert bar.percent == seen[-1]
    # round 2's LP: 10 iterations of the 30 the previous LP took -> 0.3 of its slot
    base, slot = bar.base, bar.slot
    bar.activity(ACT.format(r=2, rows=200, n=10))
    assert bar.expected["interior point"] == 30.0
    assert bar.percent == pytest.approx(max(seen[-1], within_round(base, slot, 0.3)))
    assert bar.percent < CEILING
    for n in range(11, 500, 7):
        before = bar.percent
        bar.activity(ACT.format(r=2, rows=200, n=n))
        assert before <= bar.percent < CEILING
    bar.activity("no iteration here")  # anything else is ignored
    bar.done("optimal")
    assert bar.percent < CEILING + 1e-9  # 100 only on the artifact, when the solve returns


def test_a_retry_of_the_same_lp_counts_as_a_new_lp():
    bar = ProgressArtifact(None, "solve")
    for n in range(1, 11):
        bar.activity(ACT.format(r=1, rows=100, n=n))
    bar.activity(ACT.format(r=1, rows=100, n=2))  # the count fell: a retry (another algorithm)
    assert bar.expected["interior point"] == 10.0 and bar.lp_count == 2


def test_the_heartbeat_hands_the_solver_activity_to_the_progress_bar():
    class Log:
        def info(self, *args):
            pass

    token = control.StopToken(label="solve")
    with Heartbeat("solve", Log(), every=100.0, token=token):
        bar = ProgressArtifact(None, "solve")  # built inside the stage: it watches the stage's heartbeat
        token.set_activity(ACT.format(r=1, rows=100, n=12))
        t0 = time.monotonic()
        while bar.percent == 0.0 and time.monotonic() - t0 < 5.0:
            time.sleep(0.1)
    assert bar.percent == pytest.approx(within_round(0.0, progress.FIRST_ROUND_SLOT, lp_share(12, 30)))


# --------------------------------------------------------------------------- release artifact text
def test_realised_eps_is_rounded_to_the_tolerance_it_was_checked_at():
    assert operate_ui.realised_eps_text({"max_realised_epsilon": 10.000000000064, "ratio_tol": 1e-9}) == (
        "10 (checked to 1e-9)"
    )
    assert operate_ui.realised_eps_text({"max_realised_epsilon": 9.87654321, "ratio_tol": 1e-3}) == (
        "9.88 (checked to 0.001)"  # the digits the report shows (report.rounded_to_tolerance)
    )
    assert operate_ui.realised_eps_text({"max_realised_epsilon": "inf", "ratio_tol": 1e-9}).startswith("inf")


def _manifest(run_dir: Path, same_as: str | None = None, simulated: bool = False) -> dict:
    m = {
        "run_name": "20260101-000000-abcdef12",
        "privacy": {
            "certificate": {"passed": True, "max_realised_epsilon": 10.000000000064, "ratio_tol": 1e-9},
            "mechanism_epsilon": 10.0,
            "distance_unit": "km",
            "counts_epsilon": 1.0,
            "prior_source": "dataset",
            "prior_epsilon": 0.0,
            "n_individuals": 200,
            "microdata_source": "simulated" if simulated else "file",
            "population": "rome-residents",
            "guarantee": {"statement": "a statement"},
            "ledger": {"this_release": 21.0, "total_so_far": 21.0, "max_total_epsilon": 100.0},
        },
        "solve": {"method": "rowgen", "status": "optimal", "objective": 1.0, "lower_bound": 1.0, "gap": 0.0},
        "stages": {"solve": {"cache_hit": True}},
        "released_files": {"microdata.parquet": "0" * 64},
    }
    if same_as:
        m["same_as"] = same_as
    return m


def test_release_markdown_states_this_runs_spend_the_budget_left_and_no_limit_dash(tmp_path):
    run_dir = tmp_path / "runs" / "20251231-000000-00000000"
    run_dir.mkdir(parents=True)
    spend = operate_ui.RunSpend("rome-residents", spent=0.0, total=21.0, cap=100.0, left=79.0)
    md = operate_ui.release_markdown(run_dir, _manifest(run_dir, same_as=run_dir.name), "agency", spend)
    assert md.startswith(f"# Release `agency`: `{run_dir.name}`")  # the folder that exists, not this run's name
    assert "20260101-000000-abcdef12" not in md
    assert "| this run spent | 0 (nothing new was measured" in md
    assert "| budget left | 79 of the cap 100 (21 spent in all) |" in md
    assert "| population | `rome-residents` |" in md
    assert "| realised eps | 10 (checked to 1e-9) |" in md
    assert "limit -" not in md and "this release spends" not in md and "nothing new published" in md
    sim = operate_ui.RunSpend("simulated-0123456789abcdef", spent=6.5, total=6.5, cap=None, left=None)
    md = operate_ui.release_markdown(run_dir, _manifest(run_dir, simulated=True), "demo", sim)
    assert "| this run spent | 6.5 (charged to `simulated-0123456789abcdef` by this run) |" in md
    assert "| budget left | no cap (a simulated population); 6.5 spent in all |" in md
    assert "SIMULATED" in md


def test_run_spend_is_the_ledger_after_minus_before(tmp_path):
    private = PrivateStore(tmp_path)
    key = lambda i: hashlib.sha256(f"charge {i}".encode()).hexdigest()  # noqa: E731
    private.charge("rome-residents", key(0), 2.0, {"kind": "counts"}, 100.0, True)
    before = operate_ui.ledger_snapshot(tmp_path)
    assert before == {"rome-residents": 2.0}
    cached = operate_ui.run_spend(tmp_path, "rome-residents", before)
    assert (cached.spent, cached.total, cached.cap, cached.left) == (0.0, 2.0, 100.0, 98.0)
    private.charge("rome-residents", key(1), 4.5, {"kind": "perturb"}, 100.0, True)
    private.charge("rome-residents", key(1), 4.5, {"kind": "perturb"}, 100.0, True)  # idempotent: once
    new = operate_ui.run_spend(tmp_path, "rome-residents", before)
    assert (new.spent, new.total, new.left) == (4.5, 6.5, 93.5)
    fresh = operate_ui.run_spend(tmp_path, "simulated-00", {})  # a population born in this run
    assert fresh.spent == 0.0 and fresh.cap is None
    assert operate_ui.run_spend(tmp_path, "rome-residents", None).spent is None  # unknown, never a guess


# ----------------------------------------------------------------------------------- plots, captions
def _capture(monkeypatch) -> list:
    figs: list = []

    def save(fig, path):
        figs.append(fig)
        Path(path).write_bytes(b"png")
        return path

    monkeypatch.setattr(report_plots, "_save", save)
    return figs


def test_bounds_plot_is_titled_for_the_method_that_ran(monkeypatch, tmp_path):
    figs = _capture(monkeypatch)
    trace = pd.DataFrame({"iteration": [1, 2], "lower_bound": [0.5, 0.9], "upper_bound": [np.inf, 1.0]})
    for method in ("rowgen", "benders", "colgen"):
        report.plot_bounds(trace, tmp_path / "b.png", method)
    titles = [f.axes[0].get_title() for f in figs]
    assert titles == ["Row generation: bounds", "Benders decomposition: bounds", "Column generation: bounds"]
    assert report.bounds_title("lp") == "lp: bounds"


def test_released_points_are_drawn_over_the_mdp_graph(monkeypatch, tmp_path):
    from matplotlib.collections import LineCollection

    figs = _capture(monkeypatch)
    records = np.array([[41.90, 12.49], [41.91, 12.50], [41.92, 12.49], [41.90, 12.51]])
    edges = np.array([[0, 1], [1, 2], [1, 3]])
    report.plot_released_points(records[[1, 3]], np.array([5, 0]), tmp_path / "r.png", True, records, edges)
    ax = figs[0].axes[0]
    lines = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(lines) == 1 and len(lines[0].get_segments()) == 3
    seg = lines[0].get_segments()[0]
    assert np.allclose(seg, [[12.49, 41.90], [12.50, 41.91]])  # x = lon, y = lat
    assert "released outputs: 5 individuals on 1 of 2 outputs" == ax.get_title()


def test_the_streets_are_a_sparse_backbone_with_the_graphs_components():
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    from mdp_core.problem.datasets import grid

    g = grid(10, 12, n_outputs=20, eta=3.0)  # a dense mDP graph: every record has many neighbours
    pts = g.record_points()
    kept = report.nearest_edges(pts, g.edges)
    assert 0 < len(kept) < len(g.edges) / 2 and set(map(tuple, kept)) <= set(map(tuple, g.edges))
    degree = np.bincount(kept.ravel(), minlength=g.n_records)
    assert degree.min() >= report.STREET_NEIGHBOURS  # every record keeps its nearest neighbours
    # two far clusters joined by one long edge: the backbone keeps it (no component the graph lacks)
    two = np.vstack([pts, pts + 100.0])
    n = len(pts)
    edges = np.vstack([g.edges, g.edges + n, [[0, n]]])
    kept = report.nearest_edges(two, edges)
    graph = coo_matrix((np.ones(len(kept)), (kept[:, 0], kept[:, 1])), shape=(2 * n, 2 * n))
    assert connected_components(graph, directed=False)[0] == 1 and [0, n] in kept.tolist()


def _claims(n_zones: int = 3) -> dict:
    return {
        "eta": 0.5,
        "distance_unit": "km",
        "count_noise_scale": 3.0,
        "counts_epsilon": 1.0,
        "epsilon": 10.0,
        "method": "rowgen",
        "method_run": "rowgen",
        "n_zones": n_zones,
    }


def test_every_figure_has_one_deterministic_caption_and_the_count_error_plot_explains_itself():
    names = [n for n, _ in report.PAGE_FIGURES + report.APPENDIX_FIGURES]
    for name in names:
        text = report.figure_caption(name, _claims())
        assert text and text == report.figure_caption(name, _claims()) and "\n" not in text, name
    cbdp = report.figure_caption("cbdp_error.png", _claims(3))
    assert "eps_counts / 3 on each of its 3 count queries" in cbdp and "up to about 3 times worse" in cbdp
    assert "Laplace baseline" in cbdp and "consistent" in cbdp
    assert "eps_counts / 2" in report.figure_caption("cbdp_error.png", _claims(1))
    assert "eta = 0.5 km" in report.figure_caption("released.png", _claims())
    assert "`rowgen`" in report.figure_caption("bounds.png", _claims())


def test_the_count_error_caption_matches_the_curve():
    """What the caption says, measured: on one output CBDP is up to about k times the Laplace baseline's
    error, and on the coarser counts far better (mdp_core.release.postprocess.error_curve, seeded)."""
    from mdp_core.release.postprocess import error_curve

    rng = np.random.default_rng(0)
    k_out = 60
    counts = rng.multinomial(1500, rng.dirichlet(np.full(k_out, 0.3)))
    feats = [np.arange(k_out), np.arange(k_out) % 4, np.zeros(k_out, np.int64)]
    curve = error_curve(counts, feats, [1.0], n_seeds=4).set_index("method")
    ratio = curve.loc["cbdp", "mae_singletons"] / curve.loc["laplace", "mae_singletons"]
    assert 1.0 < ratio <= 3.5
    assert curve.loc["cbdp", "mae_features"] < curve.loc["laplace", "mae_features"]


def test_report_renders_a_caption_under_each_figure():
    c = json.loads(
        json.dumps(
            {
                **_claims(),
                "report_version": report.REPORT_VERSION,
                "n_records": 4,
                "n_outputs": 2,
                "n_edges": 3,
                "n_individuals": 5,
                "microdata_source": "simulated",
                "population": None,
                "prior_epsilon": 0.0,
                "prior_source": "dataset",
                "additive_epsilon": 1.0,
                "guarantee": {"statement": "s"},
                "ledger": {"this_release": 1.0, "total_so_far": 1.0, "releases_so_far": 1, "max_total_epsilon": None},
                "protection": None,
                "draw_commitment": "0" * 64,
                "auto_reason": None,
                "status": "optimal",
                "objective": 1.0,
                "lower_bound": 1.0,
                "gap": 0.0,
                "iterations": 2,
                "seconds": 1.0,
                "certificate_passed": True,
                "certificate_pairs": 3,
                "certificate_violations": 0,
                "certificate_ratio_tol": 1e-9,
                "max_realised_epsilon": 10.0,
                "dist_loss_mean": 0.1,
                "adversary_error": 0.2,
                "expected_loss": 1.0,
            }
        )
    )
    figures = frozenset(["released.png", "count_noise.png", "bounds.png", "cbdp_error.png"])
    md = report.render_report(c, "| table |", figures)
    lines = md.split("\n")
    for name in figures:
        at = next(i for i, ln in enumerate(lines) if ln.endswith(f"]({name})"))
        assert lines[at + 2] == report.figure_caption(name, c), name
    assert "## Row generation" not in md and "Bounds per iteration (rowgen)" in md


# ------------------------------------------------------------------------- artifacts on a real server
def _artifacts(server: dict, key: str) -> list[dict]:
    return api_post(server, "/artifacts/filter", {"artifacts": {"key": {"any_": [key]}}})


@pytest.mark.flow
def test_one_artifact_per_key_and_content_and_a_cached_tick_adds_no_release_artifact(prefect_server, tmp_path):
    from prefect import flow
    from prefect.settings import PREFECT_API_URL, temporary_settings

    key = f"truth-{time.time_ns()}"
    run_dir = tmp_path / "runs" / "20251231-000000-00000000"
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text("{}")

    @flow(name="ui-truth")
    def tick(table: list, md: str, same_as: str | None) -> tuple[bool, bool, bool]:
        made = progress.publish_artifact("table", f"{key}-evaluation", table, "compared")
        made_md = progress.publish_artifact("markdown", f"{key}-report", md, "report")
        released = operate_ui.after_release(tmp_path, run_dir, _manifest(run_dir, same_as), key, spent_before={})
        return made, made_md, released

    rows = [{"method": "rowgen", "expected_loss": 1.5, "gap": float("nan"), "realised_epsilon": "inf"}]
    with temporary_settings(updates={PREFECT_API_URL: prefect_server["url"]}):
        first = tick(rows, "# report", None)  # a new release: every artifact
        cached = tick(rows, "# report", run_dir.name)  # a cached tick: nothing
        again = tick(rows, "# report", run_dir.name)
        changed = tick(rows + [{"method": "exp"}], "# report 2", run_dir.name)  # new content: new versions
    assert first == (True, True, True)
    assert cached == again == (False, False, False)
    assert changed == (True, True, False)
    assert len(_artifacts(prefect_server, f"{key}-evaluation")) == 2
    assert len(_artifacts(prefect_server, f"{key}-report")) == 2
    releases = _artifacts(prefect_server, f"{key}-release")
    assert len(releases) == 1 and f"`{run_dir}`" in releases[0]["data"]
    assert "limit -" not in releases[0]["data"]


TICK = """
name = "truth-tick"
store = "{store}"
[dataset]
kind = "grid"
params = {{ rows = 3, cols = 4, n_outputs = 5, seed = 1 }}
[solve]
method = "rowgen"
[release]
simulate = true
n_individuals = 50
[evaluate]
baselines = ["exp"]
counts_eps = [1.0]
counts_seeds = 1
"""


@pytest.mark.flow
def test_a_cached_tick_adds_no_artifact_and_says_nothing_new_once(prefect_server, tmp_path):
    """Two runs of one config through the command line: the first publishes the three artifacts and states
    its spend; the fully cached second adds none and logs "nothing new published" once."""
    import os
    import subprocess
    import sys

    from conftest import QUIET

    cfg = tmp_path / "tick.toml"
    cfg.write_text(TICK.format(store=tmp_path / "store"))
    env = os.environ | QUIET | {"PREFECT_API_URL": prefect_server["url"], "PREFECT_HOME": str(prefect_server["home"])}
    runs = []
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-m", "flows.cli", "run", "--config", str(cfg), "--json"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout))
    assert runs[1]["same_as"] == Path(runs[0]["run_dir"]).name
    for suffix in ("release", "report", "evaluation"):
        arts = _artifacts(prefect_server, f"truth-tick-{suffix}")
        assert len(arts) == 1 and arts[0]["flow_run_id"] == runs[0]["flow_run_id"], suffix
    md = _artifacts(prefect_server, "truth-tick-release")[0]["data"]
    charge = runs[0]["privacy"]["ledger"]["this_release"]
    assert f"| this run spent | {charge:.6g} (charged to `{runs[0]['privacy']['population']}` by this run) |" in md
    assert "| budget left | no cap (a simulated population)" in md and "limit -" not in md
    assert "(checked to 1e-9)" in md
    said = [
        log["message"]
        for log in api_post(
            prefect_server, "/logs/filter", {"logs": {"flow_run_id": {"any_": [runs[1]["flow_run_id"]]}}}
        )
        if "nothing new published" in log["message"]
    ]
    assert len(said) == 1 and "this run spent 0" in said[0], said


def test_no_update_after_done_moves_the_bar_back():
    sent: list[float] = []

    class Recording(ProgressArtifact):
        def _send_update(self, percent: float, description: str) -> None:  # the API call, recorded
            sent.append(percent)

    bar = Recording(None, "solve", every=0.0)
    bar.id = "artifact"  # as if created on a server
    bar.activity(ACT.format(r=1, rows=10, n=3))
    bar.done("optimal")
    bar.activity(ACT.format(r=1, rows=10, n=4))  # the heartbeat's thread, a moment late
    bar(control.Progress("rowgen", "round 1", lower=1.0, upper=2.0, gap_rel=1e-3))
    assert sent[-1] == 100.0 and sent.count(100.0) == 1 and len(sent) == 2
