"""Issue 18: a store that cannot be turned against its owner.

Dangerous store roots are refused, nothing in the store is ever unpickled (a planted pickle costs a
recomputation, not a command), instance tables cannot name files outside their folder, ``--refresh``
never deletes an object a concurrent reader uses, and debris of killed runs is cleaned cheaply.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from artifacts.store import TRASH_SECONDS, Store, check_root
from mdp_core.errors import InputError

REPO = Path(__file__).resolve().parents[1]
QUIET = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "MPLBACKEND": "Agg"}


# ----------------------------------------------------------------------------- 1. dangerous roots
@pytest.mark.parametrize(
    "root",
    ["/", "/root", "/home/someone", "/etc", "/etc/mdp", "/usr/local/store", "/var", "/var/lib/mdp", "/proc/self"]
    + ["/bin", "/sys/x", "/dev/shm/s", "/run/s", "/tmp", "/var/tmp", "/home", "/opt", "/mnt"],
)
def test_dangerous_roots_are_refused(root):
    with pytest.raises(InputError, match=r"refusing the store root .*; choose a dedicated folder") as err:
        Store(root)
    assert "\n" not in str(err.value)


def test_home_folder_itself_is_refused_but_a_folder_in_it_is_fine(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(InputError, match="a home folder itself"):
        Store("~")
    assert Store("~/mdp-store").root == home / "mdp-store"


def test_symlink_to_a_system_folder_is_refused(tmp_path):
    link = tmp_path / "store"
    link.symlink_to("/etc")
    with pytest.raises(InputError, match="inside a system folder"):
        Store(link)


@pytest.mark.parametrize("root", ["/tmp/s", "/var/tmp/s", "/mnt/data/store", "/opt/mdp/store", "/srv/mdp", "/data"])
def test_ordinary_roots_are_accepted(root):
    assert str(check_root(Path(root))) == root


def test_the_default_and_test_stores_are_accepted(tmp_path):
    assert Store(tmp_path).root == tmp_path.resolve()
    assert Store().root.name == "store"  # artifacts/store of the checkout (relative to the cwd)
    assert Store(REPO / "artifacts" / "store").root == REPO / "artifacts" / "store"


def test_the_command_line_refuses_a_root_store_before_anything_starts(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[dataset]\nkind = "grid"\nparams = { rows = 3, cols = 3, n_outputs = 3, seed = 1 }\n[release]\nsimulate = true\n'
    )
    before = sorted(os.listdir("/"))
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "--store", "/", "--config", str(cfg)],
        cwd=tmp_path,
        env=os.environ | QUIET | {"MDP_RELEASE_HOME": str(tmp_path), "PREFECT_HOME": str(tmp_path / "ph")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "refusing the store root /:" in proc.stderr, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and sorted(os.listdir("/")) == before


# ----------------------------------------------------------------------------- 2. no pickle, end to end
_FLOW = """
import json, sys
from prefect import flow, task
from artifacts.store import Store
from tasks import ingest
from tasks.cache import cached

root = sys.argv[1]

@flow(name="pickle-probe")
def probe():
    task = cached(ingest.ingest, "ingest", Store(root))
    return task(root, {"kind": "grid", "params": {"rows": 3, "cols": 3, "n_outputs": 3, "seed": 1}, "inputs": {}})

@task
def boom(store: str, params: dict) -> None:
    raise ValueError("boom-18")

@flow(name="failure-probe")
def failing():
    cached(boom, "boom", Store(root))(root, {})

if sys.argv[2:] == ["fail"]:
    try:
        failing()
    except ValueError as exc:
        print("RAISED " + str(exc))
else:
    print("REF " + json.dumps(probe().as_dict()))
