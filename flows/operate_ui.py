"""What the release flow tells an operator: flow-run tags, per-stage task options (timeouts, retries),
the release artifact in the Prefect UI, the ``runs/latest`` pointer, and the failure record.

Artifact keys are per release name (``<name>-release``, ``<name>-evaluation``, ``<name>-report``,
``<name>-solve-progress``, ``<name>-failure``), so one key's history in the UI is one release's history.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("mdp_release")

# Errors a second attempt can cure: network and file-system hiccups (a dataset download, a busy
# disk). Solver failures, refused repairs and bad input are deterministic: no retries for those.
TRANSIENT = (ConnectionError, TimeoutError, OSError)
RETRIES = {"ingest": 2}  # only ingest touches the network (osmnx downloads)


def _retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    try:
        state.result(raise_on_failure=True)
    except TRANSIENT as exc:
        from mdp_core.errors import MdpError

        return not isinstance(exc, MdpError) and not isinstance(exc, FileNotFoundError)
    except BaseException:
        return False
    return False


def task_options(stage: str, config: Any) -> dict[str, Any]:
    """``with_options`` of a stage task: its timeout from ``[run.timeouts]``; retries on transient errors
    only, and only where a retry can help (``RETRIES``)."""
    opts: dict[str, Any] = {"timeout_seconds": getattr(config.run.timeouts, stage, None)}
    if RETRIES.get(stage):
        opts |= {"retries": RETRIES[stage], "retry_delay_seconds": 5, "retry_condition_fn": _retry_transient}
    return opts


def task_runner(run_cfg: Any) -> Any:
    """The task runner of ``[run]``: Prefect's thread pool, or prefect-dask's DaskTaskRunner (a local
    Dask cluster of ``max_workers`` single-threaded worker processes, or the scheduler at
    ``dask_address``)."""
    if run_cfg.task_runner == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError:
            from mdp_core.errors import InputError

            raise InputError("run.task_runner = 'dask' needs prefect-dask: pip install 'mdp-release[dask]'") from None
        if run_cfg.dask_address:
            return DaskTaskRunner(address=run_cfg.dask_address)
        return DaskTaskRunner(
            cluster_kwargs={
                "n_workers": run_cfg.max_workers,
                "threads_per_worker": 1,
                "processes": True,
                "dashboard_address": ":0",  # any free port: never clash with another cluster on 8787
            }
        )
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=run_cfg.max_workers)


def tag_flow_run(ctx: Any, tags: list[str]) -> None:
    """Add ``tags`` to the current flow run (the runs list then says dataset, method and release)."""
    if ctx is None or ctx.flow_run is None:
        return
    want = sorted(set(ctx.flow_run.tags or []) | set(tags))
    if want == sorted(ctx.flow_run.tags or []):
        return
    try:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            client.update_flow_run(ctx.flow_run.id, tags=want)
    except Exception as exc:  # cosmetic: never fail a release for it
        log.warning("could not tag the flow run: %s", exc)


def _link_latest(run_dir: Path) -> None:
    """``runs/latest`` -> the newest release folder (a relative symlink, replaced atomically)."""
    latest = run_dir.parent / "latest"
    tmp = run_dir.parent / f".latest-{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        os.symlink(run_dir.name, tmp)
        os.replace(tmp, latest)
    except OSError as exc:
        log.warning("could not update %s: %s", latest, exc)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.9g}"
    return "-" if v is None else str(v)


def release_markdown(run_dir: Path, manifest: dict[str, Any], name: str) -> str:
    cert = manifest["privacy"]["certificate"]
    sv = manifest["solve"]
    mpath = run_dir / "manifest.json"
    mhash = hashlib.sha256(mpath.read_bytes()).hexdigest() if mpath.is_file() else "-"
    rows = [
        (
            "release folder",
            f"`{run_dir}`" + (" (same bytes as before: nothing new published)" if manifest.get("same_as") else ""),
        ),
        ("manifest", f"`manifest.json` sha256 `{mhash}`"),
        ("privacy check", "**PASS**" if cert.get("passed") else "**FAIL**"),
        (
            "eps (mechanism, per " + str(manifest["privacy"].get("distance_unit", "unit")) + ")",
            _fmt(manifest["privacy"].get("mechanism_epsilon")),
        ),
        ("realised eps", _fmt(cert.get("max_realised_epsilon"))),
        ("eps_counts (true-data counts)", _fmt(manifest["privacy"].get("counts_epsilon"))),
        (
            "prior",
            f"{_fmt(manifest['privacy'].get('prior_source'))} (eps {_fmt(manifest['privacy'].get('prior_epsilon'))})",
        ),
        (
            "individuals",
            f"{_fmt(manifest['privacy'].get('n_individuals'))} ({_fmt(manifest['privacy'].get('microdata_source'))})",
        ),
        ("guarantee", _fmt((manifest["privacy"].get("guarantee") or {}).get("statement"))),
        ("this release spends", _fmt((manifest["privacy"].get("ledger") or {}).get("this_release"))),
        (
            "table's total so far",
            f"{_fmt((manifest['privacy'].get('ledger') or {}).get('total_so_far'))} "
            f"(limit {_fmt((manifest['privacy'].get('ledger') or {}).get('max_total_epsilon'))})",
        ),
        ("method run", _fmt((sv.get("auto") or {}).get("method") or sv.get("method"))),
        ("status", _fmt(sv.get("status"))),
        ("objective (expected loss)", _fmt(sv.get("objective"))),
        ("lower bound", _fmt(sv.get("lower_bound"))),
        ("gap", _fmt(sv.get("gap"))),
        ("solve seconds", _fmt(sv.get("seconds"))),
        (
            "stages run / cached",
            f"{sum(not e['cache_hit'] for e in manifest['stages'].values())} / "
            f"{sum(bool(e['cache_hit']) for e in manifest['stages'].values())}",
        ),
    ]
    lines = [f"# Release `{name}`: {manifest['run_name']}", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    lines += ["", "Released files: " + ", ".join(f"`{f}`" for f in sorted(manifest.get("released_files", {}))), ""]
    return "\n".join(lines)


def after_release(store: Any, run_dir: Path, manifest: dict[str, Any], name: str) -> None:
    """After publication: point ``runs/latest`` at the release, publish the release artifact."""
    run_dir = Path(run_dir)
    _link_latest(run_dir)
    try:
        from prefect.artifacts import create_markdown_artifact

        create_markdown_artifact(
            key=f"{name}-release",
            markdown=release_markdown(run_dir, manifest, name),
            description=f"mdp-release {name}: where the release went and its privacy certificate",
        )
    except Exception as exc:
        log.warning("could not publish the release artifact: %s", exc)


_STAGES: dict[str, str] = {}  # flow run id -> the stage it is at (this process's runs)


def at_stage(run_id: str, stage: str) -> None:
    """Record that flow run ``run_id`` (of this process) is now at ``stage``: the failure record names it."""
    _STAGES[str(run_id)] = stage


def one_line_reason(state: Any) -> str:
    """``<exception type>: <message>`` of a failed or crashed state, never empty: an exception without a
    message (a crash: ``CancelledError``) gets the state's message instead."""
    message = str(getattr(state, "message", None) or "").strip()
    try:
        state.result(raise_on_failure=True)
    except BaseException as exc:  # the exception the flow failed with
        text = f"{type(exc).__name__}: {str(exc).strip() or message or 'no message'}"
    else:
        text = message or "failed"
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "failed")
    return first[:500]


