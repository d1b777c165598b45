"""The release flow: the stages of :data:`mdp_core.declarations.contract.STAGES`, run in their declared order
(:func:`run_stages`: ingest -> graph -> [prior] -> partition -> export -> solve -> measure -> evaluate), then
the publication (the publish stage).

Every stage is a cached Prefect task (``tasks/``) whose key is built from its code version, its own
parameters and the content hashes of what it reads (:mod:`tasks.cache`), so a re-run recomputes only
the stages whose inputs or code changed. The last step publishes the released files and a manifest
to ``<store>/runs/<run_name>/``.

No ``from __future__ import annotations`` here: ``flow.serve`` and deployments hand the flow to a
fresh process by pickling it, and the copy must see the real (pydantic) annotations of the flow's
parameters, not strings it cannot resolve (every scheduled run failed in 0 s that way).
"""

import contextlib
import dataclasses
import datetime as _dt
import functools
import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from prefect import Flow, flow, get_run_logger, tags
from prefect.client.schemas.objects import FlowRun
from prefect.context import FlowRunContext
from prefect.states import Cancelled, Failed, State
from pydantic import BaseModel

import flows  # noqa: F401  (binds the project packages, quiet Prefect defaults)
from artifacts.draws import Draw
from artifacts.private import PrivateStore
from artifacts.store import ArtifactRef, Store
from flows import manifest as mf
from flows import operate_ui, runner
from flows.approval import unattended, wait_for_approval
from flows.config import DEFAULT_CONFIG, ReleaseFlowConfig, StageName, as_config
from flows.door import Figures, plan_for, unsealed_config
from flows.manifest_read import manifest_release_name
from flows.plan import (
    RunPlan,
    as_plan,
    instance_stage,
    plan_run,
    run_title,
    stage_params,  # noqa: F401  (the tests' fixtures take it from here)
    stage_plan,  # noqa: F401  (the tests take it from here)
)
from flows.slot import one_run_at_a_time
from mdp_core.declarations import contract
from mdp_core.declarations.methods import needs_partition
from mdp_core.errors import Interrupted, PrivacyError, StageTimeout
from mdp_core.release import audit, signing
from mdp_core.release.door import PrivacyPlan, Settings
from mdp_core.release.report_approval import approval_claim
from mdp_core.runtime import control
from mdp_core.runtime.files import read_json
from tasks import evaluate, measure
from tasks import publish as publish_task
from tasks.cache import cached, package_versions, stage_code_version
from tasks.common import door_figures, instance_with_graph, remember_door_figures, stage_output
from tasks.progress import own_heartbeat, watch_cancellation


