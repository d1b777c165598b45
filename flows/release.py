"""The release flow: ingest -> graph -> [prior] -> partition -> export -> solve -> postprocess -> evaluate -> release.

Every stage is a cached Prefect task (``tasks/``) whose key is built from its code version, its own
parameters and the content hashes of what it reads (:mod:`tasks.cache`), so a re-run recomputes only
the stages whose inputs or code changed. The last step publishes the released files and a manifest
to ``<store>/runs/<run_name>/``.

No ``from __future__ import annotations`` here: ``flow.serve`` and deployments hand the flow to a
fresh process by pickling it, and the copy must see the real (pydantic) annotations of the flow's
parameters, not strings it cannot resolve (every scheduled run failed in 0 s that way).
"""

import datetime as _dt
import importlib
import time
from pathlib import Path
from typing import Any, cast

from prefect import Flow, flow, get_run_logger, tags
from prefect.client.schemas.objects import FlowRun
from prefect.context import FlowRunContext
from prefect.states import Cancelled, Failed, State

import flows  # noqa: F401  (binds the project packages, quiet Prefect defaults)
from artifacts.private import Draw
from artifacts.store import ArtifactRef, Store
from flows import manifest as mf
from flows import operate_ui, runner
from flows.approval import wait_for_approval
from flows.config import (
    DEFAULT_CONFIG,
    STAGE_NAMES,
    ReleaseFlowConfig,
    StageName,
    as_config,
    config_hash,
    effective_epsilon,
    manifest_release_name,
    release_name,
    store_root,
)
from flows.door import plan_for
from mdp_core.errors import Interrupted, PrivacyError, StageTimeout
from mdp_core.release import audit, signing
from mdp_core.release.door import PrivacyPlan, Settings
from mdp_core.runtime import control
from mdp_core.runtime.files import file_sha256, read_json
from mdp_core.spec import contract, dataset_kinds
from mdp_core.spec.methods import needs_partition
from tasks import evaluate, postprocess
from tasks import release as release_task
from tasks.cache import cached, package_versions, stage_code_version
from tasks.common import instance_with_graph, stage_output
from tasks.progress import watch_cancellation

STAGES = contract.CACHED_STAGES  # the cached stages in run order (mdp_core.spec.contract.STAGES; then release)
_TASKS: dict[str, Any] = {  # each cached stage's task, from its declaration (mdp_core.spec.contract.Stage.task)
    st.name: getattr(importlib.import_module(st.task.partition(":")[0]), st.task.partition(":")[2])
    for st in contract.STAGES
    if st.cached
}
SOLVE_SUMMARY = contract.MANIFEST_SOLVE_KEYS  # the manifest's solve summary: these keys of solve.json
PACKAGES = ("mdp-release", "prefect", "numpy", "scipy", "highspy", "pandas", "pyarrow", "osmnx", "gensim", "pydantic")


def stage_params(cfg: ReleaseFlowConfig) -> dict[str, dict[str, Any]]:
    """Each stage's own parameters (what goes into its cache key besides upstream hashes)."""
    inputs = {str(p): file_sha256(p) for p in dataset_kinds.input_files(cfg.dataset.kind, cfg.dataset.params)}
    s = cfg.solve
    method_args = s.method_args()  # the options of the chosen method set in [solve] (mdp_core.spec.methods)
    return {
        "ingest": {"kind": cfg.dataset.kind, "params": cfg.dataset.params, "inputs": inputs},
        "graph": {"eta": cfg.privacy.eta},
        "partition": cfg.partition.model_dump(),
        "export": {"epsilon": cfg.privacy.epsilon},
        "solve": {"method": s.method, "solver": s.solver_settings(), **s.repair_settings(), "method_args": method_args},
        # the release settings; the flow replaces them with release_params (and adds "prior") once the draw is known
        "postprocess": cfg.release.model_dump(mode="json", exclude_unset=True),
        "evaluate": cfg.evaluate.model_dump()
        | {"method": s.method, "method_args": method_args, "solver": s.solver_settings(), **s.repair_settings()},
    }


