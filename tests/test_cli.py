"""The mdp-release command line, in-process through flows.cli.main plus one real console-script call."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flows.cli import main
from mdp_core.problem import io
from mdp_core.solvers.lp import solve_lp
from mdp_core.solvers.verify import verify


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """main(argv) -> (exit code, stdout, stderr); argparse errors (SystemExit) included."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str, *needles: str) -> str:
    """stderr holds exactly one error line (no traceback) and it names the problem."""
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def solved(tmp_path_factory) -> tuple[Path, Path]:
    """An instance exported by the CLI and its LP mechanism solved by the CLI: (instance dir, out dir)."""
    base = tmp_path_factory.mktemp("cli")
    inst, out = base / "inst", base / "out"
    assert main([*"export --dataset grid --rows 3 --cols 4 --n-outputs 5 --epsilon 2 --out".split(), str(inst)]) == 0
    assert main(["solve", str(inst), "--method", "lp", "--out", str(out)]) == 0
    return inst, out


# ----------------------------------------------------------------------------- happy paths
def test_export_writes_an_instance(tmp_path, capsys):
    code, out, err = run(
        capsys,
        "export",
        "--dataset",
        "synthetic",
        "--n-records",
        "12",
        "--n-outputs",
        "4",
        "--sigma",
        "1.5",
        "--eta",
        "1.5",
        "--seed",
        "3",
        "--out",
        str(tmp_path / "s"),
    )
    assert code == 0 and "wrote" in out and "N=12, K=4" in out
    inst = io.read_instance(tmp_path / "s")
    assert (inst.n_records, inst.n_outputs, inst.eta) == (12, 4, 1.5)
    assert inst.provenance["seed"] == 3


def test_solve_writes_verified_mechanism_and_solve_json(solved):
    inst_dir, out = solved
    inst = io.read_instance(inst_dir)
    z = io.read_mechanism(out / "mechanism.parquet", inst.n_records, inst.n_outputs)
    assert verify(inst, z).passed
    info = json.loads((out / "solve.json").read_text())
    for key in (
        "method",
        "status",
        "objective",
        "lower_bound",
        "upper_bound",
        "gap",
        "iterations",
        "seconds",
        "solver",
        "options",
        "certificate",
        "mechanism_sha256",
    ):
        assert key in info, key
    assert info["method"] == "lp" and info["status"] == "optimal" and info["certificate"]["passed"]
    assert info["solver"]["name"] == "HiGHS" and info["solver"]["version"]
    assert info["options"]["primal_tolerance"] > 0 and info["options"]["dual_tolerance"] > 0
    assert info["objective"] == pytest.approx(solve_lp(inst).objective, abs=1e-6)
    assert 0 <= info["gap"] <= 1e-6 and info["upper_bound"] == info["objective"]


def test_verify_passes(solved, capsys):
    inst_dir, out = solved
    code, stdout, _ = run(capsys, "verify", str(inst_dir), str(out / "mechanism.parquet"), "--json")
    assert code == 0
    summary, js = stdout.strip().splitlines()
    assert summary.startswith("PASS: eps=2")
    assert json.loads(js)["passed"] is True


def test_verify_fails_with_exit_1(solved, tmp_path, capsys):
    inst_dir, _ = solved
    inst = io.read_instance(inst_dir)
    z = np.zeros((inst.n_records, inst.n_outputs))
    z[:, 0] = 1.0
    z[0] = np.eye(inst.n_outputs)[1]
    bad = tmp_path / "bad.parquet"
    io.write_table(bad, io._long(z) | {"prob": z.ravel()})
    code, stdout, _ = run(capsys, "verify", str(inst_dir), str(bad))
    assert code == 1 and stdout.startswith("FAIL") and "infinite" in stdout


