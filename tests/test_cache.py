"""Stage cache keys: what changes them and what does not."""

from __future__ import annotations

from artifacts.store import ArtifactRef
from tasks.cache import code_modules, code_version, stage_key


def _ref(files):
    return ArtifactRef("s", "k", "objects/s/k", files)


def test_code_version_covers_transitive_project_modules():
    mods = code_modules("tasks.solve")
    # the solve stage calls mdp_core.solve -> lp, verify; and lazily benders ("module:function" strings)
    for m in ("tasks.solve", "tasks.common", "mdp_core.solve", "mdp_core.lp", "mdp_core.verify", "mdp_core.benders"):
        assert m in mods, m
    assert "mdp_core.partition" not in code_modules("tasks.graph")
    assert len(code_version("tasks.solve")) == 64


def test_key_depends_on_params_and_upstream_content_only():
    up = {"dataset": _ref({"a.parquet": "1" * 64})}
    k = stage_key("graph", "tasks.graph", {"eta": 2.0}, up)
    assert k == stage_key(
        "graph",
        "tasks.graph",
        {"eta": 2.0},
        {"dataset": ArtifactRef("s", "other", "elsewhere", {"a.parquet": "1" * 64})},
    )
    assert k != stage_key("graph", "tasks.graph", {"eta": 2.5}, up)
    assert k != stage_key("graph", "tasks.graph", {"eta": 2.0}, {"dataset": _ref({"a.parquet": "2" * 64})})
    assert k != stage_key("export", "tasks.graph", {"eta": 2.0}, up)
    assert k != stage_key("graph", "tasks.export", {"eta": 2.0}, up)


# ----------------------------------------------------------------------------- issue 11: self-healing records
import pytest  # noqa: E402

from tasks.cache import heal_record  # noqa: E402


@pytest.fixture()
def record(tmp_path):
    """A real Prefect cache-key record + persisted result (as the flow writes them) holding a ref."""
    from prefect.filesystems import LocalFileSystem
    from prefect.results import ResultStore

    rs = ResultStore(
        result_storage=LocalFileSystem(basepath=str(tmp_path / "results")),
        metadata_storage=LocalFileSystem(basepath=str(tmp_path / "keys")),
    )
    ref = _ref({"a.parquet": "1" * 64})
    rs.write(key="k" * 64, obj=ref)
    return tmp_path / "keys" / ("k" * 64), tmp_path / "results" / ("k" * 64), ref


def test_valid_record_is_kept(record):
    key, result, ref = record
    assert heal_record(key, ref) is None and key.exists() and result.exists()


@pytest.mark.parametrize(
    "damage, needle",
    [
        ("truncate_result", "unreadable"),
        ("garbage_result", "unreadable"),
        ("delete_result", "unreadable"),
        ("garbage_key", "unreadable"),
        ("other_ref", "does not match"),
        ("artifact_gone", "missing or fails"),
    ],
)
def test_issue11_finding5_bad_records_are_dropped_not_fatal(record, damage, needle):
    key, result, ref = record
    valid = ref
    if damage == "truncate_result":
        result.write_bytes(result.read_bytes()[:20])
    elif damage == "garbage_result":
        result.write_bytes(b"not base64 pickle at all \xff")
    elif damage == "delete_result":
        result.unlink()
    elif damage == "garbage_key":
        key.write_text("{not json")
    elif damage == "other_ref":
        valid = _ref({"a.parquet": "2" * 64})
    else:
        valid = None
    assert needle in heal_record(key, valid)
    assert not key.exists() and not result.exists()
    assert heal_record(key, valid) is None  # nothing left: Prefect sees a cache miss
