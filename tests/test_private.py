"""artifacts.private: draws per (population, version), the private folder's permissions, commitments."""

from __future__ import annotations

import os
import stat
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from artifacts.draws import commitment
from artifacts.private import PrivateStore
from artifacts.private_folder import LedgerError, check_population
from mdp_core.errors import InputError, PrivacyError
from tasks.measure import charge_key

V1, V2 = "ab" * 32, "cd" * 32


def test_one_draw_per_population_and_version(tmp_path):
    priv = PrivateStore(tmp_path)
    d, made = priv.draw("rome", V1)
    assert made and commitment(d.secret) == d.commitment
    assert (d.population, d.version, d.index) == ("rome", V1, 0)
    assert priv.draw("rome", V1) == (d, False)
    other_version, made2 = priv.draw("rome", V2)
    other_pop, made3 = priv.draw("milan", V1)
    assert made2 and made3
    assert len({d.commitment, other_version.commitment, other_pop.commitment}) == 3
    assert priv.load(d.commitment) == d
    assert (tmp_path / "private" / "populations" / "rome" / "versions" / V1 / "0").read_text() == d.commitment


def test_new_draw_is_independent_and_becomes_current(tmp_path):
    priv = PrivateStore(tmp_path)
    old, _ = priv.draw("rome", V1)
    new, made = priv.draw("rome", V1, new=True)
    assert made and new.index == 1 and new.commitment != old.commitment
    assert priv.draw("rome", V1) == (new, False)
    assert not np.array_equal(old.rng("perturb").random(8), new.rng("perturb").random(8))
    np.testing.assert_array_equal(new.rng("perturb").random(8), new.rng("perturb").random(8))
    assert not np.array_equal(new.rng("a").random(8), new.rng("b").random(8))
    assert new.tag("x") != old.tag("x") and len(new.tag("x")) == 64
    assert charge_key("counts", new, 1.0) != charge_key("counts", old, 1.0)
    assert charge_key("counts", new, 1.0) == charge_key("counts", new, 1.0)


def test_concurrent_first_runs_agree_on_one_draw(tmp_path):
    priv = PrivateStore(tmp_path)
    with ThreadPoolExecutor(8) as pool:
        draws = list(pool.map(lambda _: priv.draw("rome", V1)[0], range(16)))
    assert len({d.commitment for d in draws}) == 1
    assert len(list((tmp_path / "private" / "draws").glob("*/draw.json"))) == 1  # the losers' secrets removed


def test_measurements_are_kept_once(tmp_path):
    priv = PrivateStore(tmp_path)
    d, _ = priv.draw("rome", V1)
    assert priv.measurement(d, "c0ffee") is None
    assert priv.keep_measurement(d, "c0ffee", [1, 2]) == [1, 2]
    assert priv.keep_measurement(d, "c0ffee", [3, 4]) == [1, 2]  # the first one stays
    assert priv.measurement(d, "c0ffee") == [1, 2]


@pytest.mark.parametrize("bad", ["", "Rome", "../x", "a/b", ".", "..", "-x", "a" * 64, "rome residents", "é"])
def test_population_names_cannot_escape(tmp_path, bad):
    with pytest.raises(InputError, match="population"):
        check_population(bad)
    with pytest.raises(InputError):
        PrivateStore(tmp_path).draw(bad, V1)
    assert set(os.listdir(tmp_path)) <= {"private"}
    assert not (tmp_path / "private" / "populations").exists()


def test_versions_and_commitments_must_be_hex(tmp_path):
    priv = PrivateStore(tmp_path)
    with pytest.raises(InputError, match="hex"):
        priv.draw("rome", "../../etc")
    with pytest.raises(InputError, match="hex"):
        priv.load("../x")
    with pytest.raises(KeyError, match="reproduced only from the store"):
        priv.load("ef" * 32)


def test_altered_draw_record_is_refused(tmp_path):
    priv = PrivateStore(tmp_path)
    d, _ = priv.draw("rome", V1)
    rec = tmp_path / "private" / "draws" / d.commitment / "draw.json"
    rec.write_text(rec.read_text().replace(d.secret.hex(), "00" * 32))
    with pytest.raises(LedgerError, match="does not match its commitment"):
        priv.load(d.commitment)


def _modes(root):
    out = {}
    for folder, dirs, files in os.walk(root):
        for n in dirs + files:
            out[os.path.join(folder, n)] = stat.S_IMODE(os.lstat(os.path.join(folder, n)).st_mode)
    out[str(root)] = stat.S_IMODE(os.lstat(root).st_mode)
    return out


def test_loosened_permissions_are_repaired_on_open(tmp_path):
    priv = PrivateStore(tmp_path)
    d, _ = priv.draw("rome", V1)
    priv.keep_measurement(d, "c0ffee", [1])
    priv.charge("rome", "ab" * 32, 1.0, {}, 5.0, True)
    root = tmp_path / "private"
    for path in _modes(root):
        os.chmod(path, 0o755 if os.path.isdir(path) else 0o644)
    assert set(_modes(root).values()) == {0o755, 0o644}
    PrivateStore(tmp_path)
    modes = _modes(root)
    assert all(m == (0o700 if os.path.isdir(p) else 0o600) for p, m in modes.items()), modes
    assert (root / "store.key").exists() and modes[str(root / "store.key")] == 0o600


def test_symlinks_inside_are_refused(tmp_path):
    priv = PrivateStore(tmp_path)
    priv.draw("rome", V1)
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    (tmp_path / "private" / "draws" / "link.json").symlink_to(outside)
    with pytest.raises(PrivacyError, match="symlink"):
        PrivateStore(tmp_path)


def test_private_folder_as_symlink_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "private").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PrivacyError, match="not a folder"):
        PrivateStore(tmp_path / "store")


def test_special_files_are_refused(tmp_path):
    PrivateStore(tmp_path).draw("rome", V1)
    os.mkfifo(tmp_path / "private" / "fifo")
    with pytest.raises(PrivacyError, match="not a regular file"):
        PrivateStore(tmp_path)