def test_solve_exp_and_epsilon_override(solved, tmp_path, capsys):
    inst_dir, _ = solved
    code, stdout, _ = run(
        capsys, "solve", str(inst_dir), "--method", "exp", "--epsilon", "0.5", "--out", str(tmp_path / "e")
    )
    assert code == 0
    info = json.loads((tmp_path / "e/solve.json").read_text())
    assert info["status"] == "feasible" and info["lower_bound"] is None  # a baseline proves no bound
    assert info["certificate"]["epsilon"] == 0.5
    assert json.loads(stdout.strip().splitlines()[-1])["method"] == "exp"


# ----------------------------------------------------------------------------- bad input: one line, non-zero, nothing written
def test_solve_missing_instance(tmp_path, capsys):
    code, _, err = run(capsys, "solve", str(tmp_path / "nope"), "--out", str(tmp_path / "out"))
    assert code == 2
    one_error(err, "nope", "no such instance directory")
    assert not (tmp_path / "out").exists()


def test_solve_corrupt_instance_writes_nothing(solved, tmp_path, capsys):
    inst_dir, _ = solved
    broken = tmp_path / "broken"
    shutil.copytree(inst_dir, broken)
    p = broken / "costs.parquet"
    p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
    code, _, err = run(capsys, "solve", str(broken), "--out", str(tmp_path / "out"))
    assert code == 2
    one_error(err, "costs.parquet")
    assert not (tmp_path / "out").exists()


def test_solve_out_is_a_file(solved, tmp_path, capsys):
    inst_dir, _ = solved
    (tmp_path / "f").write_text("x")
    code, _, err = run(capsys, "solve", str(inst_dir), "--out", str(tmp_path / "f"))
    assert code == 2
    one_error(err, "not a directory")
    assert (tmp_path / "f").read_text() == "x"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--epsilon", "0"], "--epsilon"),
        (["--epsilon", "nan"], "--epsilon"),
        (["--max-mix", "-0.5"], "--max-mix"),
        (["--max-mix", "2"], "--max-mix"),
        (["--time-limit", "-1"], "--time-limit"),
        (["--method", "magic"], "--method"),
        (["--solver", "pdlp"], "--solver"),
    ],
)
def test_solve_bad_options(solved, tmp_path, capsys, args, needle):
    inst_dir, _ = solved
    code, _, err = run(capsys, "solve", str(inst_dir), "--out", str(tmp_path / "out"), *args)
    assert code == 2
    one_error(err, needle)
    assert not (tmp_path / "out").exists()


def test_solve_negative_threads(solved, tmp_path, capsys):
    inst_dir, _ = solved
    code, _, err = run(capsys, "solve", str(inst_dir), "--out", str(tmp_path / "out"), "--threads", "-1")
    assert code == 2
    one_error(err, "threads")
    assert not (tmp_path / "out").exists()


def test_verify_missing_mechanism(solved, tmp_path, capsys):
    inst_dir, _ = solved
    code, _, err = run(capsys, "verify", str(inst_dir), str(tmp_path / "m.parquet"))
    assert code == 2
    one_error(err, "m.parquet", "no such file")


def test_verify_mechanism_of_another_instance(solved, tmp_path, capsys):
    inst_dir, _ = solved
    pq.write_table(pa.table({"i": [0, 0, 1, 1], "k": [0, 1, 0, 1], "prob": [0.5] * 4}), tmp_path / "m.parquet")
    code, _, err = run(capsys, "verify", str(inst_dir), str(tmp_path / "m.parquet"))
    assert code == 2
    one_error(err, "m.parquet", "N*K")


def test_verify_unreadable_mechanism(solved, tmp_path, capsys):
    inst_dir, _ = solved
    (tmp_path / "m.parquet").write_bytes(b"PAR1 garbage")
    code, _, err = run(capsys, "verify", str(inst_dir), str(tmp_path / "m.parquet"))
    assert code == 2
    one_error(err, "not a readable Parquet file")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--dataset", "grid", "--rows", "0"], "rows"),
        (["--dataset", "grid", "--epsilon", "-1"], "epsilon"),
        (["--dataset", "grid", "--eta", "0"], "eta"),
        (["--dataset", "synthetic", "--rows", "3"], "does not take --rows"),
        (["--dataset", "grid", "--prior", "zipf"], "prior"),
        (["--dataset", "atlantis"], "--dataset"),
        (["--dataset", "grid", "--rows", "two"], "--rows"),
    ],
)
def test_export_bad_input(tmp_path, capsys, args, needle):
    code, _, err = run(capsys, "export", *args, "--out", str(tmp_path / "x"))
    assert code == 2
    one_error(err, needle)
    assert not (tmp_path / "x").exists()