@functools.cache
def task_at(path: str) -> Any:
    """The Prefect task a stage declares (:attr:`mdp_core.declarations.contract.Stage.task`, ``"module:attribute"``)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


_TASKS: dict[str, Any] = {st.name: task_at(st.task) for st in contract.STAGES if st.cached}  # each cached stage's task
SOLVE_SUMMARY = contract.MANIFEST_SOLVE_KEYS  # the manifest's solve summary: these keys of solve.json
PACKAGES = ("mdp-release", "prefect", "numpy", "scipy", "highspy", "pandas", "pyarrow", "osmnx", "gensim", "pydantic")


def release_params(plan: RunPlan, draw: Draw, door: Settings, table: str | None = None) -> dict[str, dict[str, Any]]:
    """The ``prior`` (when not the dataset's) and ``measure`` stages' parameters: the release settings
    (``door``: the privacy door's, which the measuring stage plans with again), the population, the draw's
    public commitment and ``table``, the sealed table's keyed handle
    (:meth:`artifacts.private.PrivateStore.table_handle`: never its path or hash; None for simulated people),
    and what the ledger needs (the cap the config asks for, whether the population must have one): the plan's
    :attr:`~flows.plan.RunPlan.secret_params` and :attr:`~flows.plan.RunPlan.measure_params`."""
    secret = {
        "table": table,  # the sealed table's keyed handle (None: simulated people); never its path or hash
        "population": draw.population,
        "draw": draw.commitment,
        **plan.secret_params,
    }
    door_params = {"door": door.as_params()}  # the door's settings: the stage plans with them again
    out: dict[str, dict[str, Any]] = {"measure": secret | plan.measure_params | door_params}
    if plan.prior_source == "dp":
        out["prior"] = secret | {"source": "dp", "eps_prior": plan.privacy.eps_prior}
    elif plan.public_prior is not None:
        out["prior"] = dict(plan.public_prior)
    return out


def release_fields(inst_meta: dict[str, Any], solve_info: dict[str, Any], prov: dict[str, Any]) -> dict[str, Any]:
    """The manifest's ``privacy`` and ``solve`` blocks, from the released instance.json, solve.json and
    release_provenance.json (every figure is one ``mdp-release audit`` recomputes or cross-checks)."""
    privacy = {
        "mechanism_epsilon": inst_meta["epsilon"],
        "eta": inst_meta["eta"],
        "distance_unit": inst_meta["distance_unit"],
        "certificate": solve_info["certificate"],
        "counts_epsilon": prov["eps_counts"],
        "prior_epsilon": prov["eps_prior"],
        "prior_source": prov["prior_source"],
        "microdata_source": prov["microdata_source"],
        "n_individuals": prov["n_individuals"],
        "draw_commitment": prov["draw_commitment"],
        "guarantee": prov["guarantee"],
        "ledger": prov["ledger"],
    }
    for key in sorted(contract.PRIVACY_KEYS_V3_OPTIONAL):  # provenance v3: population, protection
        if key in prov:
            privacy[key] = prov[key]
    solve = {k: solve_info.get(k) for k in SOLVE_SUMMARY} | {"auto": solve_info.get("extra", {}).get("auto")}
    return {"privacy": privacy, "solve": solve}


@dataclass
class StageRun:
    """What the stage loop (:func:`run_stages`) has made so far: {stage: output}, the draw, the door's admitted
    plan and the officer's approval record (or None)."""

    refs: dict[str, ArtifactRef] = field(default_factory=dict)
    draw: Draw | None = None
    plan: PrivacyPlan | None = None
    approval: dict[str, Any] | None = None


def run_stages(
    plan: RunPlan | BaseModel,
    store: Store,
    params: dict[str, dict[str, Any]],
    run: Any,
    note: Any = lambda what: None,
    new_draw: bool = False,
    draw: str | None = None,
    *,
    until: str | None = None,
    side: Any = None,
) -> StageRun:
    """Run the plan's steps (:attr:`flows.plan.RunPlan.steps`: :func:`flows.plan.stage_plan`) through ``until`` (a
    step name; None: all): each stage through ``run(stage, **upstream)`` (the flow: a cached Prefect task; tests:
    its ``.fn``) with the keyword arguments its declaration reads (:meth:`flows.plan.RunPlan.upstream`), the door
    (:func:`_door`) and the draw at their steps; ``params`` (the plan's :meth:`~flows.plan.RunPlan.params`) gains
    the release's parameters at the draw.
    ``side(refs, stack)`` starts the side runs, entering its task runner into ``stack`` (closed once their
    outputs are collected, before the stage that reads them), and returns what collects them (None: no side
    runs, their readers get []). ``plan``: the run's (:func:`flows.plan.plan_run`); a config is planned here
    (:func:`flows.plan.as_plan`: the tests' shared fixtures pass one)."""
    plan = as_plan(plan)
    state = StageRun()
    collect: Any = lambda: []  # noqa: E731
    with contextlib.ExitStack() as stack:
        for step in plan.steps:
            if step == "door":
                _door(plan, store, params, note, new_draw, draw, state)
            elif step == "draw":
                if state.draw is None:  # simulated individuals: the table is defined by the instance and n
                    n = plan.simulated_individuals
                    table = measure.simulated_table({"instance": state.refs[instance_stage()].content_hash, "n": n})
                    state.draw = _secret(plan, store, params, note, new_draw, draw, state, *table)
            elif step == "points":
                collect = side(state.refs, stack) if side is not None else collect
            else:
                st = contract.stage(step)
                outputs: dict[str, Any] = {**state.refs, **dict.fromkeys(contract.SIDE_RUNS)}
                if any(s in contract.SIDE_RUNS for s in st.inputs.values()):
                    outputs |= dict.fromkeys(contract.SIDE_RUNS, collect())
                    stack.close()  # collected: the side runs' task runner shut down before the stage starts
                state.refs[step] = run(step, **plan.upstream(step, outputs))
            if step == until:
                break
    return state


def _door(
    plan: RunPlan,
    store: Store,
    params: dict[str, dict[str, Any]],
    note: Any,
    new_draw: bool,
    draw: str | None,
    state: StageRun,
) -> None:
    """The privacy door, before the first stage that reads the secret table: every rule of the guarantee
    (:func:`flows.door.plan_for`, the secret table read once and validated) before anything is charged; the
    table's canonical rows sealed in the private part (:meth:`artifacts.private.PrivateStore.seal_table`: from
    here on every step reads the snapshot, never the file) and their keyed handle put into the plan; the
    officer's approval of that plan (:func:`flows.approval.wait_for_approval`), for real people the table's
    population claimed, the population's draw for this version of the table (the sealed rows' sha256;
    published releases checked against the private ledger) and the early budget check of the plan's charges;
    then the signing key (refused before the first charge).
    Without a secret table the door reads only the public instance's figures (:class:`flows.door.Figures`),
    memoised beside the graph object (:func:`tasks.common.door_figures`): a re-run's door loads no instance."""
    note("the privacy door")
    reads = next(st for st in contract.STAGES if st.reads_secret).inputs  # the door sees what that stage reads
    dataset, graph, radius = state.refs[reads["dataset"]], state.refs[reads["graph"]], plan.privacy.protection_radius
    public = plan.privacy.microdata is None  # no secret table: the public instance's figures are all it reads
    memo = (dataset, graph, radius, ("flows.door",))  # memoised beside the graph object, keyed by what makes them
    figures = Figures.parse(door_figures(store, *memo)) if public else None
    if figures is not None and figures.graph.all_pairs != plan.privacy.all_pairs:  # the graph object differs then
        figures = None
    door = plan_for(plan, figures or instance_with_graph(store, dataset, graph))
    if public and figures is None and door.figures is not None:
        remember_door_figures(store, *memo, door.figures.as_dict())
    state.plan = door.plan.admit()  # refused: PrivacyError, nothing measured, nothing charged
    version = None
    if door.rows is not None:  # sealed: from here on the run reads the snapshot, never the file
        version, handle = PrivateStore(store.root).seal_table(door.rows)
        state.plan = dataclasses.replace(state.plan, table=handle)  # the plan the officer approves covers it
    state.approval = wait_for_approval(plan.approval, store, state.plan, door.people, new_draw)  # a person first
    shown = approval_claim(state.approval or unattended(state.plan))  # report.md states it (issue 52)
    params.setdefault("evaluate", {})["approval"] = shown
    if version is not None:  # real people: the door (the budget) before anything is measured
        population = cast(str, plan.privacy.population)
        measure.claim_table(store, door.people, population)
        state.draw = _secret(plan, store, params, note, new_draw, draw, state, population, version)
        measure.precheck_release(store, state.draw, params["measure"], state.plan.charges())
    signing.signing_key(store.root)  # a refused or lost signing key is refused now, before the first charge


def _secret(
    run_plan: RunPlan,
    store: Store,
    params: dict[str, dict[str, Any]],
    note: Any,
    new_draw: bool,
    draw: str | None,
    state: StageRun,
    population: str,
    version: str,
) -> Draw:
    """The population's secret draw for this version of its table; ``params`` gain the release's parameters
    (:func:`release_params`) and, for each stage given the draw, the protection radius."""
    plan = cast(PrivacyPlan, state.plan)
    note("measure (the secret draw)")
    d = measure.secret_draw(store, population, version, new_draw, draw)
    params.update(release_params(run_plan, d, plan.settings, plan.table))
    radius = {"value": plan.radius, "unit": plan.guarantee.distance_unit}
    for st in contract.STAGES:  # each stage that reads the secret table and is given the draw (prior, measure)
        if st.reads_secret and "draw" in params.get(st.name, {}):
            params[st.name]["radius"] = radius
    return d


def stage_task(stage: str, plan: RunPlan, store: Store, refresh: bool = False) -> Any:
    """The Prefect task the flow runs for ``stage`` -- each of ``STAGE_NAMES`` (``publish``: the
    publication, never cached) or ``evaluate_point`` (the evaluate stage's own solves) -- with the
    config's options: its ``[run.timeouts]`` entry (evaluate_point: evaluate's) and retries where they
    help (:func:`flows.runner.task_options`); a cached stage with its cache policy (``refresh``:
    recompute and overwrite). Every task the flow runs comes from here."""
    if stage == "publish":
        task = publish_task.publish
    elif stage == "evaluate_point":
        task = cached(evaluate.evaluate_point, "evaluate_point", store, refresh)
    else:
        task = cached(task_at(contract.stage(stage).task), stage, store, refresh)
    timeout = plan.timeouts.get("evaluate" if stage == "evaluate_point" else stage)
    return task.with_options(**runner.task_options(stage, timeout))


def run_stamp() -> str:
    """What makes a flow run's name unique: the UTC time it was scheduled for (the name ``serve`` gives its
    upcoming runs, kept when they start; now for a run started by hand) and the last 4 hex digits of its id,
    e.g. ``20260101-030000-1a2b`` (two runs of one second differ in their ids)."""
    from prefect.runtime import flow_run

    try:
        when = flow_run.scheduled_start_time.astimezone(_dt.UTC)
    except Exception:  # not in a run, or no scheduled time: now
        when = _dt.datetime.now(_dt.UTC)
    return f"{when:%Y%m%d-%H%M%S}-{str(flow_run.id or '')[-4:] or 'local'}"


def _flow_run_name() -> str:
    """``<release name>-<config hash8>-<UTC time>-<id4>``, e.g. grid-eps10-lp-1a2b3c4d-20260101-030000-9f3e."""
    from prefect.runtime import flow_run

    try:
        title = run_title(as_config(flow_run.parameters.get("config")))
    except Exception:  # never let naming fail a run
        title = "mdp-release"
    return f"{title}-{run_stamp()}"


def _on_failure(flow: Flow[..., Any], flow_run: FlowRun, state: State[Any]) -> None:
    """Failure hook: the one-line reason into ``<store>/runs/<time>-<id8>-failed/FAILED.txt`` (the release's
    own store) and the UI."""
    operate_ui.record_failure(flow_run, state, "failed")


def _on_crashed(flow: Flow[..., Any], flow_run: FlowRun, state: State[Any]) -> None:
    """Crash hook: as :func:`_on_failure`."""
    operate_ui.record_failure(flow_run, state, "crashed")


def _on_cancellation(flow: Flow[..., Any], flow_run: FlowRun, state: State[Any]) -> None:
    """Cancellation hook: the same record, ``cancelled at <stage>`` (once per run: a run that stopped
    cleanly wrote it already, :func:`_cancelled`). Prefect calls it when a run enters Cancelling in this
    process, and a runner (``serve``, a worker) after it cancelled a run's process -- with keyword
    arguments ``flow``, ``flow_run``, ``state``: the parameters must have these names."""
    operate_ui.record_failure(flow_run, state, "cancelled")


@flow(
    name="mdp-release",
    description="Optimal mDP mechanism -> verified, reproducible release",
    flow_run_name=_flow_run_name,
    on_failure=[cast(Any, _on_failure)],
    on_crashed=[cast(Any, _on_crashed)],
    on_cancellation=[cast(Any, _on_cancellation)],
)
def release_flow(
    config: ReleaseFlowConfig = DEFAULT_CONFIG,
    refresh_from: StageName | None = None,
    new_draw: bool = False,
    draw: str | None = None,
) -> dict[str, Any]:
    """Run the release pipeline; returns the run manifest (also written to runs/<run_name>/manifest.json).

    Args:
        config: the release configuration; its ``[release] microdata`` may be ``private-path:<tag>``
            (:func:`flows.door.sealed_config`: what ``mdp-release run``, ``serve`` and ``deploy`` pass, so no
            flow run's parameters hold the secret table's path), resolved in this process from the store.
        refresh_from: recompute this stage and every later one, ignoring caches ("ingest" = all).
        new_draw: perturb the same people again with a fresh secret draw (a second, independent release:
            its spend is added to the table's ledger). Default: the table's current draw (made once).
        draw: the public commitment of the draw to use (a re-run of a published release, from its
            manifest); it must be in this store's private part.

    Cancel in the UI (or ``prefect flow-run cancel``, or the API's CANCELLING state) stops a running
    solve within seconds: a watcher polls this run's state and requests the stop
    (:func:`tasks.progress.watch_cancellation`); SIGTERM and Ctrl-C request it too. The stopped stage's
    task run ends Cancelled (:func:`tasks.common.cancelled_state`), no later stage starts, nothing is
    published, and the run ends **Cancelled** at once (:func:`_cancelled`: the cancellation record, then
    Prefect's ``Cancelled`` state returned as the run's final state); ``release_flow(...)`` raises the
    :class:`~mdp_core.errors.Interrupted` to its caller. A stage timeout still ends the run TimedOut.
    A release refused by the privacy door, the budget or the officer (:class:`~mdp_core.errors.PrivacyError`)
    ends **Refused** (:func:`_refused`), nothing published; ``release_flow(...)`` raises the refusal.
    """
    ctx = FlowRunContext.get()
    control.clear_stop()  # a stop requested for an earlier run of this process is not this run's
    operate_ui.cancels_at_warning()  # a stage stopped on request: logged at WARNING, not ERROR (issue 52)
    _ends_are_not_crashes()  # a skipped tick, a stop, a refusal: no engine traceback under a worker (issue 52)
    stop_watching = None
    if ctx is not None and ctx.flow_run is not None:  # with the run's heartbeat when `mdp-release run` sends it
        stop_watching = watch_cancellation(
            ctx.flow_run.id, heartbeat=own_heartbeat(ctx.flow_run, getattr(ctx.flow, "name", ""))
        )
    try:  # SIGTERM / SIGINT request the stop (inside Prefect's own SIGTERM bridge, which cannot reach a solver)
        restore = control.install_signal_handlers()
    except ValueError:  # not the main thread: no signals here
        restore = None
    try:
        with one_run_at_a_time(ctx):  # served / deployed: one run at a time, approval pause included (issue 52)
            plan = plan_run(unsealed_config(as_config(config)))  # the run's plan: all it takes from the config
            return _release(plan, refresh_from, new_draw, draw)
    except Interrupted as exc:
        if isinstance(exc, StageTimeout):  # a stage over its [run] timeouts limit: TimedOut (Failed), as before
            raise
        return cast(Any, _cancelled(ctx, exc))  # Prefect makes it the run's final state; a caller gets exc raised
    except PrivacyError as exc:  # refused (the door, the budget, the officer): Refused, one line, no traceback
        return cast(Any, _refused(ctx, exc))
    finally:
        if stop_watching is not None:
            stop_watching()
        if restore is not None:
            restore()


def _cancelled(ctx: FlowRunContext | None, exc: Interrupted) -> State[Any]:
    """The final state of a run stopped on request: ``Cancelled`` with the stop's one-line message and the
    exception as its data (so ``release_flow(...)`` raises it to its caller), after writing the
    cancellation record (:func:`flows.operate_ui.record_failure`, ``cancelled at <stage>``; once per run:
    a runner's own ``on_cancellation`` hook finds it written). Prefect accepts Cancelled from Running
    (SIGTERM, Ctrl-C) and from Cancelling (Cancel from Prefect), and runs no hook for it: Prefect's
    ``on_cancellation`` hooks run on *Cancelling*, which a run cancelled from outside never proposes."""
    run_id = ctx.flow_run.id if ctx is not None and ctx.flow_run is not None else None
    words = operate_ui.stop_words(run_id, str(exc))  # the runner's SIGTERM of a run cancelled in the UI: says so
    if words != str(exc):
        exc = type(exc)(words, exc.stage, exc.reason, exc.state)
    state: State[Any] = Cancelled(message=words, data=_final(exc))
    if ctx is not None and ctx.flow_run is not None:
        operate_ui.record_failure(ctx.flow_run, state, "cancelled")
    return state


class _EndNotCrash(logging.Filter):
    """Drops the ERROR record with a traceback that Prefect's engine writes when a deployed run ends Cancelled or
    Refused (``prefect.engine`` and ``flow_engine.run_flow``, the entry of a served or worker-run process, ask for
    the flow's result, which raises a Cancelled or Failed state's exception: "Engine execution exited with
    unexpected exception ... Skipped"). The run's end is said already, in one line: Prefect's INFO "Finished in
    state Cancelled('skipped: ...')" and, for a refusal, ``refused: ...``. Only the exception objects
    :func:`release_flow` made its final state (:func:`_cancelled`, :func:`_refused` mark them with :data:`_FINAL`;
    the mark survives pickling): a stage timeout (TimedOut), a ledger's tamper error raised anywhere else, and every
    other error keep their traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.levelno >= logging.ERROR and record.exc_info else None
        return not getattr(exc, _FINAL, False)


_FINAL = "mdp_release_final_state"  # the attribute marking an exception release_flow made its run's final state


def _final(exc: BaseException) -> BaseException:
    """``exc``, marked as the one its run's final state carries (:class:`_EndNotCrash`)."""
    setattr(exc, _FINAL, True)
    return exc


def _ends_are_not_crashes() -> None:
    """Install :class:`_EndNotCrash` on Prefect's flow-run and engine loggers (once per process)."""
    for name in ("prefect.flow_runs", "prefect.engine"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _EndNotCrash) for f in logger.filters):
            logger.addFilter(_EndNotCrash())


def _refused(ctx: FlowRunContext | None, exc: PrivacyError) -> State[Any]:
    """The final state of a release refused by the privacy door, the budget or the officer
    (:class:`~mdp_core.errors.PrivacyError` and its subclasses): ``Failed`` named ``Refused`` with the
    refusal's one-line message and the exception as its data (``release_flow(...)`` raises it to its caller),
    after one log line and the failure record (:func:`flows.operate_ui.record_failure`, kind "refused"; the
    ``on_failure`` hook then finds it written). No traceback: a refusal is a verdict, not a crash."""
    state: State[Any] = Failed(name="Refused", message=str(exc), data=_final(exc))
    if ctx is not None and ctx.flow_run is not None:
        get_run_logger().error("refused: %s", exc)
        operate_ui.record_failure(ctx.flow_run, state, "refused")
    return state


def _release(plan: RunPlan, refresh_from: str | None, new_draw: bool, draw: str | None) -> dict[str, Any]:
    """The body of :func:`release_flow`: the stages as declared (:func:`run_stages`), the manifest
    (:func:`_run_manifest`), the publication through the door, then retention."""
    refresh_from = None if refresh_from is None else contract.stage_name(refresh_from)
    if refresh_from is not None and refresh_from not in contract.STAGE_NAMES:
        raise ValueError(f"refresh_from must be one of {list(contract.STAGE_NAMES)}, got {refresh_from!r}")
    names = tuple(st.name for st in contract.STAGES if st.cached)  # the cached stages in run order
    first_refresh = names.index(refresh_from) if refresh_from in names else len(names)
    store = Store(plan.store_root)
    store.clean_debris()  # temp / trash folders a killed run left behind (kill -9): gone before this run starts
    ctx = FlowRunContext.get()
    run_id = mf.flow_run_id()
    rname = plan.release_name
    operate_ui.tag_flow_run(ctx, list(plan.tags))
    params = plan.params()
    entries: dict[str, dict[str, Any]] = {}
    flow_started = time.time()  # cache_hit: produced by another run that finished before this one began

    def run(stage: str, **upstream: Any) -> ArtifactRef:
        control.check(stage)  # stopped (Cancel, SIGTERM): no further stage starts
        operate_ui.at_stage(run_id, stage)
        t0 = time.perf_counter()
        task = stage_task(stage, plan, store, stage in names[first_refresh:])
        with tags(*plan.tags):
            ref = stage_output(stage, task(str(store.root), params[stage], **upstream))  # stopped: Interrupted
        entries[stage] = mf.stage_entry(ref, run_id, t0, flow_started)
        return ref

    def note(what: str) -> None:
        operate_ui.at_stage(run_id, what)

    def side(refs: dict[str, ArtifactRef], stack: contextlib.ExitStack) -> Callable[[], list[ArtifactRef]]:
        return _side_runs(plan, store, params, refs, stack, "evaluate" in names[first_refresh:])

    spent_before = operate_ui.ledger_snapshot(store.root)  # this run's spend = the ledger after minus before
    state = run_stages(plan, store, params, run, note, new_draw, draw, side=side)  # the door and the draw included
    refs = state.refs
    evaluate.publish_report(str(store.root), refs["evaluate"], key=rname)
    fields = {
        "started_at": flow_started,  # unix time; cache_hit = produced (ref meta produced_at) before this by another run
        "refresh_from": refresh_from,
        "package_versions": package_versions(PACKAGES),
        "approval": state.approval or unattended(state.plan),  # the officer's (flows/approval.py), or nobody's
    }
    manifest = _run_manifest(plan, store, refs, run_id, entries, fields, params)
    control.check("publish")  # a stop requested meanwhile: nothing is published
    operate_ui.at_stage(run_id, "publish")
    # The door: staged, re-verified from the exact bytes (mdp_core.release.audit), published only if it checks out;
    # the exact bytes of a release already published from this config: nothing new (mf.publish_run). What is
    # published: the outputs the publish stage reads (its declaration), each file from the stage the contract names.
    published = publish_task.released_files(**plan.upstream("publish", refs))
    manifest = mf.publish_run(
        store,
        manifest,
        published,
        publish=lambda name, files, m: stage_task("publish", plan, store)(str(store.root), name, files, m),
    )
    run_dir = manifest["run_dir"]
    operate_ui.at_stage(run_id, f"after publication ({run_dir} is published)")
    operate_ui.after_release(store, Path(run_dir), manifest, rname, spent_before)  # runs/latest, UI artifact
    if plan.keep_releases is not None:  # this release name's folders only (other releases: untouched)
        pruned = store.prune_releases(plan.keep_releases, rname, manifest_release_name)
        if pruned:
            get_run_logger().info(
                "retention (keep_releases = %d): deleted %d older folder(s) of %s, microdata included: %s",
                plan.keep_releases,
                len(pruned),
                rname,
                ", ".join(p.name for p in pruned),
            )
    return manifest


def _side_runs(
    plan: RunPlan,
    store: Store,
    params: dict[str, dict[str, Any]],
    refs: dict[str, ArtifactRef],
    stack: contextlib.ExitStack,
    refresh: bool,
) -> Callable[[], list[ArtifactRef]]:
    """Start the side runs (:data:`mdp_core.declarations.contract.SIDE_RUNS`): the evaluate stage's own solves (baselines,
    eps sweep), separate cached task runs on the configured task runner ([run] task_runner: threads or Dask),
    entered into ``stack`` by :func:`run_stages` so they run beside the stages that follow (``refresh``:
    recompute them). Returns what waits for their outputs."""
    part, inst = refs["partition"], refs["export"]
    point_task = stage_task("evaluate_point", plan, store, refresh)
    remote = plan.runner.dask_address if plan.runner.task_runner == "dask" else None  # its workers' logs: here too
    pool = stack.enter_context(runner.task_runner(plan.runner))
    stack.enter_context(runner.dask_logs_in_terminal(remote))
    stack.enter_context(tags(*plan.tags))
    futures = [
        pool.submit(
            point_task,
            {
                "store": str(store.root),
                "params": spec,
                "instance": inst,
                "partition": part if needs_partition(spec["method"]) else None,
            },
        )
        for spec in evaluate.point_specs(params["evaluate"])
    ]
    return lambda: [f.result() for f in futures]


def _run_manifest(
    plan: RunPlan,
    store: Store,
    refs: dict[str, ArtifactRef],
    run_id: str,
    entries: dict[str, dict[str, Any]],
    fields: dict[str, Any],
    params: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """The run manifest before publication: the stages' ``entries``, their code versions (what is in each
    stage's cache key: :func:`tasks.cache.stage_code_version` of its ``params``), the flow's ``fields`` and the
    ``privacy`` / ``solve`` blocks (:func:`release_fields`) of the released files."""
    finished = _dt.datetime.now(_dt.UTC)
    solve_info = read_json(store.path(refs["solve"], "solve.json"))
    inst_meta = read_json(store.path(refs["export"], "instance.json"))
    prov = read_json(store.path(refs["measure"], audit.PROVENANCE))
    fields = fields | release_fields(inst_meta, solve_info, prov)
    code_versions = {
        st.name: stage_code_version(st.name, task_at(st.task).fn.__module__, params.get(st.name, {}))
        for st in contract.STAGES
        if st.cached
    }
    return mf.new_manifest(
        "mdp-release-manifest",
        mf.run_name(finished, run_id),
        run_id,
        finished,
        plan.config_json,
        entries,
        code_versions,
        fields,
    )
