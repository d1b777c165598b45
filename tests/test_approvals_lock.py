"""Two approvals appended at once both land (issue 52): ``approvals.json`` is read, extended, signed and replaced
under an exclusive lock of the release folder (:func:`mdp_core.release.approvals_log.append_approval`); before, two
runs approved at the same moment could each read the same record and the second write lost the first's entry."""

from __future__ import annotations

import multiprocessing
import shutil
from pathlib import Path

from conftest import read

from mdp_core.release import approvals_log, audit, signing

PER_WRITER = 12


def _appends(store: str, folder: str, who: str, go: object) -> list[bool]:
    """``PER_WRITER`` decisions by ``who``, each appended through the module's own function, once ``go`` is set."""
    key = signing.signing_key(Path(store))
    plan = read(Path(folder), "manifest.json")["approval"]["plan_sha256"]
    go.wait()  # type: ignore[attr-defined]
    return [
        approvals_log.append_approval(
            folder,
            {"mode": "required", "by": who, "at": f"2026-12-01T09:{i:02d}:00+00:00", "note": "", "plan_sha256": plan},
            f"run-{who}-{i}",
            key,
        )
        for i in range(PER_WRITER)
    ]


def test_two_writers_appending_at_once_lose_no_approval(released, tmp_path: Path):
    store = tmp_path / "store"
    shutil.copytree(released.parent.parent, store, symlinks=True)
    folder = store / "runs" / released.name
    ctx = multiprocessing.get_context("spawn")  # two processes, as two runs are
    go = ctx.Manager().Event()
    with ctx.Pool(2) as pool:
        pending = [pool.apply_async(_appends, (str(store), str(folder), who, go)) for who in ("A", "B")]
        go.set()
        done = [p.get(timeout=240) for p in pending]
    assert done == [[True] * PER_WRITER] * 2
    entries = read(folder, approvals_log.APPROVALS_FILE)["approvals"]
    assert sorted((e["by"], e["at"]) for e in entries) == sorted(
        (who, f"2026-12-01T09:{i:02d}:00+00:00") for who in ("A", "B") for i in range(PER_WRITER)
    )
    assert audit.audit_release(folder) == []  # signed over every entry
