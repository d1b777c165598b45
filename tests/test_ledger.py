"""artifacts.private's ledger (charges, caps, precheck, tamper evidence, new budgets) and ``mdp-release ledger``."""

from __future__ import annotations

import json
import multiprocessing
import shutil
from pathlib import Path

import pytest

from artifacts.ledger import BudgetRefused
from artifacts.private import PrivateStore
from artifacts.private_folder import LedgerError
from artifacts.published import published_heads
from flows.cli import main
from mdp_core.errors import InputError

POP = "rome-residents"


def k(i: int) -> str:
    """A charge key (64 hex)."""
    return f"{i:064x}"


def ledger_dir(root: Path, pop: str = POP) -> Path:
    return root / "private" / "populations" / pop / "ledger"


def snapshot(root: Path) -> dict[str, bytes]:
    base = root / "private"
    return {str(p.relative_to(base)): p.read_bytes() for p in base.rglob("*") if p.is_file() and p.name != ".lock"}


def publish(root: Path, name: str, budget, pop: str = POP) -> None:
    """A published manifest committing to ``budget``'s head (what the flow writes), made of an object of the
    store and signed with the store's key as tasks.publish signs it (an unsigned manifest commits to nothing)."""
    from mdp_core.release import signing

    run = root / "runs" / name
    run.mkdir(parents=True)
    ledger = {"population": pop, "ledger_seq": budget.seq, "ledger_head": budget.head}
    measured = f"objects/measure/{name}"  # the stage output it was made of (signing.made_here)
    (root / measured).mkdir(parents=True)
    stages = {"measure": {"artifact": measured}}
    (run / "manifest.json").write_text(json.dumps({"privacy": {"ledger": ledger}, "stages": stages}))
    signing.sign_release(run, signing.signing_key(root))


# ---------------------------------------------------------------------------------------------- charges
def test_charges_are_idempotent_per_key(tmp_path):
    priv = PrivateStore(tmp_path)
    b, made = priv.charge(POP, k(1), 1.5, {"what": "counts"}, 10.0, True)
    assert made and b.spent == 1.5 and b.cap == 10.0 and b.left == 8.5 and b.n_charges == 1
    again, made = priv.charge(POP, k(1), 1.5, {"what": "counts"}, 10.0, True)
    assert not made and again == b
    b2, made = priv.charge(POP, k(2), 2.0, {}, 10.0, True)
    assert made and b2.spent == 3.5 and b2.n_charges == 2 and b2.seq == b.seq + 1 and b2.head != b.head
    assert [e["kind"] for e in priv.entries(POP)] == ["genesis", "cap", "charge", "charge"]
    assert priv.budget(POP) == b2
    assert priv.populations() == [POP]


def test_charge_refused_above_the_cap_writes_nothing(tmp_path):
    priv = PrivateStore(tmp_path)
    priv.charge(POP, k(1), 4.0, {}, 5.0, True)
    before = snapshot(tmp_path)
    with pytest.raises(BudgetRefused, match="cap 5"):
        priv.charge(POP, k(2), 1.5, {}, 5.0, True)
    assert snapshot(tmp_path) == before
    b, made = priv.charge(POP, k(3), 1.0, {}, 5.0, True)  # exactly at the cap: allowed
    assert made and b.left == pytest.approx(0.0)


def test_the_ledger_composes_exactly(tmp_path):
    """0.1 + 0.2 fits a cap of 0.3 (the float sum 0.30000000000000004 does not), and anything above the cap
    is refused, however small (the old relative slack 1e-12 let 0.3 + 1e-14 through)."""
    priv = PrivateStore(tmp_path)
    priv.charge(POP, k(1), 0.1, {}, 0.3, True)
    assert priv.precheck(POP, {k(2): 0.2}, 0.3, True).cap == 0.3
    b, made = priv.charge(POP, k(2), 0.2, {}, 0.3, True)
    assert made and b.spent == 0.3 and b.left == 0.0 and priv.entries(POP)[-1]["spent"] == 0.3
    with pytest.raises(BudgetRefused):
        priv.precheck(POP, {k(3): 1e-14}, 0.3, True)
    with pytest.raises(BudgetRefused):
        priv.charge(POP, k(3), 1e-14, {}, 0.3, True)
    assert PrivateStore(tmp_path).budget(POP) == b  # the floats written read back to the same exact total