def release_params(cfg: ReleaseFlowConfig, draw: Draw, door: Settings) -> dict[str, dict[str, Any]]:
    """The ``prior`` (when not the dataset's) and ``postprocess`` stages' parameters: the release settings
    (``door``: the privacy door's, which the measuring stage plans with again), the population, the draw's
    public commitment and the secret table's HMAC under the draw (never its hash), and what the ledger needs
    (the cap the config asks for, whether the population must have one)."""
    r, p = cfg.release, cfg.privacy
    secret = {
        "microdata": r.microdata,
        "population": draw.population,
        "table_tag": draw.tag(draw.version),
        "draw": draw.commitment,
        "max_distance": r.max_distance,
        "max_total_epsilon": r.max_total_epsilon,
        "require_cap": r.microdata is not None,  # real people: a population's first release sets its cap
        "release_key": release_key(cfg),
    }
    out: dict[str, dict[str, Any]] = {
        "postprocess": secret
        | {
            "n_individuals": cfg.release.simulated_individuals,
            "eps_counts": r.eps_counts,
            "eps_prior": r.eps_prior,
            "prior_source": r.prior_source,
            "protection_radius": p.protection_radius,
            "max_stretch": p.max_stretch,
            "allow_unprotected": p.allow_unprotected,
            "door": door.as_params(),  # the door's settings: the stage plans with them again
        }
    }
    if r.prior_source == "file":
        from mdp_core.problem.microdata import sha256_regular  # numpy / pandas: only for a prior file

        out["prior"] = {"source": "file", "file": r.prior, "file_sha256": sha256_regular(r.prior, "prior")}
    elif r.prior_source == "dp":
        out["prior"] = secret | {"source": "dp", "eps_prior": r.eps_prior}
    elif r.prior_source == "uniform":
        out["prior"] = {"source": "uniform"}
    return out


def release_key(cfg: ReleaseFlowConfig) -> str:
    """What identifies a release of a draw for the budget's early check: the config without the parts that
    cannot change what is measured (run, name, store, evaluate, who approves)."""
    import hashlib
    import json

    exclude: dict[str, Any] = {"run": True, "name": True, "store": True, "evaluate": True}
    exclude["release"] = {"approval", "approval_timeout"}
    data = cfg.model_dump(mode="json", exclude=exclude)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


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


def prepare(
    config: ReleaseFlowConfig,
    store: Store,
    params: dict[str, dict[str, Any]],
    run: Any,
    note: Any = lambda what: None,
    new_draw: bool = False,
    draw: str | None = None,
) -> tuple[dict[str, ArtifactRef], Draw, PrivacyPlan, dict[str, Any] | None]:
    """The stages up to the secret draw, in the order that keeps the door shut until the budget accepts:
    ingest, graph, then the privacy door (:func:`flows.door.plan_for`: every rule of the guarantee, with the
    secret table read and validated, before anything is charged), for real people the table's population
    claimed, the population's draw for this version of the table (published releases checked against the
    private ledger) and the early budget check of the plan's charges, then prior (a DP prior is charged
    before it is measured), partition and export; simulated people are drawn once the instance is known.
    ``run(stage, **upstream)`` runs one stage (the flow: a cached Prefect task; tests: its ``.fn``);
    ``params`` (from :func:`stage_params`) gains the release's parameters. Returns ({stage: output}, the draw,
    the door's admitted plan, the officer's approval record or None: :func:`flows.approval.wait_for_approval`)."""
    refs = {"ingest": run("ingest")}
    refs["graph"] = g = run("graph", dataset=refs["ingest"])
    note("the privacy door")
    door = plan_for(config, instance_with_graph(store, refs["ingest"], g))
    plan = door.plan.admit()  # refused: PrivacyError, nothing measured, nothing charged
    approval = wait_for_approval(config, store, plan)  # [release] approval: a person first (flows/approval.py)

    def secret(population: str, version: str) -> Draw:
        note("postprocess (the secret draw)")
        d = postprocess.secret_draw(store, population, version, new_draw, draw)
        params.update(release_params(config, d, plan.settings))
        radius = {"value": plan.radius, "unit": plan.guarantee.distance_unit}
        for stage in ("prior", "postprocess"):
            if "draw" in params.get(stage, {}):
                params[stage]["radius"] = radius
        return d

    the_draw = None
    if config.release.microdata is not None:  # real people: the door (the budget) before anything is measured
        population = cast(str, config.release.population)
        postprocess.claim_table(store, cast(str, door.fingerprint), population)
        the_draw = secret(population, postprocess.table_version(config.release.microdata))
        postprocess.precheck_release(store, the_draw, params["postprocess"], plan.charges())
    signing.signing_key(store.root)  # a refused or lost signing key is refused now, before the first charge
    if config.release.prior_source != "dataset":
        refs["prior"] = run("prior", dataset=refs["ingest"], graph=g)
    refs["partition"] = run("partition", dataset=refs["ingest"], graph=g)
    refs["export"] = run("export", dataset=refs["ingest"], graph=g, prior=refs.get("prior"))
    if the_draw is None:  # simulated individuals: the table is defined by the instance and n
        n = config.release.simulated_individuals
        the_draw = secret(*postprocess.simulated_table({"instance": refs["export"].content_hash, "n": n}))
    return refs, the_draw, plan, approval


