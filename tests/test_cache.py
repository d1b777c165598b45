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
    assert k == stage_key("graph", "tasks.graph", {"eta": 2.0}, {"dataset": ArtifactRef("s", "other", "elsewhere", {"a.parquet": "1" * 64})})
    assert k != stage_key("graph", "tasks.graph", {"eta": 2.5}, up)
    assert k != stage_key("graph", "tasks.graph", {"eta": 2.0}, {"dataset": _ref({"a.parquet": "2" * 64})})
    assert k != stage_key("export", "tasks.graph", {"eta": 2.0}, up)
    assert k != stage_key("graph", "tasks.export", {"eta": 2.0}, up)