def test_precheck_refuses_and_writes_nothing(tmp_path):
    priv = PrivateStore(tmp_path)
    assert priv.precheck(POP, {k(1): 3.0}, 5.0, True).cap == 5.0
    assert not (tmp_path / "private").exists() or not ledger_dir(tmp_path).exists()  # precheck wrote nothing
    priv.charge(POP, k(1), 3.0, {}, 5.0, True)
    before = snapshot(tmp_path)
    # k(1) already charged costs 0: 3 + 1 + 1 = 5 fits; 3 + 1 + 1.5 does not
    ok = priv.precheck(POP, {k(1): 3.0, k(2): 1.0, k(3): 1.0}, 5.0, True)
    assert ok.spent == 3.0 and ok.left == 2.0
    with pytest.raises(BudgetRefused, match="5.5"):
        priv.precheck(POP, {k(1): 3.0, k(2): 1.0, k(3): 1.5}, 5.0, True)
    with pytest.raises(BudgetRefused, match="5.5"):  # the stored cap is the one checked
        priv.precheck(POP, {k(2): 2.5}, None, True)
    with pytest.raises(BudgetRefused, match="no privacy cap"):
        priv.precheck("milan", {k(9): 0.1}, None, True)
    assert priv.precheck("milan", {k(9): 0.1}, None, False).cap is None
    assert snapshot(tmp_path) == before


def test_cap_rules_first_from_config_then_the_stored_cap_is_the_truth(tmp_path):
    """Issue 52: after ``ledger cap --raise`` the config's old ``max_total_epsilon`` silently won. The stored cap
    is the truth: a config that disagrees (lower or higher) is ignored with a note naming both numbers."""
    priv = PrivateStore(tmp_path)
    with pytest.raises(BudgetRefused, match="no privacy cap"):
        priv.charge(POP, k(1), 1.0, {}, None, True)
    b, _ = priv.charge(POP, k(1), 1.0, {}, 10.0, True)  # the first cap comes from the config
    assert b.cap == 10.0
    b, _ = priv.charge(POP, k(2), 1.0, {}, 10.0, True)  # the same figure: nothing to say
    assert b.cap == 10.0 and b.notes == ()
    for config_cap in (8.0, 20.0):
        b = priv.precheck(POP, {k(3): 1.0}, config_cap, True)
        assert b.cap == 10.0 and len(b.notes) == 1
        assert f"stored cap 10 applies; the config's max_total_epsilon {config_cap:g} is ignored" in b.notes[0]
    with pytest.raises(BudgetRefused, match="cap 10"):
        priv.charge(POP, k(3), 8.5, {}, 20.0, True)  # 2 + 8.5 > 10 although the config says 20
    b, _ = priv.charge(POP, k(3), 1.0, {}, 8.0, True)  # a lower config lowers nothing: 3 spent of 10
    assert b.cap == 10.0 and b.spent == 3.0
    priv.set_cap(POP, 60.0, "officer", "board decision", allow_raise=True)
    b = priv.precheck(POP, {k(4): 30.0}, 10.0, True)  # the scheduled run's old config: the raised cap applies
    assert b.cap == 60.0 and "stored cap 60 applies; the config's max_total_epsilon 10 is ignored" in b.notes[0]
    b, _ = priv.charge(POP, k(4), 30.0, {}, 10.0, True)
    assert b.cap == 60.0 and b.spent == 33.0
    kinds = [(e["kind"], e["cap"]) for e in priv.entries(POP)]
    assert kinds == [("genesis", None), ("cap", 10.0)] + [("charge", 10.0)] * 3 + [("raise", 60.0), ("charge", 60.0)]


