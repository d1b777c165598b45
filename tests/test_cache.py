"""Stage cache keys: what changes them and what does not."""

from __future__ import annotations

from artifacts.store import ArtifactRef
from tasks.cache import code_modules, code_version, stage_key


def _ref(files):
    return ArtifactRef("s", "k", "objects/s/k", files)


def test_code_version_covers_transitive_project_modules():
    mods = code_modules("tasks.solve")
    # the solve stage calls mdp_core.solvers.solve -> lp, verify; and lazily benders ("module:function" strings)
    for m in (
        "tasks.solve",
        "tasks.common",
        "mdp_core.solvers.solve",
        "mdp_core.solvers.lp",
        "mdp_core.solvers.verify",
        "mdp_core.solvers.benders",
    ):
        assert m in mods, m
    assert "mdp_core.problem.partition" not in code_modules("tasks.graph")
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
import base64  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402

import pytest  # noqa: E402

from tasks.cache import ArtifactRefSerializer, heal_record  # noqa: E402


@pytest.fixture()
def record(tmp_path):
    """A real Prefect cache-key record + persisted result (as the flow writes them) holding a ref."""
    from prefect.filesystems import LocalFileSystem
    from prefect.results import ResultStore

    rs = ResultStore(
        result_storage=LocalFileSystem(basepath=str(tmp_path / "results")),
        metadata_storage=LocalFileSystem(basepath=str(tmp_path / "keys")),
        serializer=ArtifactRefSerializer(),
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
        result.write_bytes(b"not json at all \xff")
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


class _Touch:
    """A pickle that creates ``path`` when unpickled: what a forged Prefect result would run."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_persisted_result_is_json_of_the_ref(record):
    key, result, ref = record
    assert json.loads(result.read_bytes()) == {"artifact_ref": ref.as_dict()}
    assert json.loads(key.read_bytes())["serializer"] == {"type": "mdp-artifact-ref"}
    assert ArtifactRefSerializer().loads(result.read_bytes()) == ref


@pytest.mark.parametrize("forge", ["pickle_result", "pickle_record", "foreign_storage_key"])
def test_forged_pickle_is_never_loaded(record, tmp_path, forge):
    """A pickle planted in the store is dropped as unreadable; unpickling it would create ``marker``."""
    key, result, ref = record
    marker = tmp_path / "executed"
    payload = pickle.dumps(_Touch(marker))
    meta = json.loads(key.read_bytes())
    if forge == "pickle_result":  # our record, a pickle in the result file
        result.write_bytes(payload)
    elif forge == "pickle_record":  # the record names Prefect's pickle serializer (as older versions wrote)
        result.write_bytes(base64.b64encode(payload))
        meta["serializer"] = {"type": "pickle", "picklelib": "cloudpickle", "picklelib_version": None}
        key.write_text(json.dumps(meta))
    else:  # our serializer, but the result file named is elsewhere
        elsewhere = tmp_path / "elsewhere"
        elsewhere.write_bytes(payload)
        meta["storage_key"] = str(elsewhere)
        key.write_text(json.dumps(meta))
    problem = heal_record(key, ref)
    assert problem and ("unreadable" in problem or "never loaded" in problem)
    assert not marker.exists() and not key.exists() and not result.exists()
    for bad in (payload, b'{"__class__": "os.system", "data": "true"}', b'{"artifact_ref": {"stage": 1}}'):
        with pytest.raises(ValueError):
            ArtifactRefSerializer().loads(bad)
    assert not marker.exists()


# ----------------------------------------------------------------------------- issue 53: keys computed in threads
class _Cycle:
    """Cyclic garbage whose finalizer runs Python code: the collector may then switch threads mid-parse."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        sum(range(100))


@pytest.mark.slow  # 9.7 s at load 10
def test_keys_computed_by_parallel_threads_are_the_serial_ones():
    """CPython 3.11.7's AST constructor counts its recursion depth in interpreter-wide state: two threads in
    ast.parse at once, one switched out by a finalizer the collector runs, raise "AST constructor recursion
    depth mismatch" (cpython gh-106905; a served run logged it, and the code before issue 53 fails here every
    round). tasks.cache parses one module at a time."""
    import sys
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from tasks.cache import forget_code_versions, stage_code_version

    stages = [("solve", "tasks.solve", {"method": m}) for m in ("lp", "rowgen", "exp", "benders", "auto")]
    stages += [("ingest", "tasks.ingest", {"kind": "grid"}), ("measure", "tasks.measure", {})]
    stages += [("evaluate_point", "tasks.evaluate", {"method": m}) for m in ("laplace", "constopt")]
    stop = threading.Event()

    def litter() -> None:  # a little garbage at a time: the parsing threads' collections run its finalizers
        while not stop.is_set():
            [_Cycle() for _ in range(20)]
            time.sleep(0.001)

    garbage = threading.Thread(target=litter, daemon=True)
    garbage.start()
    parallel = []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # threads take turns often: a parse is likely to be interrupted
    try:
        for _ in range(2):
            forget_code_versions(parses=True)  # every module parsed again, by the threads
            with ThreadPoolExecutor(len(stages)) as pool:
                parallel.append(list(pool.map(lambda s: stage_code_version(*s), stages)))
    finally:
        sys.setswitchinterval(interval)
        stop.set()
        garbage.join()
    forget_code_versions()
    assert parallel == [[stage_code_version(*s) for s in stages]] * 2
