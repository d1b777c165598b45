"""Signed releases (issue 28): the agency's Ed25519 key signs manifest.json at the door; ``mdp-release
audit`` verifies the signature first and, given the agency's key (or inside the agency's store), refuses
a release signed by any other key -- even one whose every other file is consistent.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import OTHER_KEY, claims_of, edit, edit_table, read, rehash

from flows.cli import main
from mdp_core.release import audit, report, signing
from mdp_core.release.plan_hash import figures_sha256

# the fixtures ``released`` (the published release) and ``run`` (a copy to tamper with): tests/conftest.py


def raw_fingerprint(pem: bytes) -> str:
    """The fingerprint derived here: sha256 of the 32 raw key bytes (the last 32 of the DER encoding)."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_public_key(pem)
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def test_round_trip_and_key_file(tmp_path, monkeypatch):
    monkeypatch.delenv(signing.KEY_ENV, raising=False)
    folder = tmp_path / "rel"
    folder.mkdir()
    (folder / "manifest.json").write_text('{"released_files": {}}')
    key = signing.signing_key(tmp_path)  # created on first use
    path = tmp_path.joinpath(*signing.KEY_PATH)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert signing.fingerprint(signing.signing_key(tmp_path).public_key()) == signing.fingerprint(key.public_key())
    record = signing.sign_release(folder, key)
    pem = (folder / signing.PUBLIC_KEY).read_bytes()
    assert record["key_fingerprint"] == raw_fingerprint(pem) == signing.agency_fingerprint(tmp_path)
    assert record["signed_sha256"] == hashlib.sha256((folder / "manifest.json").read_bytes()).hexdigest()
    assert json.loads((folder / signing.SIGNATURE).read_text()) == record
    assert signing.verify_release(folder).valid
    assert signing.verify_release(folder, pem).valid and signing.verify_release(folder, raw_fingerprint(pem)).valid
    other = signing.verify_release(folder, signing.public_pem(OTHER_KEY.public_key()))
    assert not other.valid and "not the pinned agency key" in other.findings[0]
    (folder / "manifest.json").write_text('{"released_files": {"x": "0"}}')
    found = signing.verify_release(folder).findings
    assert any("edited after signing" in f for f in found) and any("does not verify" in f for f in found)