def test_set_cap_lower_and_explicit_raise(tmp_path):
    priv = PrivateStore(tmp_path)
    priv.charge(POP, k(1), 3.0, {}, 8.0, True)
    with pytest.raises(BudgetRefused, match="--raise"):
        priv.set_cap(POP, 12.0, "officer", "more releases planned")
    assert priv.budget(POP).cap == 8.0
    b = priv.set_cap(POP, 12.0, "officer", "more releases planned", allow_raise=True)
    assert b.cap == 12.0 and b.spent == 3.0
    b = priv.set_cap(POP, 4.0, "officer", "be careful")
    assert b.cap == 4.0 and b.left == 1.0
    assert priv.set_cap(POP, 4.0, "officer", "same") == b  # no change, nothing recorded
    kinds = [(e["kind"], e["by"], e["cap"]) for e in priv.entries(POP)]
    assert kinds[-2:] == [("raise", "officer", 12.0), ("lower", "officer", 4.0)]
    with pytest.raises(InputError, match="--by"):
        priv.set_cap(POP, 5.0, " ", "x")
    with pytest.raises(InputError):
        priv.set_cap(POP, float("nan"), "a", "b")


# ------------------------------------------------------------------------------------------ concurrency
def _charge_many(root: str, start: int, barrier, results) -> None:
    priv = PrivateStore(root)
    barrier.wait()
    made = 0
    try:
        for i in range(start, start + 12):
            try:
                made += priv.charge(POP, k(i), 1.0, {}, 10.0, True)[1]
            except BudgetRefused:
                pass
    except Exception as exc:  # reported, not a 60 s wait for a dead worker
        results.put(repr(exc))
        return
    results.put(made)


def test_concurrent_charges_of_two_processes_never_exceed_the_cap(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_charge_many, args=(str(tmp_path), s, barrier, results)) for s in (0, 100)]
    for p in procs:
        p.start()
    made = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert all(isinstance(m, int) for m in made), made
    b = PrivateStore(tmp_path).budget(POP)
    assert sum(made) == 10 and b.spent == 10.0 and b.n_charges == 10
    assert [e["seq"] for e in PrivateStore(tmp_path).entries(POP)] == list(range(12))  # genesis, cap, 10 charges


# --------------------------------------------------------------------------------------- tamper evidence
def _three_charges(root: Path) -> PrivateStore:
    priv = PrivateStore(root)
    for i in range(3):
        priv.charge(POP, k(i), 1.0, {}, 10.0, True)
    return priv


def test_an_edited_epsilon_is_refused_then_a_new_budget_works(tmp_path):
    priv = _three_charges(tmp_path)
    publish(tmp_path, "r1", priv.budget(POP))
    path = ledger_dir(tmp_path) / "00000003.json"
    entry = json.loads(path.read_text())
    entry["epsilon"] = 0.001
    path.write_text(json.dumps(entry))
    for call in (lambda: priv.budget(POP), lambda: priv.charge(POP, k(9), 0.1, {}, 10.0, True)):
        with pytest.raises(LedgerError, match="entry 3: its MAC does not verify"):
            call()
    with pytest.raises(LedgerError, match="new-budget"):
        priv.precheck(POP, {k(9): 0.1}, 10.0, True)
    b = priv.start_new_budget(POP, 6.0, "officer", "ledger edited", published_heads(tmp_path, POP))
    assert b.cap == 6.0 and b.spent == 0.0 and b.seq == 1  # the broken chain moved aside, a new one begun
    voids = list((tmp_path / "private" / "populations" / POP).glob("void-*"))
    assert len(voids) == 1 and len(list(voids[0].glob("*.json"))) == 5
    entry = priv.entries(POP)[-1]
    assert entry["kind"] == "new-budget" and entry["voided"]["folder"] == voids[0].name
    priv.check_published(POP, published_heads(tmp_path, POP))
    assert priv.charge(POP, k(0), 1.0, {}, None, True)[1]  # charged again in the new budget


