"""Signed releases: the agency's Ed25519 key signs each release's ``manifest.json``.

The manifest lists the sha256 of every released file (``released_files``), so a signature over the
manifest's exact bytes covers the whole release. Beside ``manifest.json`` a release folder holds:

  public_key.pem   the signer's Ed25519 public key (SubjectPublicKeyInfo PEM)
  signature.json   {"format": "mdp-release-signature", "version": 1, "algorithm": "ed25519",
                    "key_fingerprint": sha256 hex of the 32 raw public-key bytes,
                    "signed_file": "manifest.json", "signed_sha256": sha256 hex of its bytes,
                    "signature": base64 of the 64-byte Ed25519 signature of those bytes}

A valid signature only says *someone holding that key* signed the release: anyone can make a key and
re-sign a forged release. What makes it the agency's release is that the key's fingerprint equals the
one the agency publishes -- ``mdp-release audit --public-key FILE | --fingerprint HEX`` pins it (or the
audit, run inside the agency's store, compares with the store's own key).

The key: ``<store>/private/signing/ed25519.pem`` (PKCS#8 PEM, unencrypted; file 0600, folders 0700,
created on first use), or the PEM file named by the environment variable ``MDP_RELEASE_SIGNING_KEY``.
Ed25519 (RFC 8032) via ``cryptography``'s public API: signatures are not ours to hand-write.

**Refusals.** A key file that is not a regular file (a symlink, a FIFO, a device, a folder), is not owned
by the user, or has any group / other permission bit is refused before it is opened (``os.lstat``; then
opened ``O_NOFOLLOW | O_NONBLOCK`` and checked again on the descriptor: a FIFO is never waited on). A store
that has published signed releases never mints a new key silently: when its key is missing, signing is
refused until an operator records a rotation (:func:`rotate_key`, ``mdp-release key rotate --by WHO --why
TEXT``), which mints the new key, moves an old one aside (``private/signing/retired/``) and appends who,
when, why and the old and new fingerprints to ``<store>/keys/rotations.json`` (public, 0644: auditors read
which keys the store has signed with, :func:`recorded_fingerprints`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from mdp_core.errors import InputError, PrivacyError
from mdp_core.runtime.files import write_json

SIGNATURE = "signature.json"
PUBLIC_KEY = "public_key.pem"
SIGNED_FILE = "manifest.json"
FORMAT = "mdp-release-signature"
VERSION = 1
ALGORITHM = "ed25519"
KEY_ENV = "MDP_RELEASE_SIGNING_KEY"
KEY_PATH = ("private", "signing", "ed25519.pem")  # under the store root
ROTATIONS = ("keys", "rotations.json")  # under the store root: the recorded key rotations (public)
ROTATIONS_FORMAT = "mdp-release-key-rotations"
ROTATE_HINT = "mdp-release key rotate --store {store} --by WHO --why TEXT"
SIGNATURE_KEYS = frozenset(
    {"format", "version", "algorithm", "key_fingerprint", "signed_file", "signed_sha256", "signature"}
)
HEX64 = re.compile(r"[0-9a-f]{64}")


# ----------------------------------------------------------------------------- keys
def fingerprint(key: Ed25519PublicKey) -> str:
    """sha256 hex of the key's 32 raw bytes (what the agency publishes, and what a pin compares)."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_public_key(pem: bytes) -> Ed25519PublicKey:
    """An Ed25519 public key from PEM bytes (InputError for anything else)."""
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError):
        raise InputError("not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise InputError("the public key is not an Ed25519 key")
    return key


def pin_fingerprint(pin: str | bytes) -> str:
    """A pin as a fingerprint: ``bytes`` = a PEM public key, ``str`` = its 64-hex fingerprint."""
    if isinstance(pin, bytes):
        return fingerprint(load_public_key(pin))
    value = pin.strip().lower()
    if not HEX64.fullmatch(value):
        raise InputError("a key fingerprint is 64 hex digits (sha256 of the raw Ed25519 public key)")
    return value


def _key_file_problem(st: os.stat_result) -> str | None:
    """Why a key file with this ``lstat`` may not be used (None: it may)."""
    if stat.S_ISLNK(st.st_mode):
        return "a symlink (name the key file itself)"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a FIFO, a device, a socket or a folder)"
    if st.st_uid != os.getuid():
        return f"owned by uid {st.st_uid}, not by this user"
    if stat.S_IMODE(st.st_mode) & 0o077:
        return f"mode {stat.S_IMODE(st.st_mode):04o}: others may read or change it (chmod 600 it)"
    return None


