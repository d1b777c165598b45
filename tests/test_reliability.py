"""Reliability suite (issue 11): bad inputs, tampering, kill -9, concurrency, errors inside the flow.

Fast part: a table of bad inputs (instance files, mechanism files, CLI options, TOML configs, points
CSVs), each run in-process through ``flows.cli.main`` and checked for its exit code, ONE error line
on stderr naming the problem, and nothing written. Slow part (``slow``, ``flow``): real flow runs as
subprocesses against the session Prefect server of ``conftest.prefect_server``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import api_post, run_command, server_env

from flows.cli import main
from mdp_core.runtime.files import file_sha256

REPO = Path(__file__).resolve().parents[1]


# ============================================================================ helpers
def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str, needle: str) -> str:
    """stderr holds exactly one line, the error, and it names the problem (``solve`` may announce its
    work on a line of its own first: "solving <dir>: N=.., K=..")."""
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("solving ") and "working..." not in ln]
    assert len(lines) == 1 and lines[0].startswith("mdp-release: error: "), err
    assert needle.lower() in lines[0].lower(), (needle, lines[0])
    return lines[0]


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def write_parquet(path: Path, frame: pd.DataFrame) -> None:
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)


def edit_table(d: Path, table: str, fn: Callable[[pd.DataFrame], pd.DataFrame], rehash: bool = True) -> None:
    """Rewrite one instance table through ``fn``; update its sha256 in instance.json (a consistent edit)."""
    write_parquet(d / table, fn(pd.read_parquet(d / table)))
    if rehash:
        meta = json.loads((d / "instance.json").read_text())
        meta["tables"][table] = file_sha256(d / table)
        (d / "instance.json").write_text(json.dumps(meta))


def edit_meta(d: Path, fn: Callable[[dict], None]) -> None:
    meta = json.loads((d / "instance.json").read_text())
    fn(meta)
    (d / "instance.json").write_text(json.dumps(meta))


def setv(frame: pd.DataFrame, col: str, row: int, value) -> pd.DataFrame:
    frame = frame.copy()
    if isinstance(value, float) and frame[col].dtype.kind in "iu":
        frame[col] = frame[col].astype("float64")
    frame.loc[row, col] = value
    return frame


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict[str, Path]:
    """A valid grid instance (3 x 4, K = 5) and its verified LP mechanism, written by the CLI."""
    d = tmp_path_factory.mktemp("rel")
    assert (
        main([*"export --dataset grid --rows 3 --cols 4 --n-outputs 5 --epsilon 2 --out".split(), str(d / "inst")]) == 0
    )
    assert main(["solve", str(d / "inst"), "--method", "lp", "--out", str(d / "mech")]) == 0
    pts = d / "points"
    pts.mkdir()
    (pts / "ok.csv").write_text("lat,lon\n41.9,12.5\n41.91,12.51\n41.92,12.52\n")
    return {"inst": d / "inst", "mech": d / "mech" / "mechanism.parquet", "points": pts / "ok.csv"}


# ============================================================================ instance files
INSTANCE_CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "no instance.json": (lambda d: (d / "instance.json").unlink(), "instance.json"),
    "instance.json not JSON": (lambda d: (d / "instance.json").write_text("{oops"), "unreadable JSON"),
    "instance.json a list": (lambda d: (d / "instance.json").write_text("[]"), "JSON object"),
    "wrong format": (lambda d: edit_meta(d, lambda m: m.update(format="other")), "not an mdp-instance"),
    "wrong schema version": (lambda d: edit_meta(d, lambda m: m.update(schema_version=9)), "schema_version"),
    "missing key epsilon": (lambda d: edit_meta(d, lambda m: m.pop("epsilon")), "epsilon"),
    "epsilon a string": (lambda d: edit_meta(d, lambda m: m.update(epsilon="ten")), "epsilon"),
    "epsilon negative": (lambda d: edit_meta(d, lambda m: m.update(epsilon=-1.0)), "epsilon"),
    "eta zero": (lambda d: edit_meta(d, lambda m: m.update(eta=0.0)), "eta"),
    "unknown metric": (lambda d: edit_meta(d, lambda m: m.update(metric="manhattan")), "metric"),
    "n_records wrong": (lambda d: edit_meta(d, lambda m: m.update(n_records=99)), "record_id"),
    "edges table missing": (lambda d: (d / "edges.parquet").unlink(), "edges.parquet"),
    "edges table edited": (lambda d: edit_table(d, "edges.parquet", lambda f: f.iloc[1:], rehash=False), "sha256"),
    "costs truncated": (lambda d: (d / "costs.parquet").write_bytes((d / "costs.parquet").read_bytes()[:50]), "sha256"),
    "costs not parquet (rehashed)": (
        lambda d: (
            (d / "costs.parquet").write_bytes(b"PAR1 nope"),
            edit_meta(d, lambda m: m["tables"].update({"costs.parquet": file_sha256(d / "costs.parquet")})),
        ),
        "not a readable Parquet",
    ),
    "edge i > j": (lambda d: edit_table(d, "edges.parquet", lambda f: f.assign(i=f["j"], j=f["i"])), "i < j"),
    "edge self-loop": (
        lambda d: edit_table(d, "edges.parquet", lambda f: setv(f, "j", 0, int(f.loc[0, "i"]))),
        "self-loop",
    ),
    "duplicate edge": (
        lambda d: edit_table(d, "edges.parquet", lambda f: pd.concat([f, f.iloc[:1]]).sort_values(["i", "j"])),
        "duplicate",
    ),
    "edge beyond eta": (lambda d: edit_table(d, "edges.parquet", lambda f: setv(f, "distance", 0, 99.0)), "eta"),
    "edge distance 0": (lambda d: edit_table(d, "edges.parquet", lambda f: setv(f, "distance", 0, 0.0)), "distance"),
    "edge endpoint out of range": (
        lambda d: edit_table(d, "edges.parquet", lambda f: setv(f, "j", len(f) - 1, 999)),
        "out of range",
    ),
    "NaN prior": (lambda d: edit_table(d, "records.parquet", lambda f: setv(f, "prior", 0, float("nan"))), "NaN"),
    "prior sums to 2": (
        lambda d: edit_table(d, "records.parquet", lambda f: f.assign(prior=f["prior"] * 2)),
        "sum to 1",
    ),
    "negative prior": (
        lambda d: edit_table(
            d,
            "records.parquet",
            lambda f: setv(setv(f, "prior", 0, -0.1), "prior", 1, f.loc[1, "prior"] + f.loc[0, "prior"] + 0.1),
        ),
        "negative",
    ),
    "records out of order": (lambda d: edit_table(d, "records.parquet", lambda f: f.iloc[::-1]), "record_id"),
    "cost entry missing": (lambda d: edit_table(d, "costs.parquet", lambda f: f.iloc[:-1]), "N*K"),
    "NaN cost": (lambda d: edit_table(d, "costs.parquet", lambda f: setv(f, "cost", 3, float("nan"))), "NaN"),
    "edges with extra column": (
        lambda d: edit_table(d, "edges.parquet", lambda f: f.assign(extra=1)),
        "unexpected column",
    ),
    "cost ids as floats": (
        lambda d: edit_table(d, "costs.parquet", lambda f: f.assign(k=f["k"].astype("float64"))),
        "type",
    ),
}


@pytest.mark.parametrize("case", sorted(INSTANCE_CASES))
def test_bad_instance_file(base, tmp_path, capsys, case):
    damage, needle = INSTANCE_CASES[case]
    inst = tmp_path / "inst"
    shutil.copytree(base["inst"], inst)
    damage(inst)
    before = snapshot(tmp_path)
    code, out, err = run_cli(capsys, "solve", inst, "--method", "exp", "--out", tmp_path / "out")
    assert code == 2, err
    one_line(err, needle)
    assert snapshot(tmp_path) == before  # nothing written (no out dir, no temp files)


def test_issue11_finding4_edges_deleted_from_an_instance_with_coordinates(base, tmp_path, capsys):
    """The edges of record 0 deleted and every hash recomputed: verify fails against the metric (exit 1)
    and solve refuses to certify any mechanism for it (exit 1, one line), writing nothing."""
    inst = tmp_path / "inst"
    shutil.copytree(base["inst"], inst)
    edit_table(inst, "edges.parquet", lambda f: f[(f["i"] != 0) & (f["j"] != 0)])
    edit_meta(inst, lambda m: m.update(n_edges=len(pd.read_parquet(inst / "edges.parquet"))))
    code, out, _ = run_cli(capsys, "verify", inst, base["mech"])
    assert code == 1 and out.startswith("FAIL") and "missing edge" in out
    before = snapshot(tmp_path)
    code, _, err = run_cli(capsys, "solve", inst, "--method", "exp", "--out", tmp_path / "out")
    assert code == 1
    one_line(err, "missing neighbour pair")
    assert snapshot(tmp_path) == before


# ============================================================================ mechanism files
def _mech(base: Path, fn: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path], None]:
    return lambda p: write_parquet(p, fn(pd.read_parquet(base)))


MECHANISM_CASES: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "missing": (lambda src, p: None, "no such file"),
    "not parquet": (lambda src, p: p.write_bytes(b"PAR1 garbage"), "not a readable Parquet"),
    "empty file": (lambda src, p: p.write_bytes(b""), "not a readable Parquet"),
    "missing column": (lambda src, p: _mech(src, lambda f: f.drop(columns=["prob"]))(p), "missing column"),
    "extra column": (lambda src, p: _mech(src, lambda f: f.assign(x=1.0))(p), "unexpected column"),
    "float ids": (lambda src, p: _mech(src, lambda f: f.assign(i=f["i"].astype("float64")))(p), "type"),
    "NaN prob": (lambda src, p: _mech(src, lambda f: setv(f, "prob", 0, float("nan")))(p), "NaN"),
    "inf prob": (lambda src, p: _mech(src, lambda f: setv(f, "prob", 0, float("inf")))(p), "infinite"),
    "duplicate entry": (lambda src, p: _mech(src, lambda f: pd.concat([f, f.iloc[:1]]))(p), "duplicate"),
    "missing entries": (lambda src, p: _mech(src, lambda f: f.iloc[:-3])(p), "N*K"),
    "id out of range": (lambda src, p: _mech(src, lambda f: setv(f, "k", 0, 77))(p), "out of range"),
    "empty table": (lambda src, p: _mech(src, lambda f: f.iloc[:0])(p), "empty mechanism"),
}


@pytest.mark.parametrize("case", sorted(MECHANISM_CASES))
def test_bad_mechanism_file(base, tmp_path, capsys, case):
    damage, needle = MECHANISM_CASES[case]
    p = tmp_path / "m.parquet"
    damage(base["mech"], p)
    before = snapshot(tmp_path)
    code, out, err = run_cli(capsys, "verify", base["inst"], p)
    assert code == 2, err
    one_line(err, needle)
    assert snapshot(tmp_path) == before


def test_violating_mechanism_exits_1_with_certificate(base, tmp_path, capsys):
    """Not an input error: a well-formed mechanism that is not private -> exit 1, the FAIL certificate."""
    f = pd.read_parquet(base["mech"])
    f["prob"] = (f["k"] == 0).astype("float64")
    f.loc[f["i"] == 0, "prob"] = (f.loc[f["i"] == 0, "k"] == 1).astype("float64")
    write_parquet(tmp_path / "m.parquet", f)
    code, out, _ = run_cli(capsys, "verify", base["inst"], tmp_path / "m.parquet")
    assert code == 1 and out.startswith("FAIL")


# ============================================================================ CLI options
CLI_CASES: list[tuple[str, list[str], str]] = [
    ("solve --threads above the cores", ["solve", "{inst}", "--out", "{out}", "--threads", "100000"], "cores"),
    ("solve --threads negative", ["solve", "{inst}", "--out", "{out}", "--threads", "-1"], "threads"),
    ("solve --threads not a number", ["solve", "{inst}", "--out", "{out}", "--threads", "many"], "--threads"),
    ("solve --time-limit 0", ["solve", "{inst}", "--out", "{out}", "--time-limit", "0"], "--time-limit"),
    ("solve --time-limit nan", ["solve", "{inst}", "--out", "{out}", "--time-limit", "nan"], "--time-limit"),
    ("solve --max-mix 2", ["solve", "{inst}", "--out", "{out}", "--max-mix", "2"], "--max-mix"),
    ("solve --epsilon -1", ["solve", "{inst}", "--out", "{out}", "--epsilon", "-1"], "--epsilon"),
    (
        "solve --subsets above N",
        ["solve", "{inst}", "--out", "{out}", "--method", "benders", "--subsets", "13"],
        "n_subsets=13 exceeds",
    ),
    ("solve --subsets 0", ["solve", "{inst}", "--out", "{out}", "--method", "benders", "--subsets", "0"], "n_subsets"),
    ("solve --method unknown", ["solve", "{inst}", "--out", "{out}", "--method", "magic"], "--method"),
    ("solve unknown option", ["solve", "{inst}", "--out", "{out}", "--frobnicate"], "unrecognized"),
    ("solve no --out", ["solve", "{inst}"], "--out"),
    ("solve missing instance dir", ["solve", "{tmp}/nope", "--out", "{out}"], "no such instance"),
    ("solve --out is a file", ["solve", "{inst}", "--out", "{file}"], "not a directory"),
    (
        "export --n-outputs above N",
        ["export", "--dataset", "grid", "--rows", "5", "--cols", "6", "--n-outputs", "31", "--out", "{out}"],
        "n_outputs=31 exceeds",
    ),
    (
        "export --n-outputs 0",
        ["export", "--dataset", "grid", "--rows", "5", "--cols", "6", "--n-outputs", "0", "--out", "{out}"],
        "n_outputs",
    ),
    ("export --rows -1", ["export", "--dataset", "grid", "--rows", "-1", "--out", "{out}"], "rows"),
    (
        "export option of another kind",
        ["export", "--dataset", "grid", "--dim", "3", "--out", "{out}"],
        "does not take --dim",
    ),
    (
        "export synthetic N below K",
        ["export", "--dataset", "synthetic", "--n-records", "10", "--n-outputs", "11", "--out", "{out}"],
        "exceeds",
    ),
    (
        "export --out is a file",
        ["export", "--dataset", "grid", "--rows", "2", "--cols", "2", "--out", "{file}"],
        "{file}",
    ),
    ("run --refresh-from unknown", ["run", "--refresh-from", "bogus"], "--refresh-from"),
    ("run --config missing", ["run", "--config", "{tmp}/nope.toml"], "nope.toml"),
    ("run --config and --from-manifest", ["run", "--config", "{file}", "--from-manifest", "{file}"], "not both"),
    ("run --from-manifest not a manifest", ["run", "--from-manifest", "{json}"], "not an mdp-release run manifest"),
    ("audit with no run dir", ["audit"], "run_dir"),
    ("unknown command", ["publish"], "invalid choice"),
]


@pytest.mark.parametrize("case", [c[0] for c in CLI_CASES])
def test_bad_cli_option(base, tmp_path, capsys, case):
    _, argv, needle = next(c for c in CLI_CASES if c[0] == case)
    (tmp_path / "file").write_text("x")
    (tmp_path / "m.json").write_text("{}")
    fill = {
        "inst": base["inst"],
        "out": tmp_path / "out",
        "tmp": tmp_path,
        "file": tmp_path / "file",
        "json": tmp_path / "m.json",
    }
    argv = [a.format(**fill) for a in argv]
    before = snapshot(tmp_path)
    code, _, err = run_cli(capsys, *argv)
    assert code == 2, err
    one_line(err, needle.format(**fill))
    assert snapshot(tmp_path) == before


# ============================================================================ TOML configs
TOML_CASES: dict[str, tuple[str, str]] = {
    "not TOML": ("store = [unclosed", "toml"),
    "unknown top-level key": ("storage = 'x'", "storage"),
    "unknown section key": ("[privacy]\nepsilonn = 1.0", "epsilonn"),
    "epsilon a string": ("[privacy]\nepsilon = 'ten'", "privacy.epsilon"),
    "epsilon negative": ("[privacy]\nepsilon = -1.0", "privacy.epsilon"),
    "eta zero": ("[privacy]\neta = 0.0", "privacy.eta"),
    "unknown dataset kind": ("[dataset]\nkind = 'atlas'", "dataset.kind"),
    "unknown dataset parameter": ("[dataset]\nkind = 'grid'\nparams = { bogus = 1 }", "bogus"),
    "subsets 0": ("[partition]\nsubsets = 0", "partition.subsets"),
    "unknown partitioner": ("[partition]\nmethod = 'metis'", "partition.method"),
    "unknown solve method": ("[solve]\nmethod = 'magic'", "solve.method"),
    "time_limit negative": ("[solve]\ntime_limit = -1.0", "solve.time_limit"),
    "max_mix above 1": ("[solve]\nmax_mix = 2.0", "solve.max_mix"),
    "n_individuals 0": ("[release]\nn_individuals = 0", "release.n_individuals"),
    "eps_counts 0": ("[release]\neps_counts = 0.0", "release.eps_counts"),
    "unknown baseline": ("[evaluate]\nbaselines = ['magic']", "evaluate.baselines"),
    "eps_factors negative": ("[evaluate]\neps_factors = [-1.0]", "evaluate.eps_factors"),
    "release seed (removed)": ("[release]\nseed = 0", "no longer accepted"),
    "store at the filesystem root": ("store = '/'", "refusing the store root /"),
    "store at /etc": ("store = '/etc/mdp'", "refusing the store root"),
    "DP prior without microdata": ("[release]\nsimulate = true\nprior = 'dp'", "set microdata"),
    "neither microdata nor simulate": ("[release]\neps_counts = 1.0", "simulate"),
    "unknown prior": ("[release]\nprior = 'magic'", "prior must be"),
    "n_individuals with microdata": ("[release]\nmicrodata = 'p.csv'\nn_individuals = 5", "n_individuals"),
    "eps_prior 0": ("[release]\neps_prior = 0.0", "release.eps_prior"),
    "max_total_epsilon negative": ("[release]\nmax_total_epsilon = -1.0", "release.max_total_epsilon"),
}


@pytest.mark.parametrize("case", sorted(TOML_CASES))
def test_bad_toml_config(tmp_path, capsys, case, monkeypatch):
    body, needle = TOML_CASES[case]
    store = tmp_path / "store"
    text = body if body.startswith("store") else f"store = '{store}'\n{body}"
    if "[release]" not in text:  # a config file says what it releases: the demo's simulated people here
        text += "\n[release]\nsimulate = true\n"
    (tmp_path / "c.toml").write_text(text)
    import flows.run

    monkeypatch.setattr(os, "environ", os.environ.copy())  # `run` sets Prefect defaults in os.environ: undo them
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr(flows.run, "STATE_FILE", tmp_path / "no-server.json")  # never pick up a local server
    before = snapshot(tmp_path)
    code, _, err = run_cli(capsys, "run", "--config", tmp_path / "c.toml")
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("mdp-release run:")]
    one_line("\n".join(lines), needle)
    assert snapshot(tmp_path) == before and not store.exists()


# ============================================================================ points CSVs
POINTS_CASES: dict[str, tuple[bytes | None, list[str], str]] = {
    "empty file": (b"", [], "cannot read"),
    "NaN coordinate": (b"lat,lon\n41.9,\n41.91,12.51\n", [], "NaN"),
    "latitude out of range": (b"lat,lon\n141.9,12.5\n41.91,12.51\n", [], "latitude"),
    "negative weight": (b"lat,lon,weight\n41.9,12.5,-1\n41.91,12.51,1\n", [], "negative"),
    "text weight": (b"lat,lon,weight\n41.9,12.5,abc\n41.91,12.51,1\n", [], "weight"),
    "zero weights": (b"lat,lon,weight\n41.9,12.5,0\n41.91,12.51,0\n", [], "zero"),
    "duplicate ids": (b"id,lat,lon\n1,41.9,12.5\n1,41.91,12.51\n", [], "duplicate id"),
    "no coordinates": (b"name\nfoo\nbar\n", [], "no lat/lon"),
    "binary garbage": (bytes(range(256)) * 2, [], "cannot read"),
    "infinite vector coordinate": (b"x0,x1\n0,0\n1,inf\n", [], "x1"),
    "missing file": (None, [], "no such file"),
    "n_outputs above N": (b"lat,lon\n41.9,12.5\n41.91,12.51\n41.92,12.52\n", ["--n-outputs", "4"], "exceeds"),
    "outputs file without lat/lon": (b"lat,lon\n41.9,12.5\n41.91,12.51\n", ["--outputs", "{bad}"], "lat and lon"),
    "incomplete costs file": (b"lat,lon\n41.9,12.5\n41.91,12.51\n", ["--costs", "{costs}"], "every record x output"),
}


@pytest.mark.parametrize("case", sorted(POINTS_CASES))
def test_bad_points_csv(tmp_path, capsys, case):
    content, extra, needle = POINTS_CASES[case]
    src = tmp_path / "in"
    src.mkdir()
    path = src / "p.csv"
    if content is not None:
        path.write_bytes(content)
    (src / "bad.csv").write_text("name\nfoo\n")
    (src / "costs.csv").write_text("record_id,output_id,cost\n0,0,1\n")
    extra = [a.format(bad=src / "bad.csv", costs=src / "costs.csv") for a in extra]
    before = snapshot(tmp_path)
    code, _, err = run_cli(
        capsys,
        "export",
        "--dataset",
        "points",
        "--path",
        path,
        "--eta",
        "2",
        "--epsilon",
        "1",
        *extra,
        "--out",
        tmp_path / "out",
    )
    assert code == 2, err
    one_line(err, needle)
    assert snapshot(tmp_path) == before


def test_the_table_has_at_least_60_cases():
    n = len(INSTANCE_CASES) + len(MECHANISM_CASES) + len(CLI_CASES) + len(TOML_CASES) + len(POINTS_CASES)
    assert n >= 60, n


# ============================================================================ flow runs (slow)
FLOW_CONFIG = """
store = "{store}"
[dataset]
{dataset}
[privacy]
epsilon = 10.0
eta = 2.0
[partition]
subsets = 2
[solve]
method = "{method}"
{solve_extra}
[release]
{release}
[evaluate]
baselines = ["exp"]
eps_factors = [1.0]
"""


def flow_cmd(server, tmp_path: Path, store: Path, *extra: str, debug: bool = False, **cfg) -> tuple[list[str], dict]:
    values = {"store": store, "rows": 4, "cols": 5, "k": 8, "method": "lp", "solve_extra": ""}
    values |= {"release": "simulate = true\nn_individuals = 300"} | cfg
    values.setdefault(
        "dataset",
        'kind = "grid"\nparams = {{ rows = {rows}, cols = {cols}, n_outputs = {k}, seed = 1 }}'.format(**values),
    )
    path = tmp_path / f"cfg-{time.monotonic_ns()}.toml"
    path.write_text(FLOW_CONFIG.format(**values))
    env = server_env(server, tmp_path)
    args = [sys.executable, "-m", "flows.cli", *(["--debug"] if debug else []), "run", "--config", str(path), *extra]
    return args, env


def run_flow(server, tmp_path: Path, store: Path, *extra: str, **cfg) -> subprocess.CompletedProcess:
    args, env = flow_cmd(server, tmp_path, store, *extra, **cfg)
    return run_command(args, tmp_path, env)


def latest_manifest(store: Path) -> dict:
    ms = sorted(
        (p for p in (store / "runs").glob("*/manifest.json") if p.parent.name != "latest"),
        key=lambda p: p.stat().st_mtime_ns,
    )
    return json.loads(ms[-1].read_text())


def error_lines(stderr: str) -> list[str]:
    """stderr minus Prefect's INFO / WARNING log lines and the run banner."""
    return [
        ln
        for ln in stderr.splitlines()
        if ln.strip() and " | INFO " not in ln and " | WARNING " not in ln and not ln.startswith("mdp-release run:")
    ]