"""


class _Touch:
    """Unpickling this creates ``path``: the stand-in for a command run by a crafted result."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _probe(server: dict, tmp_path: Path, store: Path, *mode: str) -> dict:
    env = os.environ | QUIET | {"PREFECT_API_URL": server["url"], "PREFECT_HOME": str(server["home"])}
    env["MDP_RELEASE_HOME"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", _FLOW, str(store), *mode], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    if mode:
        return {"_log": proc.stdout + proc.stderr}
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REF "))
    return json.loads(line[4:]) | {"_log": proc.stdout + proc.stderr}


@pytest.mark.flow
def test_a_planted_pickle_result_never_runs(prefect_server, tmp_path):
    store = tmp_path / "store"
    first = _probe(prefect_server, tmp_path, store)
    (record,) = (store / "prefect" / "keys").iterdir()
    result = store / "prefect" / "results" / record.name
    assert json.loads(result.read_bytes()) == {"artifact_ref": {k: v for k, v in first.items() if k != "_log"}}
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Touch(marker))

    # a pickle in place of the persisted result (the record still names our JSON serializer)
    result.write_bytes(payload)
    second = _probe(prefect_server, tmp_path, store)
    assert not marker.exists()
    assert "unreadable" in second["_log"] and second["files"] == first["files"]

    # a record rewritten to name Prefect's pickle serializer, as an older version (or an attacker) wrote
    import base64

    meta = json.loads(record.read_bytes())
    meta["serializer"] = {"type": "pickle", "picklelib": "cloudpickle", "picklelib_version": None}
    record.write_text(json.dumps(meta))
    result.write_bytes(base64.b64encode(payload))
    third = _probe(prefect_server, tmp_path, store)
    assert not marker.exists()
    assert "names the serializer 'pickle'" in third["_log"] and third["files"] == first["files"]
    assert json.loads(record.read_bytes())["serializer"] == {"type": "mdp-artifact-ref"}  # healed: ours again


@pytest.mark.flow
def test_a_failed_stage_keeps_its_error_and_leaves_no_record(prefect_server, tmp_path):
    """The JSON serializer also takes the exception Prefect persists for a failed task: the run fails
    with the task's own error (not a serialization error) and nothing stays under prefect/."""
    store = tmp_path / "store"
    out = _probe(prefect_server, tmp_path, store, "fail")
    assert "RAISED boom-18" in out["_log"] and "serializ" not in out["_log"].lower()
    for sub in ("keys", "results"):
        folder = store / "prefect" / sub
        assert not folder.exists() or list(folder.iterdir()) == []


# ----------------------------------------------------------------------------- 3. instance tables stay in their folder
def _list_table(instance_dir: Path, name: str, digest: str) -> None:
    meta = json.loads((instance_dir / "instance.json").read_text())
    meta["tables"][name] = digest
    (instance_dir / "instance.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "name",
    ["../../../../etc/hostname", "/etc/hostname", "..", ".", "sub/records.parquet", "", "a\\b.parquet", "x\0.parquet"],
)
def test_table_names_outside_the_instance_folder_are_refused(instance_dir, tmp_path, name):
    from mdp_core.problem.io import read_instance
    from mdp_core.runtime.files import file_sha256

    target = Path("/etc/hostname")
    digest = file_sha256(target) if target.is_file() else "0" * 64  # the right hash: only the name is wrong
    _list_table(instance_dir, name, digest)
    with pytest.raises(InputError, match="not a plain file name inside the instance folder"):
        read_instance(instance_dir)


def test_table_symlinks_out_of_the_folder_are_refused(instance_dir, tmp_path):
    from mdp_core.problem.io import read_instance
    from mdp_core.runtime.files import file_sha256

    outside = tmp_path / "outside.parquet"
    (instance_dir / "records.parquet").rename(outside)
    (instance_dir / "records.parquet").symlink_to(outside)
    with pytest.raises(InputError, match="symlink leading out of the instance folder"):
        read_instance(instance_dir)
    (instance_dir / "records.parquet").unlink()
    (instance_dir / "spare.parquet").write_bytes(outside.read_bytes())
    (instance_dir / "records.parquet").symlink_to("spare.parquet")  # inside the folder: fine
    _list_table(instance_dir, "spare.parquet", file_sha256(outside))
    assert read_instance(instance_dir).n_records == 20


# ----------------------------------------------------------------------------- 4. --refresh and concurrent readers
def _write(store: Store, key: str, payload: bytes, force: bool = False):
    with store.writer("stage", key, force=force) as w:
        w.file("a.bin").write_bytes(payload)
    return w.ref