def _read_key_file(path: Path) -> bytes:
    """The bytes of the key file ``path``, refused (InputError) before it is opened unless it is a regular
    file of this user with no group / other permission bit (``os.lstat``), and checked again on the
    descriptor (opened ``O_NOFOLLOW | O_NONBLOCK``: a file swapped in between is refused, a FIFO never
    waited on)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such signing key file") from None
    except OSError as exc:
        raise InputError(f"{path}: the signing key cannot be read ({exc.strerror or type(exc).__name__})") from None
    problem = _key_file_problem(st)
    if problem is not None:
        raise InputError(f"{path}: signing key refused: {problem}")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise InputError(f"{path}: the signing key cannot be read ({exc.strerror or type(exc).__name__})") from None
    with os.fdopen(fd, "rb") as fh:
        now = os.fstat(fh.fileno())
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or _key_file_problem(now) is not None:
            raise InputError(f"{path}: signing key refused: it changed while opened")
        return fh.read()


def _load_private(path: Path) -> Ed25519PrivateKey:
    data = _read_key_file(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise InputError(f"{path}: not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InputError(f"{path}: the signing key is not an Ed25519 key")
    return key


def _write_private_key(path: Path, key: Ed25519PrivateKey) -> None:
    """Create ``path`` 0600 (its folders 0700, the store root as needed) exclusively; a concurrent creator's
    key wins."""
    path.parent.parent.parent.mkdir(parents=True, exist_ok=True)
    for folder in (path.parent.parent, path.parent):
        folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd, tmp = tempfile.mkstemp(prefix=".ed25519.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, pem)
        os.fsync(fd)
        os.close(fd)
        try:
            os.link(tmp, path)  # exclusive: never replaces an existing key
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)


def key_file(store_root: str | Path) -> Path:
    """Where the agency key is read from: ``$MDP_RELEASE_SIGNING_KEY`` if set, else the store's own."""
    env = os.environ.get(KEY_ENV)
    return Path(env) if env else Path(store_root).joinpath(*KEY_PATH)


def signing_key(store_root: str | Path) -> Ed25519PrivateKey:
    """The agency's signing key (checked: :func:`_read_key_file`). The store's own is created 0600 on first
    use -- but never in a store that has signed releases already (:func:`last_fingerprint`): a missing key
    there is a PrivacyError until a rotation is recorded (:func:`rotate_key`). An env-named one must exist."""
    path = key_file(store_root)
    if not os.environ.get(KEY_ENV) and not os.path.lexists(path):
        signed = last_fingerprint(store_root)
        if signed is not None:
            raise PrivacyError(
                f"the store's signing key {path} is missing, but this store has signed releases with key "
                f"{signed[:16]}..: nothing is signed with a new key silently. Restore the key file from a backup, "
                f"set {KEY_ENV} to the agency's key, or record a new key: " + ROTATE_HINT.format(store=Path(store_root))
            )
        _write_private_key(path, Ed25519PrivateKey.generate())
    return _load_private(path)


def agency_fingerprint(store_root: str | Path) -> str | None:
    """The fingerprint of the key this store signs with, or None when there is none yet (never creates one;
    InputError for a key file that is refused)."""
    path = key_file(store_root)
    if not os.path.lexists(path):
        return None
    return fingerprint(_load_private(path).public_key())


# ----------------------------------------------------------------------------- rotations
def rotations(store_root: str | Path) -> list[dict[str, Any]]:
    """The recorded key rotations of the store (``<store>/keys/rotations.json``), oldest first; [] when none."""
    path = Path(store_root).joinpath(*ROTATIONS)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise InputError(f"{path}: unreadable JSON") from None
    entries = data.get("rotations") if isinstance(data, dict) else None
    if not isinstance(entries, list) or data.get("format") != ROTATIONS_FORMAT:
        raise InputError(f"{path}: not an mdp-release key rotation record")
    return [e for e in entries if isinstance(e, dict)]


def made_here(store_root: str | Path, folder: str | Path) -> bool:
    """The release folder's manifest names stage outputs (``stages.*.artifact``) and every one of them is an
    object of the store at ``store_root`` (``objects/<stage>/<key>``, kept while a release names it): a release
    this store published. A folder copied or planted into ``runs/`` without the store's objects is not (issue 49:
    such a folder, signed by a key of its own, made a fresh store refuse its first release)."""
    root = Path(store_root).resolve()
    try:
        stages = json.loads(Path(folder, SIGNED_FILE).read_text(encoding="utf-8")).get("stages")
        paths = [entry["artifact"] for entry in stages.values()]
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, KeyError, TypeError):
        return False
    if not paths or not all(isinstance(p, str) and p.startswith("objects/") for p in paths):
        return False
    return all((root / p).resolve().is_relative_to(root / "objects") and (root / p).is_dir() for p in paths)