def store_leftovers(store: Path) -> list[str]:
    """What a failed run left that a rerun cannot reuse: empty / temp object folders, pickled exceptions."""
    bad = []
    for p in (store / "objects").glob("*") if (store / "objects").exists() else []:
        if not any(p.iterdir()):
            bad.append(f"empty {p.name}/")
        bad += [f"temp {q.name}" for q in p.iterdir() if ".tmp-" in q.name]
    for sub in ("keys", "results"):
        for q in (store / "prefect" / sub).glob("*") if (store / "prefect" / sub).exists() else []:
            if len(q.name) != 64:  # stage records are named by their 64-hex cache key; others: failures
                bad.append(f"prefect/{sub}/{q.name}")
    published = [
        q.name
        for q in (store / "runs").glob("*")
        if (store / "runs").exists() and not q.name.endswith("-failed") and q.name != "latest"
    ]
    return bad + [f"published {n}" for n in published]


IN_FLOW_ERRORS = {
    # name: (config overrides, exit code, needle) -- the cases of issue 11, finding 6
    "rows -1": ({"rows": -1}, 2, "rows"),
    "rows a string": ({"rows": '"5"'}, 2, "rows"),
    "n_outputs 0": ({"k": 0}, 2, "n_outputs"),
    "missing points file": ({"dataset": 'kind = "points"\nparams = { path = "missing.csv" }'}, 2, "missing.csv"),
    "refused release (max_mix tiny)": ({"solve_extra": "max_mix = 1e-12"}, 1, "max_mix"),
    "solver failure (time limit)": ({"rows": 9, "cols": 10, "k": 60, "solve_extra": "time_limit = 0.0001"}, 1, ""),
}