# ----------------------------------------------------------------------------- the real console script
def test_console_script_subprocess(solved, tmp_path):
    exe = shutil.which("mdp-release")
    assert exe, "the mdp-release console script is not installed (pip install -e .)"
    inst_dir, out = solved
    proc = subprocess.run(
        [exe, "solve", str(inst_dir), "--method", "lp", "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("PASS")
    assert (tmp_path / "o/mechanism.parquet").read_bytes() == (out / "mechanism.parquet").read_bytes()


def test_export_out_is_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    code, _, err = run(
        capsys, "export", "--dataset", "grid", "--rows", "2", "--cols", "2", "--out", str(tmp_path / "f")
    )
    assert code == 2
    one_error(err, str(tmp_path / "f"))
    assert (tmp_path / "f").read_text() == "x"


def test_solve_help_groups_options_by_method_with_the_defaults_that_apply(capsys):
    """`solve --help`: one group for the options of every method, one for those several methods share, one
    per method; each default shown is the declared one of the method it names (Benders: 2 subsets)."""
    code, out, _ = run(capsys, "solve", "--help")
    assert code == 0
    text = " ".join(out.split())
    for title in (
        "solver options (every method):",
        "options of several methods:",
        "--method benders: partition + Benders decomposition (Qiu 2024):",
        "--method rowgen: the exact LP by row generation (dense graphs):",
        "--method exp: exponential mechanism: no options",
    ):
        assert title in text, title
    benders = text.split("--method benders:")[1].split("--method exp:")[0]
    assert "--subsets M number of subsets M (default: 2)" in benders and "default: 25" not in text
    assert (
        "colgen: master solves at most (per component) (default: 200); benders: master solves at most (default: 1000)"
        in text
    )
    assert "--time-limit SECONDS seconds for the whole solve (default: none)" in text


def test_solve_option_of_another_method_is_one_error_line(solved, tmp_path, capsys):
    inst_dir, _ = solved
    code, _, err = run(
        capsys, "solve", str(inst_dir), "--method", "exp", "--subsets", "3", "--out", str(tmp_path / "o")
    )
    assert code == 2
    assert one_error(err, "--method exp does not take --subsets") == err.strip()  # before any other output
    assert not (tmp_path / "o").exists()
    code, _, err = run(
        capsys, "solve", str(inst_dir), "--method", "benders", "--subsets", "0", "--out", str(tmp_path / "o")
    )
    assert code == 2
    one_error(err, "--subsets", "n_subsets must be >= 1 and <= 10000, got 0")


def test_solve_heartbeat_says_what_highs_is_doing_during_a_silent_lp(tmp_path, capsys, monkeypatch):
    """A long LP prints no progress line of its own; after SOLVE_HEARTBEAT s of silence `solve` says what
    HiGHS is doing (the full LP of a dense instance: seconds of dual simplex, no rounds to report)."""
    import flows.cli as cli

    monkeypatch.setattr(cli, "SOLVE_HEARTBEAT", 0.2)
    inst = tmp_path / "inst"
    assert main([*"export --dataset synthetic --n-records 120 --n-outputs 20 --out".split(), str(inst)]) == 0
    code, _, err = run(capsys, "solve", str(inst), "--method", "lp", "--out", str(tmp_path / "out"))
    assert code == 0
    beats = [ln for ln in err.splitlines() if ln.startswith("  solve: running, ")]
    assert any("now: lp component 1/1: HiGHS simplex iteration" in ln for ln in beats), err
