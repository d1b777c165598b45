"""Verdicts that agree (issue 49 item 8): ``mdp-release check`` says, with the figure, when the run may refuse
after its solve (:mod:`mdp_core.release.solve_risk`), and a foreign-signed folder planted in a fresh store is a
finding of ``mdp-release store``, never a block for the population's first release
(:func:`mdp_core.release.signing.made_here`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import POPULATION, people_config, people_table, publish_release, run_stages

from artifacts.private import PrivateStore
from artifacts.published import published_heads, unsigned_releases
from artifacts.store import Store
from flows.check import render, run_check
from mdp_core.errors import PrivacyError
from mdp_core.release import audit, signing

GRID = '[dataset]\nkind = "grid"\nparams = { rows = 4, cols = 5, n_outputs = 6, seed = 2 }\n'


def check(tmp_path: Path, epsilon: float, extra: str = "") -> tuple:
    """``check`` of a 4 x 5 grid (records 1 km apart) of simulated people at ``epsilon`` per km."""
    (tmp_path / "r.toml").write_text(
        f'store = "{tmp_path / "store"}"\n{GRID}[privacy]\nepsilon = {epsilon}\neta = 2.0\n{extra}'
        "[release]\nsimulate = true\nn_individuals = 200\n"
    )
    rep = run_check(tmp_path / "r.toml")
    return rep, rep.sections["after_solve"]


def test_check_says_the_run_may_refuse_deterministic_rows_and_the_run_does(tmp_path):
    """eps 60 / km on records 1 km apart: eps x spacing 60 >= ln(D / (1 - D)) = 27.6; the run's solve releases
    each record as itself and the run refuses, as check said it may."""
    rep, risk = check(tmp_path, 60.0)
    assert risk["deterministic_records"] == 20 and risk["largest_eps_spacing"] == pytest.approx(60.0)
    assert "warning: the run may refuse after its solve: 20 record(s)" in render(rep)
    with pytest.raises(PrivacyError, match="deterministic"):
        run_stages(tmp_path / "store", _config(tmp_path / "store", 60.0))


def test_check_says_nothing_where_the_run_does_not_refuse(tmp_path):
    rep, risk = check(tmp_path, 3.0)
    assert risk["deterministic_records"] == 0 and risk["repair_estimate"] < risk["max_mix"]
    assert rep.accepted and "may refuse" not in render(rep)
    refs = run_stages(tmp_path / "store", _config(tmp_path / "store", 3.0))
    assert (
        audit.audit_release(publish_release(Store(tmp_path / "store"), refs, cfg=_config(tmp_path / "store", 3.0)))
        == []
    )


def test_check_states_a_repair_above_max_mix_with_its_figure(tmp_path):
    """eps 1e-3 / km on records 1 km apart and max_mix 1e-6: one primal tolerance (1e-9) of residual at the
    shortest edge needs t = 1e-9 / (1e-9 + expm1(1e-3) / 6) = 6e-6 of uniform noise, above max_mix."""
    rep, risk = check(tmp_path, 1e-3, "[solve]\nmax_mix = 1e-6\n")
    assert risk["repair_estimate"] == pytest.approx(1e-9 / (1e-9 + 1.0005e-3 / 6), rel=1e-3)
    assert "needs a repair of 6e-06 > max_mix 1e-06" in render(rep)


def _config(root: Path, epsilon: float):
    from flows.config import parse_config

    return parse_config(
        {
            "store": str(root),
            "dataset": {"kind": "grid", "params": {"rows": 4, "cols": 5, "n_outputs": 6, "seed": 2}},
            "privacy": {"epsilon": epsilon, "eta": 2.0},
            "partition": {"subsets": 2},
            "release": {"simulate": True, "n_individuals": 200},
            "evaluate": {"eps_factors": [1.0], "baselines": ["exp"]},
        }
    )


def plant(store: Path, name: str = "planted", artifact: str = "objects/measure/forged") -> Path:
    """A folder in ``store``'s runs/ committing the population to ledger head 3, signed by a key of its own."""
    folder = store / "runs" / name
    folder.mkdir(parents=True)
    ledger = {"population": POPULATION, "ledger_seq": 3, "ledger_head": "ab" * 32}
    manifest = {"privacy": {"ledger": ledger}, "stages": {"measure": {"artifact": artifact}}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    signing.sign_release(folder, signing.Ed25519PrivateKey.generate())
    return folder


def test_a_foreign_folder_in_a_fresh_store_is_a_finding_not_a_block(tmp_path):
    store = tmp_path / "store"
    plant(store)
    assert published_heads(store, POPULATION) == []
    (found,) = unsigned_releases(store)
    assert found[0] == "planted" and "planted?" in found[1]
    assert signing.last_fingerprint(store) is None  # the store has signed nothing: its first key is minted
    table = tmp_path / "people.csv"
    people_table(table)
    refs = run_stages(store, people_config(store, table))  # the population's first release: charged, measured
    assert PrivateStore(store).budget(POPULATION).n_charges >= 1 and refs["measure"] is not None
    assert [name for name, _ in unsigned_releases(store)] == ["planted"]  # still reported


def test_a_folder_made_of_the_stores_objects_still_reveals_a_lost_private_part(tmp_path):
    """The other side: a store whose private part is gone (no key) still counts its own published releases
    (made of its objects), so their ledger heads refuse a rollback to an empty ledger."""
    store = tmp_path / "store"
    (store / "objects" / "measure" / "k1").mkdir(parents=True)
    plant(store, "release-1", "objects/measure/k1")
    assert published_heads(store, POPULATION) == [(3, "ab" * 32)] and unsigned_releases(store) == []
    assert signing.last_fingerprint(store) is not None
    with pytest.raises(PrivacyError, match="key rotate"):
        signing.signing_key(store)