@pytest.mark.slow
@pytest.mark.flow
@pytest.mark.parametrize("case", sorted(IN_FLOW_ERRORS))
def test_issue11_finding6_errors_inside_the_flow_are_one_line(prefect_server, tmp_path, case):
    cfg, code, needle = IN_FLOW_ERRORS[case]
    store = tmp_path / "store"
    proc = run_flow(prefect_server, tmp_path, store, **cfg)
    assert proc.returncode == code, proc.stderr[-3000:]
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("mdp-release: error: "), proc.stderr[-3000:]
    assert needle in lines[0] and "Traceback" not in proc.stderr
    assert store_leftovers(store) == []


MICRODATA_ERRORS = {
    # name: (file content or None for a missing file, needle) -- the agency's table, read inside the flow
    "missing file": (None, "the [release] microdata file does not exist"),  # its path: never (issue 49)
    "individual far from every record": (b"lat,lon\n41.6645,12.2460\n60.0,25.0\n", "some individual(s) lie farther"),
    "NaN coordinate": (b"lat,lon\n41.6645,12.2460\n,12.2460\n", "NaN"),
    "empty table": (b"lat,lon\n", "has no rows"),
    "no usable column": (b"name\nann\n", "no usable columns"),
    "unknown record id": (b"record\n0\n999\n", "not in the instance"),
}