def stage_task(stage: str, config: ReleaseFlowConfig, store: Store, refresh: bool = False) -> Any:
    """The Prefect task the flow runs for ``stage`` -- each of ``STAGE_NAMES`` (``release``: the
    publication, never cached) or ``evaluate_point`` (the evaluate stage's own solves) -- with the
    config's options: its ``[run.timeouts]`` entry (evaluate_point: evaluate's) and retries where they
    help (:func:`flows.runner.task_options`); a cached stage with its cache policy (``refresh``:
    recompute and overwrite). Every task the flow runs comes from here."""
    if stage == "release":
        task = release_task.release
    elif stage == "evaluate_point":
        task = cached(evaluate.evaluate_point, "evaluate_point", store, refresh)
    else:
        task = cached(_TASKS[stage], stage, store, refresh)
    return task.with_options(**runner.task_options("evaluate" if stage == "evaluate_point" else stage, config))


def run_title(config: ReleaseFlowConfig) -> str:
    """The flow run's name: ``<release name>-<hash8 of the config>``, e.g. grid-eps10-benders-1a2b3c4d."""
    return f"{release_name(config)}-{config_hash(config)[:8]}"


def run_tags(config: ReleaseFlowConfig) -> list[str]:
    value = effective_epsilon(config)
    eps = "auto" if value is None else f"{value:g}"
    return [
        f"dataset:{config.dataset.kind}",
        f"method:{config.solve.method}",
        f"release:{release_name(config)}",
        f"eps:{eps}",
    ]


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
        config: the release configuration.
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
    stop_watching = watch_cancellation(ctx.flow_run.id) if ctx is not None and ctx.flow_run is not None else None
    try:  # SIGTERM / SIGINT request the stop (inside Prefect's own SIGTERM bridge, which cannot reach a solver)
        restore = control.install_signal_handlers()
    except ValueError:  # not the main thread: no signals here
        restore = None
    try:
        return _release(as_config(config), refresh_from, new_draw, draw)
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
    state: State[Any] = Cancelled(message=str(exc), data=exc)
    if ctx is not None and ctx.flow_run is not None:
        operate_ui.record_failure(ctx.flow_run, state, "cancelled")
    return state


def _refused(ctx: FlowRunContext | None, exc: PrivacyError) -> State[Any]:
    """The final state of a release refused by the privacy door, the budget or the officer
    (:class:`~mdp_core.errors.PrivacyError` and its subclasses): ``Failed`` named ``Refused`` with the
    refusal's one-line message and the exception as its data (``release_flow(...)`` raises it to its caller),
    after one log line and the failure record (:func:`flows.operate_ui.record_failure`, kind "refused"; the
    ``on_failure`` hook then finds it written). No traceback: a refusal is a verdict, not a crash."""
    state: State[Any] = Failed(name="Refused", message=str(exc), data=exc)
    if ctx is not None and ctx.flow_run is not None:
        get_run_logger().error("refused: %s", exc)
        operate_ui.record_failure(ctx.flow_run, state, "refused")
    return state


