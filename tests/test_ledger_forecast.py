"""``mdp-release ledger`` warns before the cap: per population, the releases its charges paid for (not the
folders retention left in runs/), what the last one cost, what is left, how many more of that cost fit
(exact arithmetic) and ``low`` once the next one no longer fits; each charge names what and whom it paid for."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from artifacts.private import PrivateStore
from flows.cli import main
from tasks.measure import charge_all, charge_key

POP = "rome-residents"
RADIUS = {"value": 2.0, "unit": "km"}
CAP = 36.99


def month(root: Path, i: int, costs: dict[str, float], cap: float = CAP) -> str:
    """Release ``i`` of one config on month ``i``'s table, charged as the pipeline charges it (the prior
    first, then perturbation and counts: :func:`tasks.measure.charge_all`), published in runs/ with its
    ledger position as the flow's manifest records it. Returns the run folder's name."""
    priv = PrivateStore(root)
    draw, _ = priv.draw(POP, f"{i:064x}")
    params = {"max_total_epsilon": cap, "require_cap": True, "radius": RADIUS, "release_key": "c" * 64}
    keys = {kind: charge_key(kind, draw, i) for kind in costs}
    if "prior" in costs:
        charge_all(priv, draw, params, {keys["prior"]: ("prior", costs["prior"])})
    rest = {keys[k]: (k, eps) for k, eps in costs.items() if k != "prior"}
    charge_all(priv, draw, params, rest)
    at = priv.position(POP, tuple(keys[k] for k in costs if k != "prior"))
    assert at is not None
    name = f"2026-0{i}-01T030000Z-run{i}"
    (root / "runs" / name).mkdir(parents=True)
    ledger = {"population": POP, "ledger_seq": at["seq"], "ledger_head": at["head"]}
    (root / "runs" / name / "manifest.json").write_text(json.dumps({"privacy": {"ledger": ledger}}))
    return name


MONTH = {"prior": 0.5, "perturb": 5.42, "counts": 1.0}  # 6.92 a release


def ledger(capsys, root: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["ledger", "--store", str(root), *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_cap_is_announced_before_it_arrives(tmp_path, capsys):
    runs = [month(tmp_path, i, MONTH) for i in range(1, 5)]
    code, out, err = ledger(capsys, tmp_path)
    assert code == 0, err
    row = next(x for x in out.splitlines() if x.startswith(POP)).split()
    assert row == [POP, "4", "4", "12", "27.68", "36.99", "9.31", "6.92", "1", "ok"]
    assert "1 more release(s) of that cost fit" in out

    runs.append(month(tmp_path, 5, MONTH))
    for gone in runs[:2]:  # retention (keep_releases = 3) deleted the two oldest folders
        shutil.rmtree(tmp_path / "runs" / gone)
    code, out, err = ledger(capsys, tmp_path)
    assert code == 0, err
    row = next(x for x in out.splitlines() if x.startswith(POP)).split()
    # five releases paid for (three still in runs/), 2.39 left, a release costs 6.92: none more fits
    assert row == [POP, "5", "3", "15", "34.6", "36.99", "2.39", "6.92", "0", "low"]
    note = next(x for x in out.splitlines() if x.startswith(f"{POP}: last release"))
    assert f"#5 (run {runs[4]})" in note and "prior 0.5 + perturb 5.42 + counts 1 = 6.92" in note
    assert "LOW" in note and "would be refused" in note

    code, out, _ = ledger(capsys, tmp_path, "--json")
    (data,) = json.loads(out)
    assert (data["releases"], data["published"], data["fits"], data["status"]) == (5, 3, 0, "low")
    assert data["last_cost"] == 6.92 and data["left"] == 2.39
    assert data["last_release"]["runs"] == [runs[4]]
    assert [c["kind"] for c in data["last_release"]["charges"]] == ["prior", "perturb", "counts"]


def test_each_charge_names_what_and_which_release_it_paid_for(tmp_path, capsys):
    runs = [month(tmp_path, i, MONTH) for i in range(1, 3)]
    shutil.rmtree(tmp_path / "runs" / runs[0])
    code, out, err = ledger(capsys, tmp_path, "--population", POP)
    assert code == 0, err
    charges = [ln.split() for ln in out.splitlines() if " charge " in f" {ln} "]
    assert [c[4] for c in charges] == ["prior", "perturb", "counts"] * 2  # seq, date, time, kind, what
    first = [ln for ln in out.splitlines() if " charge " in ln][:3]
    assert all("#1 (release cccccccccccc draw " in ln and ", not in runs/)" in ln for ln in first)
    assert all(f"#2 (run {runs[1]})" in ln for ln in out.splitlines() if " charge " in ln and "#2" in ln)
    assert "6 charge(s) for 2 release(s)" in out and "3 more release(s) of that cost fit" in out
    code, out, _ = ledger(capsys, tmp_path, "--population", POP, "--json")
    data = json.loads(out)
    assert [r["runs"] for r in data["releases"]] == [[], [runs[1]]]
    assert data["forecast"]["fits"] == 3 and data["forecast"]["releases"] == 2


def test_the_forecast_is_exact(tmp_path, capsys):
    """0.1 + 0.2 is a release of 0.3 exactly: 0.6 left under a cap of 0.9 fits two more (in floats,
    0.9 - 0.30000000000000004 divided by it is 1.999...: one)."""
    month(tmp_path, 1, {"perturb": 0.1, "counts": 0.2}, cap=0.9)
    code, out, _ = ledger(capsys, tmp_path, "--json")
    (data,) = json.loads(out)
    assert code == 0 and data["fits"] == 2 and data["status"] == "ok"
    month(tmp_path, 2, {"perturb": 0.1, "counts": 0.2}, cap=0.9)
    month(tmp_path, 3, {"perturb": 0.1, "counts": 0.2}, cap=0.9)
    code, out, _ = ledger(capsys, tmp_path, "--json")
    (data,) = json.loads(out)
    assert (data["fits"], data["status"], data["left"]) == (0, "exhausted", 0.0)


def test_an_abandoned_run_s_prior_charge_is_not_the_cost_of_the_next_release(tmp_path, capsys):
    """Issue 50: a run abandoned after its DP prior's charge keeps that charge (it was measured), but the
    forecast counts how many *whole* releases fit: two of 6.92 and an abandoned 0.5 leave 22.65, three more."""
    for i in (1, 2):
        month(tmp_path, i, MONTH)
    priv = PrivateStore(tmp_path)
    draw, _ = priv.draw(POP, f"{3:064x}")
    params = {"max_total_epsilon": CAP, "require_cap": True, "radius": RADIUS, "release_key": "c" * 64}
    charge_all(priv, draw, params, {charge_key("prior", draw, 3): ("prior", 0.5)})
    code, out, err = ledger(capsys, tmp_path, "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["fits"] == 3 and row["last_cost"] == 6.92, row
    code, out, err = ledger(capsys, tmp_path)
    assert "it stopped before its perturbation; a whole release costs 6.92" in out
    assert "3 more release(s) of that cost fit" in out