@pytest.mark.slow
@pytest.mark.flow
@pytest.mark.parametrize("case", sorted(MICRODATA_ERRORS))
def test_bad_microdata_in_the_flow_is_one_line_and_publishes_nothing(prefect_server, tmp_path, case):
    content, needle = MICRODATA_ERRORS[case]
    if content is not None:
        (tmp_path / "people.csv").write_bytes(content)
    store = tmp_path / "store"
    proc = run_flow(
        prefect_server,
        tmp_path,
        store,
        release='microdata = "people.csv"\npopulation = "test-people"\nmax_total_epsilon = 100.0',
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("mdp-release: error: "), proc.stderr[-3000:]
    assert needle in lines[0] and "Traceback" not in proc.stderr
    assert "solve" not in {p.name for p in (store / "objects").glob("*")}  # refused before the solve
    assert store_leftovers(store) == []


@pytest.mark.slow
@pytest.mark.flow
def test_store_path_is_a_file_and_debug_traceback(prefect_server, tmp_path):
    (tmp_path / "store").write_text("not a folder")
    proc = run_flow(prefect_server, tmp_path, tmp_path / "store")
    assert proc.returncode == 2 and len(error_lines(proc.stderr)) == 1, proc.stderr[-3000:]
    args, env = flow_cmd(prefect_server, tmp_path, tmp_path / "s2", debug=True, rows=-1)  # --debug: the traceback too
    dbg = run_command(args, tmp_path, env)
    assert (
        dbg.returncode == 2
        and "Traceback" in dbg.stderr
        and sum(ln.startswith("mdp-release: error:") for ln in dbg.stderr.splitlines()) == 1
    )


def _tamper_solve(store: Path, manifest: dict) -> None:
    """Replace the solve object's mechanism by a deterministic one and update ref.json to match."""
    from mdp_core.problem.io import _long, write_table
    from mdp_core.runtime.files import read_json

    obj = store / manifest["stages"]["solve"]["artifact"]
    n, k = read_json(obj / "solve.json")["n_records"], read_json(obj / "solve.json")["n_outputs"]
    z = np.eye(k)[np.arange(n) % k]
    write_table(obj / "mechanism.parquet", _long(z) | {"prob": z.ravel()})
    ref = json.loads((obj / "ref.json").read_text())
    ref["files"]["mechanism.parquet"] = file_sha256(obj / "mechanism.parquet")
    (obj / "ref.json").write_text(json.dumps(ref))


@pytest.mark.slow
@pytest.mark.flow
def test_issue11_findings_1_and_5_in_the_flow(prefect_server, tmp_path):
    """(5) corrupt / missing Prefect results and key records: the next run heals them (warning, exit 0);
    (1) a tampered solve object (hash in ref.json updated): the next run refuses to publish, one line."""
    store = tmp_path / "store"
    first = run_flow(prefect_server, tmp_path, store)
    assert first.returncode == 0, first.stderr[-3000:]
    m1 = latest_manifest(store)

    assert any(
        t["name"].startswith("publish-") and t["state_type"] == "COMPLETED"
        for t in api_post(prefect_server, "/task_runs/filter", {"flow_runs": {"id": {"any_": [m1["flow_run_id"]]}}})
    )  # publication is its own Prefect task, "publish"
    results = store / "prefect" / "results"
    keys = store / "prefect" / "keys"
    g, p = m1["stages"]["graph"]["cache_key"], m1["stages"]["partition"]["cache_key"]
    e = m1["stages"]["export"]["cache_key"]
    (results / g).write_bytes(b"\x80garbage")  # UnpicklingError / binascii.Error before
    (results / p).unlink()  # "Path does not exist" before
    (keys / e).write_text("{truncated")
    healed = run_flow(prefect_server, tmp_path, store, "--json")
    assert healed.returncode == 0, healed.stderr[-3000:]
    assert "dropped it" in healed.stderr and "Traceback" not in healed.stderr
    m2 = json.loads(healed.stdout)  # this run's manifest (the same bytes as m1's: then nothing new is published)
    assert m2["released_files"] == m1["released_files"] | {
        k: v for k, v in m2["released_files"].items() if k.endswith(".md") or k in ("evaluation.parquet", "solve.json")
    }
    assert all(m2["stages"][s]["cache_hit"] for s in ("ingest", "graph", "partition", "export"))

    _tamper_solve(store, m2)
    before = sorted(p.name for p in (store / "runs").iterdir() if not p.name.endswith("-failed"))
    refused = run_flow(prefect_server, tmp_path, store)
    assert refused.returncode == 1, refused.stderr[-3000:]
    lines = error_lines(refused.stderr)
    # refused before anything is drawn from it (the certificate at the moment of drawing) or at the door
    assert len(lines) == 1 and ("release refused" in lines[0] or "fails its mDP certificate" in lines[0]), lines
    assert sorted(p.name for p in (store / "runs").iterdir() if not p.name.endswith("-failed")) == before


# ---------------------------------------------------------------------------- kill -9 and concurrency
KILL_CFG = {"rows": 9, "cols": 10, "k": 40}
TIMED = {"evaluation.parquet", "trace.parquet"}


def _released_bytes(store: Path, manifest: dict) -> dict[str, bytes | pd.DataFrame]:
    run = Path(manifest["run_dir"]) if "run_dir" in manifest else store / "runs" / manifest["run_name"]
    out: dict[str, bytes | pd.DataFrame] = {}
    for p in sorted(run.rglob("*.parquet")):
        name = str(p.relative_to(run))
        if name in TIMED:
            f = pd.read_parquet(p)
            out[name] = f.drop(columns=[c for c in f.columns if c.endswith("seconds")])
        else:
            out[name] = p.read_bytes()
    return out


def _same_release(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        if isinstance(a[name], pd.DataFrame):
            pd.testing.assert_frame_equal(a[name], b[name])
        else:
            assert a[name] == b[name], name


def _kill_during(server, tmp_path: Path, store: Path, stage: str) -> None:
    """Start a run and kill -9 its whole process group while ``stage`` is writing its output."""
    args, env = flow_cmd(server, tmp_path, store, **KILL_CFG)
    proc = subprocess.Popen(
        args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < 300:
            if list((store / "objects" / stage).glob(".*.tmp-*")):
                break
            assert proc.poll() is None, f"the run ended before {stage} started"
            time.sleep(0.01)
        else:
            pytest.fail(f"{stage} never started")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.slow
@pytest.mark.flow
def test_kill9_resume_at_two_stages_gives_the_clean_release(prefect_server, tmp_path):
    clean = tmp_path / "clean"
    ok = run_flow(prefect_server, tmp_path, clean, **KILL_CFG)
    assert ok.returncode == 0, ok.stderr[-3000:]
    want = _released_bytes(clean, latest_manifest(clean))

    store = tmp_path / "store"
    _kill_during(prefect_server, tmp_path, store, "solve")
    assert list((store / "objects" / "solve").glob(".*.tmp-*"))  # the killed run's leftovers
    _kill_during(prefect_server, tmp_path, store, "evaluate")  # resumes solve .. then dies in evaluate
    assert not list((store / "objects" / "solve").glob(".*.tmp-*"))  # cleaned by the next solve writer
    resumed = run_flow(prefect_server, tmp_path, store, **KILL_CFG)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    m = latest_manifest(store)
    assert m["stages"]["solve"]["cache_hit"] and not m["stages"]["evaluate"]["cache_hit"]
    assert not list((store / "objects").glob("*/.*.tmp-*"))
    # the same release as the clean store's, apart from what each store's own secret draw decides
    drawn = {"microdata.parquet", "aggregates.parquet", "cbdp_error.parquet"}
    got = _released_bytes(store, m)
    _same_release({k: v for k, v in got.items() if k not in drawn}, {k: v for k, v in want.items() if k not in drawn})
    from mdp_core.release.audit import audit_release

    assert audit_release(store / "runs" / m["run_name"]) == []


@pytest.mark.slow
@pytest.mark.flow
def test_two_concurrent_runs(prefect_server, tmp_path):
    """Two identical runs started together on one empty store: both publish the same bytes (one folder
    when they are byte for byte the same, the second run publishing nothing new), neither claims a cache
    hit for work the other did concurrently (finding 7: cache_hit only for outputs finished by another
    run before this run started), the releases audit clean."""
    store = tmp_path / "store"
    procs = []
    for _ in range(2):
        args, env = flow_cmd(prefect_server, tmp_path, store, "--json")
        procs.append(
            subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    manifests = [json.loads(o[0]) for o in outs]
    folders = [p for p in (store / "runs").iterdir() if not p.is_symlink() and p.name != "latest"]
    assert {Path(m["run_dir"]) for m in manifests} == set(folders)
    distinct = {json.dumps(m["released_files"], sort_keys=True) for m in manifests}
    assert len(folders) == len(distinct) or (len(folders) == 2 and len(distinct) == 1)  # both checked at once
    for m in manifests:  # a cache hit only for an output another run had finished before this run started
        for stage, e in m["stages"].items():
            meta = json.loads((store / e["artifact"] / "ref.json").read_text())["meta"]
            earlier = meta["produced_by"] != m["flow_run_id"] and meta["produced_at"] < m["started_at"]
            assert e["cache_hit"] == earlier, (stage, e["cache_hit"], meta, m["started_at"])
    a, b = (_released_bytes(store, m) for m in manifests)
    _same_release(a, b)
    from mdp_core.release.audit import audit_release

    assert all(audit_release(Path(m["run_dir"])) == [] for m in manifests)