def test_env_named_key_is_used_and_never_created(tmp_path, monkeypatch):
    pem = tmp_path / "agency.pem"
    monkeypatch.setenv(signing.KEY_ENV, str(pem))
    with pytest.raises(signing.InputError):
        signing.signing_key(tmp_path / "store")
    from cryptography.hazmat.primitives import serialization

    pem.write_bytes(
        OTHER_KEY.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    pem.chmod(0o600)  # a key others may read is refused (tests/test_signing_key.py)
    key = signing.signing_key(tmp_path / "store")
    assert signing.fingerprint(key.public_key()) == signing.fingerprint(OTHER_KEY.public_key())
    assert not (tmp_path / "store").exists()


def test_published_release_is_signed_by_the_store_key(released, capsys):
    store = released.parent.parent
    assert (released / signing.SIGNATURE).is_file() and (released / signing.PUBLIC_KEY).is_file()
    assert stat.S_IMODE((released / signing.SIGNATURE).stat().st_mode) == 0o644
    fp = raw_fingerprint((released / signing.PUBLIC_KEY).read_bytes())
    assert fp == signing.agency_fingerprint(store)
    assert audit.audit_release(released) == [] and audit.audit_release(released, public_key=fp) == []
    assert main(["audit", str(released)]) == 0
    assert "compared with this store's own signing key" in capsys.readouterr().out


def test_unsigned_or_tampered_release_is_a_finding_and_the_rest_still_runs(run):
    (run / signing.SIGNATURE).unlink()
    edit(run, "manifest.json", lambda m: m["privacy"].update(counts_epsilon=0.01))
    (run / signing.SIGNATURE).unlink()  # edit() re-signs: an unsigned release here
    found = audit.audit_release(run)
    assert found[0] == "signature.json: missing (the release is not signed)"
    assert any("privacy counts_epsilon 0.01" in f for f in found)  # the other checks ran

    signing.sign_release(run, OTHER_KEY)
    m = read(run, "manifest.json")
    m["privacy"]["counts_epsilon"] = 1.0
    (run / "manifest.json").write_text(json.dumps(m))  # edited after signing
    assert any("edited after signing" in f for f in audit.audit_release(run))


def forge_eps_counts(run: Path, new: float) -> None:
    """Rewrite eps_counts consistently everywhere (aggregates' column and noise scales, provenance, its
    guarantee and ledger, the manifest, the report rendered from its claims) and re-sign with the forger's key."""
    old = read(run, audit.PROVENANCE)["eps_counts"]

    def table(f: pd.DataFrame) -> None:
        from mdp_core.release.intervals import count_intervals, half_width

        f["eps_counts"] = new
        noisy = f["level"] != "total"
        n, level, family = int(f.loc[~noisy, "count"].iloc[0]), float(f["ci_level"].iloc[0]), int(noisy.sum())
        ys = {}
        for i in f.index[noisy]:  # the measurement y the intervals were placed around, recovered from an end
            p, t = int(f.at[i, "count"]), half_width(level, float(f.at[i, "noise_scale"]))
            lo, hi = int(f.at[i, "ci_low"]), int(f.at[i, "ci_high"])
            ys[i] = hi - t if p < hi < n else lo + t if 0 < lo < p else p
        f.loc[noisy, "noise_scale"] = f.loc[noisy, "noise_scale"] * old / new
        for low, high, fam in (("ci_low", "ci_high", 1), ("sim_low", "sim_high", family)):  # re-placed coherently
            for i in f.index[noisy]:
                p, scale = np.array([f.at[i, "count"]], dtype=np.int64), float(f.at[i, "noise_scale"])
                (a,), (b,) = count_intervals(np.array([ys[i]]), p, scale, n, level, fam)
                f.at[i, low], f.at[i, high] = a, b

    edit_table(run, "aggregates.parquet", table)
    prov = read(run, audit.PROVENANCE)
    delta = new - old
    prov["eps_counts"] = new
    g = prov["guarantee"]
    statement_old = f"+ {g['additive_epsilon']:g})"
    g["additive_epsilon"] += delta
    g["statement"] = g["statement"].replace(statement_old, f"+ {g['additive_epsilon']:g})")
    prov["ledger"]["this_release"] += delta
    prov["ledger"]["total_so_far"] += delta
    edit(run, audit.PROVENANCE, lambda p: p.clear() or p.update(prov))

    def manifest(m: dict) -> None:
        m["privacy"].update(counts_epsilon=new, guarantee=prov["guarantee"], ledger=prov["ledger"])
        m["config"]["release"]["eps_counts"] = new
        plan = m["approval"]["plan"]  # the approved plan too, and its hash (the audit recomputes both)
        plan["settings"]["eps_counts"] = plan["charges"]["counts"] = new
        plan["guarantee"], plan["charge"] = prov["guarantee"], prov["ledger"]["this_release"]
        m["approval"]["plan_sha256"] = figures_sha256(plan)

    edit(run, "manifest.json", manifest)
    claims = claims_of(run)
    scale = pq.read_table(run / "aggregates.parquet").to_pandas()
    claims.update(
        counts_epsilon=new,
        additive_epsilon=g["additive_epsilon"],
        guarantee=prov["guarantee"],
        ledger=prov["ledger"],
        count_noise_scale=float(scale.loc[scale["level"] == "output", "noise_scale"].iloc[0]),
        approval=claims["approval"] | {"plan_sha256": read(run, "manifest.json")["approval"]["plan_sha256"]},
    )
    pngs = frozenset(p.name for p in run.glob("*.png"))
    md = report.render_report(claims, report.evaluation_markdown(run / "evaluation.parquet"), pngs)
    (run / "report.md").write_text(md)
    rehash(run, "report.md")  # re-signs with the forger's key


def test_consistent_forgery_resigned_by_another_key_fails_against_the_pin(released, run, capsys):
    agency = (released / signing.PUBLIC_KEY).read_bytes()
    forge_eps_counts(run, 0.1)
    assert read(run, audit.PROVENANCE)["eps_counts"] == 0.1
    assert audit.audit_release(run) == []  # every file agrees with every other: only the key tells
    pinned = audit.audit_release(run, public_key=agency)
    assert len(pinned) == 1 and "not the pinned agency key" in pinned[0]
    assert audit.audit_release(run, public_key=raw_fingerprint(agency)) == pinned
    key_file = run.parent / "agency.pem"
    key_file.write_bytes(agency)
    assert main(["audit", str(run), "--public-key", str(key_file)]) == 1
    assert main(["audit", str(run), "--fingerprint", raw_fingerprint(agency)]) == 1
    assert main(["audit", str(run)]) == 0  # no pin: it prints the fingerprint to compare
    out = capsys.readouterr().out
    assert f"signed by key {raw_fingerprint(signing.public_pem(OTHER_KEY.public_key()))}" in out
    assert "compare it with the agency's published key fingerprint" in out


def test_a_forgery_inside_a_store_is_compared_with_the_store_key(released, tmp_path):
    """Run folder in a store whose private part holds the signing key: compared automatically."""
    store = tmp_path / "store"
    shutil.copytree(released.parent.parent / "private" / "signing", store / "private" / "signing")
    forged = store / "runs" / "forged"
    shutil.copytree(released, forged)
    assert audit.audit_release(forged) == []
    forge_eps_counts(forged, 0.1)
    found = audit.audit_release(forged)
    assert len(found) == 1 and "not the pinned agency key" in found[0]
