"""The signing key is never used or made silently (issue 39, finding 8, point 3).

A key file that is not a regular file of this user with mode 0600 (a FIFO, a symlink, mode 0666, another
owner) is refused before it is opened -- a FIFO never hangs the run; a store that has published signed
releases refuses to sign when its key is missing, until ``mdp-release key rotate`` records who minted the
new key, when and why (``<store>/keys/rotations.json``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
from pathlib import Path

import pytest
from conftest import OTHER_KEY

from flows.cli import main
from mdp_core.errors import InputError, PrivacyError
from mdp_core.release import signing

# the fixture ``released`` (a published release in its own store, signed by the store's key): tests/conftest.py


def pem_file(path: Path, mode: int) -> Path:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(
        OTHER_KEY.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(mode)
    return path


def error_within(seconds: float, fn, *args) -> BaseException | None:
    """The exception ``fn(*args)`` raises in a thread; fails (not hangs) past ``seconds``."""
    box: dict = {}

    def target() -> None:
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn.__name__} blocked"
    return box.get("error")


@pytest.mark.parametrize("mode", [0o666, 0o644, 0o640, 0o604])
def test_an_env_named_key_others_may_read_is_refused(tmp_path, monkeypatch, mode):
    monkeypatch.setenv(signing.KEY_ENV, str(pem_file(tmp_path / "agency.pem", mode)))
    with pytest.raises(InputError, match=f"mode {mode:04o}: others may read or change it"):
        signing.signing_key(tmp_path / "store")
    (tmp_path / "agency.pem").chmod(0o600)
    assert signing.fingerprint(signing.signing_key(tmp_path / "store").public_key()) == signing.fingerprint(
        OTHER_KEY.public_key()
    )


def test_a_fifo_or_a_symlink_as_the_key_is_refused_at_once(tmp_path, monkeypatch):
    fifo = tmp_path / "key.pem"
    os.mkfifo(fifo, 0o600)
    monkeypatch.setenv(signing.KEY_ENV, str(fifo))
    for fn in (signing.signing_key, signing.agency_fingerprint):
        err = error_within(10, fn, tmp_path / "store")
        assert isinstance(err, InputError) and "not a regular file" in str(err)
    link = tmp_path / "link.pem"
    link.symlink_to(pem_file(tmp_path / "real.pem", 0o600))
    monkeypatch.setenv(signing.KEY_ENV, str(link))
    with pytest.raises(InputError, match="a symlink"):
        signing.signing_key(tmp_path / "store")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_key_of_another_user_is_refused(tmp_path, monkeypatch):
    key = pem_file(tmp_path / "agency.pem", 0o600)
    os.chown(key, 4242, -1)
    monkeypatch.setenv(signing.KEY_ENV, str(key))
    with pytest.raises(InputError, match="owned by uid 4242"):
        signing.signing_key(tmp_path / "store")


def test_a_lost_key_is_a_refusal_until_a_recorded_rotation(released, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(signing.KEY_ENV, raising=False)
    store = tmp_path / "store"
    shutil.copytree(released.parent.parent, store, symlinks=True)
    first = signing.agency_fingerprint(store)
    shutil.rmtree(store / "private" / "signing")
    with pytest.raises(PrivacyError, match="mdp-release key rotate") as info:
        signing.signing_key(store)
    assert first is not None and first[:16] in str(info.value)
    assert not store.joinpath(*signing.KEY_PATH).exists()  # no key was minted

    assert (
        main(["key", "rotate", "--store", str(store), "--by", "officer A", "--why", "key lost in a disk failure"]) == 0
    )
    (entry,) = signing.rotations(store)
    new = signing.fingerprint(signing.signing_key(store).public_key())
    assert entry["by"] == "officer A" and entry["why"] == "key lost in a disk failure" and entry["at"]
    assert entry["old_fingerprint"] == first and entry["new_fingerprint"] == new != first
    assert entry["old_key"] == "missing"
    record = store.joinpath(*signing.ROTATIONS)
    assert stat.S_IMODE(record.stat().st_mode) == 0o644
    assert json.loads(record.read_text())["format"] == signing.ROTATIONS_FORMAT
    assert new in capsys.readouterr().out

    # a rotation of a key that is there retires it (kept, owner only)
    assert main(["key", "rotate", "--store", str(store), "--by", "officer B", "--why", "yearly"]) == 0
    second = signing.rotations(store)[-1]
    assert second["old_fingerprint"] == new and second["old_key"] == "retired"
    (retired,) = store.joinpath(*signing.KEY_PATH).parent.glob("retired/*.pem")
    assert stat.S_IMODE(retired.stat().st_mode) == 0o600
    assert signing.recorded_fingerprints(store) == [first, new, second["new_fingerprint"]]
    assert main(["key", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert second["new_fingerprint"] in out and "why: yearly" in out

    # a lost key again: refused again (the store has signed with the recorded key)
    shutil.rmtree(store / "private" / "signing")
    with pytest.raises(PrivacyError, match=second["new_fingerprint"][:16]):
        signing.signing_key(store)


def test_a_rotation_records_who_and_why(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(signing.KEY_ENV, raising=False)
    assert main(["key", "rotate", "--store", str(tmp_path / "s"), "--by", " ", "--why", "x"]) == 2
    assert "--by WHO and --why TEXT" in capsys.readouterr().err
    monkeypatch.setenv(signing.KEY_ENV, str(pem_file(tmp_path / "agency.pem", 0o600)))
    assert main(["key", "rotate", "--store", str(tmp_path / "s"), "--by", "me", "--why", "x"]) == 2
    assert signing.KEY_ENV in capsys.readouterr().err
    assert not (tmp_path / "s" / "keys").exists()


def test_a_release_signed_before_a_rotation_still_audits_in_its_store(released, tmp_path, monkeypatch):
    """After ``key rotate`` the store's earlier releases were signed by its retired key (kept in the private
    part): the in-store audit accepts them; a planted rotation record does not make another key acceptable."""
    from mdp_core.release.audit import audit_release, check_signature

    monkeypatch.delenv(signing.KEY_ENV, raising=False)
    store = tmp_path / "store"
    shutil.copytree(released.parent.parent, store, symlinks=True)
    run = store / "runs" / released.name
    first = signing.agency_fingerprint(store)
    assert main(["key", "rotate", "--store", str(store), "--by", "officer B", "--why", "yearly"]) == 0
    assert signing.agency_fingerprint(store) != first
    assert check_signature(run) == (first, [])
    assert audit_release(run) == []
    shutil.rmtree(store.joinpath(*signing.KEY_PATH).parent / "retired")  # only a public record of the old key
    signer, findings = check_signature(run)
    assert signer == first and findings
