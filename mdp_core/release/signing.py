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
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from mdp_core.errors import InputError

SIGNATURE = "signature.json"
PUBLIC_KEY = "public_key.pem"
SIGNED_FILE = "manifest.json"
FORMAT = "mdp-release-signature"
VERSION = 1
ALGORITHM = "ed25519"
KEY_ENV = "MDP_RELEASE_SIGNING_KEY"
KEY_PATH = ("private", "signing", "ed25519.pem")  # under the store root
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


def _load_private(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except FileNotFoundError:
        raise InputError(f"{path}: no such signing key file") from None
    except (ValueError, TypeError, OSError):
        raise InputError(f"{path}: not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InputError(f"{path}: the signing key is not an Ed25519 key")
    return key


def _write_private_key(path: Path, key: Ed25519PrivateKey) -> None:
    """Create ``path`` 0600 (its folders 0700) exclusively; a concurrent creator's key wins."""
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
    """The agency's signing key (the store's is created 0600 on first use; an env-named one must exist)."""
    path = key_file(store_root)
    if not os.environ.get(KEY_ENV) and not path.exists():
        _write_private_key(path, Ed25519PrivateKey.generate())
    return _load_private(path)


def agency_fingerprint(store_root: str | Path) -> str | None:
    """The fingerprint of the key this store signs with, or None when there is none yet (never creates one)."""
    path = key_file(store_root)
    if not path.is_file():
        return None
    return fingerprint(_load_private(path).public_key())


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
    "load_public_key",
    "pin_fingerprint",
    "sign_release",
    "signing_key",
    "store_of",
    "verify_release",
]