def test_refresh_never_breaks_concurrent_readers(tmp_path):
    """Readers keep hashing and reading the object while forced rewrites (equal and different) land."""
    s = Store(tmp_path)
    _write(s, "k", b"v0" * 50_000)
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def reader() -> None:
        while not stop.is_set():
            try:
                ref = s.valid_ref("stage", "k")
                assert ref is not None, "the object vanished"
                data = s.path(ref, "a.bin").read_bytes()
                assert len(data) == 100_000
                reads[0] += 1
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(30):
        _write(s, "k", (b"v0" if i % 2 else f"{i:02d}".encode()) * 50_000, force=True)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert reads[0] > 0
    trash = [p for p in (tmp_path / "objects" / "stage").iterdir() if p.name.startswith(".k.trash-")]
    assert trash  # replaced folders wait in trash; none was deleted under a reader
    assert s.clean_debris() == []


def test_trash_is_deleted_once_stale(tmp_path):
    s = Store(tmp_path)
    _write(s, "k", b"one")
    _write(s, "k", b"two", force=True)
    stage = tmp_path / "objects" / "stage"
    (trash,) = [p for p in stage.iterdir() if p.name != "k"]
    old = int(time.time() - TRASH_SECONDS - 5)
    aged = trash.with_name(f".k.trash-{old}-{trash.name.rsplit('-', 1)[1]}")
    trash.rename(aged)
    assert s.clean_debris() == [aged] and sorted(p.name for p in stage.iterdir()) == ["k"]


# ----------------------------------------------------------------------------- 5. debris of killed runs
def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_clean_debris_removes_leftovers_everywhere_and_keeps_live_work(tmp_path):
    s = Store(tmp_path)
    _write(s, "k", b"x")
    dead = _dead_pid()
    stage = tmp_path / "objects" / "stage"
    other = tmp_path / "objects" / "other"
    other.mkdir()
    runs = tmp_path / "runs"
    run = runs / "20260101-000000-abc"
    private = tmp_path / "private" / "draws" / ("a" * 64)
    for folder in (run, private, tmp_path / "private" / "ledger" / "bb"):
        folder.mkdir(parents=True)
    leftovers = [
        stage / f".k2.tmp-{dead}-abcd1234",  # a killed stage writer
        other / f".k3.tmp-{dead}-abcd1234",  # ... of a stage no writer will run again
        runs / f".20260101-000000-x.tmp-{dead}-00ff00ff",  # a killed publication
        run / ".manifest.json.abc123.tmp",  # an atomic_write of a killed run (no pid: by age)
        private / f".draw.json.tmp-{dead}-x1y2z3",  # a killed private write
    ]
    for p in leftovers:
        if p.name.endswith(".tmp") or "draw.json" in p.name:
            p.write_bytes(b"partial")
        else:
            p.mkdir()
            (p / "half.parquet").write_bytes(b"partial")
    old = time.time() - 2 * 3600
    os.utime(run / ".manifest.json.abc123.tmp", (old, old))
    live = stage / f".k4.tmp-{os.getppid()}-0000aaaa"  # a live writer (our parent process)
    live.mkdir()
    kept = [
        live,
        run / ".young.json.abc.tmp",  # a fresh temp file without a pid: may be in use
        tmp_path / "private" / "ledger" / "bb" / ".lock",  # the ledger's lock file
        run / "manifest.json",
    ]
    for p in kept[1:]:
        p.write_bytes(b"x")
    removed = s.clean_debris()
    assert sorted(map(str, removed)) == sorted(map(str, leftovers))
    assert all(p.exists() for p in kept) and not any(p.exists() for p in leftovers)
    assert s.valid_ref("stage", "k") is not None
    assert s.clean_debris() == []


def test_clean_debris_is_cheap(tmp_path):
    s = Store(tmp_path)
    for stage in range(8):
        for i in range(50):
            (tmp_path / "objects" / f"s{stage}" / f"{i:064x}").mkdir(parents=True)
    for i in range(100):
        (tmp_path / "runs" / f"run-{i}").mkdir(parents=True)
        (tmp_path / "runs" / f"run-{i}" / "manifest.json").write_text("{}")
    s.clean_debris()  # warm the directory cache, as a real run's earlier reads would
    best = float("inf")
    for _ in range(3):  # the best of three: the machine is shared
        t0 = time.perf_counter()
        assert s.clean_debris() == []
        best = min(best, time.perf_counter() - t0)
    assert best < 0.05, best