def test_a_forged_entry_without_the_key_is_refused(tmp_path):
    import hashlib

    priv = _three_charges(tmp_path)
    path = ledger_dir(tmp_path) / "00000004.json"
    entry = json.loads(path.read_text())
    entry["epsilon"] = 0.0
    body = {a: v for a, v in entry.items() if a != "mac"}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    entry["mac"] = hashlib.sha256(canon).hexdigest()  # a guess: any MAC without the key
    path.write_text(json.dumps(entry))
    with pytest.raises(LedgerError, match="MAC"):
        priv.budget(POP)


@pytest.mark.parametrize("gone", [1, 2, 3])
def test_a_deleted_entry_is_refused(tmp_path, gone):
    priv = _three_charges(tmp_path)
    (ledger_dir(tmp_path) / f"{gone:08d}.json").unlink()
    with pytest.raises(LedgerError, match=f"entry {gone} is missing"):
        priv.budget(POP)


def test_reordered_entries_are_refused(tmp_path):
    priv = _three_charges(tmp_path)
    a, b = ledger_dir(tmp_path) / "00000003.json", ledger_dir(tmp_path) / "00000004.json"
    data = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(data)
    with pytest.raises(LedgerError, match="does not fit the chain"):
        priv.budget(POP)


def test_a_missing_store_key_is_refused(tmp_path):
    priv = _three_charges(tmp_path)
    (tmp_path / "private" / "store.key").unlink()
    with pytest.raises(LedgerError, match="store.key is missing"):
        priv.budget(POP)


def test_deleting_the_published_last_entry_is_a_rollback(tmp_path):
    priv = _three_charges(tmp_path)
    publish(tmp_path, "r1", priv.budget(POP))
    heads = published_heads(tmp_path, POP)
    priv.check_published(POP, heads)
    (ledger_dir(tmp_path) / "00000004.json").unlink()
    assert priv.budget(POP).spent == 2.0  # the shorter chain verifies by itself...
    with pytest.raises(LedgerError, match=r"1 published ledger head\(s\) are not in the private ledger \(seq 4"):
        priv.check_published(POP, heads)  # ... but the published head says it was rolled back
    b = priv.start_new_budget(POP, 5.0, "officer", "restored an old backup", heads)
    assert b.seq == 4 and b.spent == 0.0  # appended to the (valid) chain
    priv.check_published(POP, heads)
    publish(tmp_path, "r2", priv.charge(POP, k(7), 1.0, {}, None, True)[0])
    priv.check_published(POP, published_heads(tmp_path, POP))


def test_deleting_private_with_published_heads_is_refused_until_a_new_budget(tmp_path):
    priv = _three_charges(tmp_path)
    publish(tmp_path, "r1", priv.budget(POP))
    publish(tmp_path, "old", priv.budget(POP), pop="milan")  # another population: not ours
    (tmp_path / "runs" / "legacy").mkdir()
    (tmp_path / "runs" / "legacy" / "manifest.json").write_text('{"privacy": {}}')  # an older release: ignored
    (tmp_path / "runs" / "broken").mkdir()
    (tmp_path / "runs" / "broken" / "manifest.json").write_text("{not json")
    heads = published_heads(tmp_path, POP)
    assert len(heads) == 1
    shutil.rmtree(tmp_path / "private")
    fresh = PrivateStore(tmp_path)
    assert fresh.budget(POP).seq == -1
    with pytest.raises(LedgerError, match="no private ledger"):
        fresh.check_published(POP, heads)
    fresh.start_new_budget(POP, 5.0, "officer", "private/ lost in a disk failure", heads)
    fresh.check_published(POP, heads)
    assert [e["kind"] for e in fresh.entries(POP)] == ["genesis", "new-budget"]