def _release(config: ReleaseFlowConfig, refresh_from: str | None, new_draw: bool, draw: str | None) -> dict[str, Any]:
    """The body of :func:`release_flow`: the stages (:func:`prepare`, then :func:`_solve_and_evaluate`), the
    manifest (:func:`_run_manifest`), the publication through the door, then retention."""
    if refresh_from is not None and refresh_from not in STAGE_NAMES:
        raise ValueError(f"refresh_from must be one of {list(STAGE_NAMES)}, got {refresh_from!r}")
    first_refresh = STAGES.index(refresh_from) if refresh_from in STAGES else len(STAGES)
    store = Store(store_root(config))
    store.clean_debris()  # temp / trash folders a killed run left behind (kill -9): gone before this run starts
    ctx = FlowRunContext.get()
    run_id = mf.flow_run_id()
    rname = release_name(config)
    operate_ui.tag_flow_run(ctx, run_tags(config))
    params = stage_params(config)
    entries: dict[str, dict[str, Any]] = {}
    flow_started = time.time()  # cache_hit: produced by another run that finished before this one began

    def run(stage: str, **upstream: Any) -> ArtifactRef:
        control.check(stage)  # stopped (Cancel, SIGTERM): no further stage starts
        operate_ui.at_stage(run_id, stage)
        t0 = time.perf_counter()
        task = stage_task(stage, config, store, STAGES.index(stage) >= first_refresh)
        with tags(*run_tags(config)):
            ref = stage_output(stage, task(str(store.root), params[stage], **upstream))  # stopped: Interrupted
        entries[stage] = mf.stage_entry(ref, run_id, t0, flow_started)
        return ref

    def note(what: str) -> None:
        operate_ui.at_stage(run_id, what)

    spent_before = operate_ui.ledger_snapshot(store.root)  # this run's spend = the ledger after minus before
    refs, _, _, approval = prepare(config, store, params, run, note, new_draw, draw)
    refs |= _solve_and_evaluate(config, store, params, run, refs, STAGES.index("evaluate") >= first_refresh)
    evaluate.publish_report(str(store.root), refs["evaluate"], key=rname)
    fields = {
        "started_at": flow_started,  # unix time; cache_hit = produced (ref meta produced_at) before this by another run
        "refresh_from": refresh_from,
        "package_versions": package_versions(PACKAGES),
        **({"approval": approval} if approval is not None else {}),  # the officer's approval (flows/approval.py)
    }
    manifest = _run_manifest(config, store, refs, run_id, entries, fields, params)
    control.check("release")  # a stop requested meanwhile: nothing is published
    operate_ui.at_stage(run_id, "release")
    # The door: staged, re-verified from the exact bytes (mdp_core.release.audit), published only if it checks out;
    # the exact bytes of a release already published from this config: nothing new (mf.publish_run).
    manifest = mf.publish_run(
        store,
        manifest,
        release_task.released_files(refs["solve"], refs["postprocess"], refs["evaluate"], refs["export"]),
        publish=lambda name, files, m: stage_task("release", config, store)(str(store.root), name, files, m),
    )
    run_dir = manifest["run_dir"]
    operate_ui.at_stage(run_id, f"after publication ({run_dir} is published)")
    operate_ui.after_release(store, Path(run_dir), manifest, rname, spent_before)  # runs/latest, UI artifact
    if config.run.keep_releases is not None:  # this release name's folders only (other releases: untouched)
        pruned = store.prune_releases(config.run.keep_releases, rname, manifest_release_name)
        if pruned:
            get_run_logger().info(
                "retention (keep_releases = %d): deleted %d older folder(s) of %s, microdata included: %s",
                config.run.keep_releases,
                len(pruned),
                rname,
                ", ".join(p.name for p in pruned),
            )
    return manifest


def _solve_and_evaluate(
    config: ReleaseFlowConfig,
    store: Store,
    params: dict[str, dict[str, Any]],
    run: Any,
    refs: dict[str, ArtifactRef],
    refresh_points: bool,
) -> dict[str, ArtifactRef]:
    """The solve, postprocess and evaluate stages after :func:`prepare` (``run(stage, **upstream)``): the
    evaluate stage's own solves (baselines, eps sweep) are separate cached task runs on the configured task
    runner ([run] task_runner: threads or Dask), running beside the main solve (``refresh_points``:
    recompute them). Returns {stage: output} of the three stages."""
    g, part, inst = refs["graph"], refs["partition"], refs["export"]
    point_task = stage_task("evaluate_point", config, store, refresh_points)
    remote = config.run.dask_address if config.run.task_runner == "dask" else None  # its workers' logs: here too
    with (
        runner.task_runner(config.run) as pool,
        runner.dask_logs_in_terminal(remote),
        tags(*run_tags(config)),
    ):
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
        sol = run("solve", instance=inst, partition=part if needs_partition(config.solve.method) else None)
        post = run("postprocess", instance=inst, mechanism=sol, graph=g, partition=part)
        points = [f.result() for f in futures]
    ev = run("evaluate", instance=inst, mechanism=sol, partition=part, postprocess=post, points=points)
    return {"solve": sol, "postprocess": post, "evaluate": ev}


def _run_manifest(
    config: ReleaseFlowConfig,
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
    prov = read_json(store.path(refs["postprocess"], audit.PROVENANCE))
    fields = fields | release_fields(inst_meta, solve_info, prov)
    code_versions = {s: stage_code_version(s, _TASKS[s].fn.__module__, params.get(s, {})) for s in STAGES}
    return mf.new_manifest(
        "mdp-release-manifest", mf.run_name(finished, run_id), run_id, finished, config, entries, code_versions, fields
    )