def last_fingerprint(store_root: str | Path) -> str | None:
    """The key the store signed with last: the newest recorded rotation's new key, else the signer of its
    newest signed release (``runs/*/signature.json`` of a folder :func:`made_here`); None when it has signed
    nothing."""
    recorded = rotations(store_root)
    if recorded:
        return str(recorded[-1].get("new_fingerprint"))
    for sig in sorted(Path(store_root).glob(f"runs/*/{SIGNATURE}"), reverse=True):
        if not made_here(store_root, sig.parent):  # a folder planted in runs/ is not a release of this store
            continue
        try:
            fp = json.loads(sig.read_text(encoding="utf-8")).get("key_fingerprint")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            continue
        if isinstance(fp, str) and HEX64.fullmatch(fp):
            return fp
    return None


def recorded_fingerprints(store_root: str | Path) -> list[str]:
    """Every key the store has signed with, as far as it records: the rotations' old and new keys and the
    current key, oldest first (for an audit of a release signed before a rotation)."""
    out: list[str] = []
    for e in rotations(store_root):
        out += [fp for fp in (e.get("old_fingerprint"), e.get("new_fingerprint")) if isinstance(fp, str)]
    current = agency_fingerprint(store_root)
    out += [current] if current is not None else []
    return list(dict.fromkeys(out))


def retired_fingerprints(store_root: str | Path) -> list[str]:
    """The fingerprints of the store's retired keys (``private/signing/retired/``, kept by :func:`rotate_key`):
    keys the store itself signed with before a rotation. Read from the private part, not from the public
    rotation record, which anyone who can write to the store could plant."""
    folder = Path(store_root).joinpath(*KEY_PATH).parent / "retired"
    if not folder.is_dir():
        return []
    return [fingerprint(_load_private(p).public_key()) for p in sorted(folder.glob("ed25519-*.pem"))]


def rotate_key(store_root: str | Path, by: str, why: str) -> dict[str, Any]:
    """Mint a new store signing key and record it: the old key (if any) moves to
    ``private/signing/retired/``; ``keys/rotations.json`` (0644) gains {at, by, why, old_fingerprint,
    new_fingerprint, old_key: "retired" | "missing" | "none"}. Returns that entry. InputError without
    ``by`` / ``why``, with ``MDP_RELEASE_SIGNING_KEY`` set (that key is the agency's to rotate), or for an
    old key file that is refused (fix or remove it first)."""
    if os.environ.get(KEY_ENV):
        raise InputError(f"{KEY_ENV} names the signing key: replace that file yourself; key rotate mints the store's")
    if not by.strip() or not why.strip():
        raise InputError("a key rotation records who decides and why: give --by WHO and --why TEXT")
    root = Path(store_root)
    path = root.joinpath(*KEY_PATH)
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    old, old_key = last_fingerprint(root), "missing"
    if os.path.lexists(path):
        old, old_key = fingerprint(_load_private(path).public_key()), "retired"
        retired = path.parent / "retired"
        retired.mkdir(mode=0o700, exist_ok=True)
        os.rename(path, retired / f"ed25519-{old[:16]}-{at.replace(':', '')}.pem")
    elif old is None:
        old_key = "none"
    _write_private_key(path, Ed25519PrivateKey.generate())
    entry = {"at": at, "by": by.strip(), "why": why.strip(), "old_fingerprint": old, "old_key": old_key}
    entry["new_fingerprint"] = fingerprint(_load_private(path).public_key())
    record = {"format": ROTATIONS_FORMAT, "version": 1, "rotations": [*rotations(root), entry]}
    os.chmod(write_json(root.joinpath(*ROTATIONS), record), 0o644)
    return entry