def record_failure(flow_run: Any, state: Any) -> Path | None:
    """The on-failure hook's work: ``<store>/runs/<time>-<id8>-failed/FAILED.txt`` (first line: the stage
    and the one-line reason; then the run's name) and a markdown artifact ``<name>-failure`` on the run."""
    from flows.config import as_config, release_name, store_root

    stage = _STAGES.pop(str(flow_run.id), "before the first stage")
    reason = f"{stage}: {one_line_reason(state)}"
    try:
        cfg = as_config((flow_run.parameters or {}).get("config"))
    except Exception:
        from flows.config import ReleaseFlowConfig

        cfg = ReleaseFlowConfig()
    name = release_name(cfg)
    now = _dt.datetime.now(_dt.UTC)
    folder = None
    try:
        folder = store_root(cfg) / "runs" / f"{now:%Y%m%d-%H%M%S}-{str(flow_run.id)[-8:]}-failed"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "FAILED.txt").write_text(
            f"{reason}\nflow run {flow_run.name} ({flow_run.id}), {now.isoformat(timespec='seconds')}\n",
            encoding="utf-8",
        )
    except OSError as exc:
        log.warning("could not write the failure record: %s", exc)
    try:
        from prefect.artifacts import Artifact

        md = f"# Release `{name}` FAILED\n\n**Reason:** {reason}\n\nRecord: `{folder}/FAILED.txt`\n"
        artifact = Artifact(
            type="markdown",
            key=f"{name}-failure",
            data=md,
            flow_run_id=flow_run.id,
            description=f"mdp-release {name}: why the run failed",
        )
        artifact.create(_sync=True)  # type: ignore[call-arg]
    except Exception as exc:
        log.warning("could not publish the failure artifact: %s", exc)
    return folder