# ------------------------------------------------------------------------------------------------ CLI
def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["ledger", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_overview_entries_cap_and_new_budget(tmp_path, capsys):
    store = str(tmp_path)
    code, out, _ = run_cli(capsys, "--store", store)
    assert code == 0 and "no population" in out
    priv = _three_charges(tmp_path)
    publish(tmp_path, "r1", priv.budget(POP))
    code, out, err = run_cli(capsys, "--store", store)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith(POP))
    # three charges without a release's detail: three releases, one still published, 7 more of cost 1 fit
    assert line.split() == [POP, "3", "1", "3", "3", "10", "7", "1", "7", "ok"]
    code, out, _ = run_cli(capsys, "--store", store, "--population", POP)
    assert code == 0 and "charge" in out and "spent 3 of cap 10" in out
    code, out, _ = run_cli(capsys, "--store", store, "--population", POP, "--json")
    data = json.loads(out)
    assert code == 0 and len(data["entries"]) == 5 and data["budget"]["left"] == 7.0

    code, _, err = run_cli(
        capsys, "cap", "--store", store, "--population", POP, "--set", "20", "--by", "a", "--why", "b"
    )
    assert code == 2 and "--raise" in err and err.count("\n") == 1
    code, out, err = run_cli(
        capsys, "--store", store, "cap", "--population", POP, "--set", "20", "--by", "a", "--why", "b", "--raise"
    )
    assert code == 0 and "cap 20" in out, err
    code, _, err = run_cli(capsys, "cap", "--store", store, "--set", "20", "--by", "a", "--why", "b")
    assert code == 2 and "--population" in err
    code, _, err = run_cli(
        capsys, "cap", "--store", store, "--population", "../x", "--set", "1", "--by", "a", "--why", "b"
    )
    assert code == 2 and "population" in err

    (ledger_dir(tmp_path) / "00000005.json").unlink()  # roll back the raise (published head is seq 4: still fine)
    (ledger_dir(tmp_path) / "00000004.json").unlink()  # and the published last charge
    code, out, err = run_cli(capsys, "--store", store)
    assert code == 2 and "REFUSED" in out and "new-budget" in err
    code, out, err = run_cli(
        capsys,
        "new-budget",
        "--store",
        store,
        "--population",
        POP,
        "--cap",
        "4",
        "--by",
        "officer",
        "--why",
        "rollback",
    )
    assert code == 0 and "1 published head(s) acknowledged" in out, err
    code, out, err = run_cli(capsys, "--store", store, "--json")
    rows = json.loads(out)
    assert code == 0 and rows[0]["status"] == "ok" and rows[0]["cap"] == 4.0 and rows[0]["spent"] == 0.0, err


def test_cli_store_from_config(tmp_path, capsys):
    store = tmp_path / "store"
    PrivateStore(store).charge(POP, k(1), 1.0, {}, 3.0, True)
    cfg = tmp_path / "release.toml"
    cfg.write_text(f'store = "{store}"\n[release]\nsimulate = true\n')
    code, out, err = run_cli(capsys, "--config", str(cfg))
    assert code == 0 and POP in out, err
    code, _, err = run_cli(capsys, "--config", str(tmp_path / "missing.toml"))
    assert code == 2 and "no such config file" in err


def test_bad_charges_are_input_errors_and_write_nothing(tmp_path):
    priv = PrivateStore(tmp_path)
    for key, eps, detail, cap in [
        ("not-hex", 1.0, {}, 5.0),
        (k(1), -1.0, {}, 5.0),
        (k(1), float("inf"), {}, 5.0),
        (k(1), 1.0, {"x": object()}, 5.0),
        (k(1), 1.0, {}, 0.0),
    ]:
        with pytest.raises(InputError):
            priv.charge(POP, key, eps, detail, cap, True)
    assert not ledger_dir(tmp_path).exists()