# ----------------------------------------------------------------------------- sign / verify
def _write_public(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.write(fd, data)
        os.fchmod(fd, 0o644)
        os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sign_release(folder: str | Path, key: Ed25519PrivateKey) -> dict:
    """Write ``public_key.pem`` and ``signature.json`` (0644) beside the final ``manifest.json`` of
    ``folder``; returns the signature record."""
    d = Path(folder)
    data = (d / SIGNED_FILE).read_bytes()
    record = {
        "format": FORMAT,
        "version": VERSION,
        "algorithm": ALGORITHM,
        "key_fingerprint": fingerprint(key.public_key()),
        "signed_file": SIGNED_FILE,
        "signed_sha256": hashlib.sha256(data).hexdigest(),
        "signature": base64.b64encode(key.sign(data)).decode("ascii"),
    }
    _write_public(d / PUBLIC_KEY, public_pem(key.public_key()))
    _write_public(d / SIGNATURE, (json.dumps(record, sort_keys=True, indent=2) + "\n").encode())
    return record


@dataclass(frozen=True)
class SignatureCheck:
    """What :func:`verify_release` found: ``fingerprint`` of the key in the folder (None if unreadable)
    and ``findings`` (one line each; empty = a valid signature by that key, matching the pin if any)."""

    fingerprint: str | None
    findings: tuple[str, ...]

    @property
    def valid(self) -> bool:
        return not self.findings


def verify_release(folder: str | Path, pin: str | bytes | None = None) -> SignatureCheck:
    """Check ``signature.json`` over ``manifest.json`` with ``public_key.pem``; with ``pin`` (PEM bytes or
    a fingerprint) the key must be the pinned one. Never raises for a bad release."""
    d = Path(folder)
    try:
        record = json.loads((d / SIGNATURE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return SignatureCheck(None, (f"{SIGNATURE}: missing (the release is not signed)",))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return SignatureCheck(None, (f"{SIGNATURE}: unreadable JSON",))
    if not isinstance(record, dict):
        return SignatureCheck(None, (f"{SIGNATURE}: not a JSON object",))
    findings = [f"{SIGNATURE}: key {k} is not a signature field" for k in sorted(set(record) - SIGNATURE_KEYS)]
    findings += [f"{SIGNATURE}: missing key {k}" for k in sorted(SIGNATURE_KEYS - set(record))]
    expect = {"format": FORMAT, "version": VERSION, "algorithm": ALGORITHM, "signed_file": SIGNED_FILE}
    findings += [f"{SIGNATURE}: {k} is not {v!r}" for k, v in expect.items() if record.get(k) != v]
    try:
        key = load_public_key((d / PUBLIC_KEY).read_bytes())
    except FileNotFoundError:
        return SignatureCheck(None, (*findings, f"{PUBLIC_KEY}: missing"))
    except (OSError, InputError) as exc:
        return SignatureCheck(None, (*findings, f"{PUBLIC_KEY}: {exc}"))
    fp = fingerprint(key)
    if record.get("key_fingerprint") != fp:
        findings.append(f"{SIGNATURE}: key_fingerprint is not the fingerprint of {PUBLIC_KEY}")
    try:
        data = (d / SIGNED_FILE).read_bytes()
    except OSError:
        return SignatureCheck(fp, (*findings, f"{SIGNED_FILE}: unreadable"))
    if record.get("signed_sha256") != hashlib.sha256(data).hexdigest():
        findings.append(f"{SIGNATURE}: signed_sha256 is not the sha256 of {SIGNED_FILE} (edited after signing)")
    try:
        signature = base64.b64decode(str(record.get("signature", "")), validate=True)
        key.verify(signature, data)
    except (InvalidSignature, binascii.Error, ValueError):
        findings.append(f"{SIGNATURE}: the signature does not verify over {SIGNED_FILE} with {PUBLIC_KEY}")
    if pin is not None:
        try:
            want = pin_fingerprint(pin)
        except InputError as exc:
            findings.append(f"pinned key: {exc}")
        else:
            if fp != want:
                findings.append(
                    f"{PUBLIC_KEY}: signed by key {fp[:16]}.., not the pinned agency key {want[:16]}.. "
                    "(a valid signature by another key)"
                )
    return SignatureCheck(fp, tuple(findings))


def store_of(run_dir: str | Path) -> Path | None:
    """The store a release folder sits in (``<store>/runs/<run>/``), when its private part exists."""
    d = Path(run_dir).resolve()
    store = d.parent.parent
    return store if d.parent.name == "runs" and (store / "private").is_dir() else None


__all__ = [
    "SIGNATURE",
    "PUBLIC_KEY",
    "SignatureCheck",
    "agency_fingerprint",
    "fingerprint",
    "key_file",
    "last_fingerprint",
    "made_here",
    "load_public_key",
    "pin_fingerprint",
    "recorded_fingerprints",
    "rotate_key",
    "rotations",
    "sign_release",
    "signing_key",
    "store_of",
    "verify_release",
]
