"""Reading a published run manifest back (``runs/<run>/manifest.json``, :mod:`flows.manifest` writes it): the
draw its release used, the config as that release meant it, whatever manifest version wrote it (the
back-compatibility readers: a default that changed since is pinned to the value it had then), and the release
name retention groups it by."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flows.config import (
    DatasetConfig,
    ReleaseFlowConfig,
    method_option_specs,
    parse_config,
    release_name_of,
)
from mdp_core.declarations import dataset_kinds
from mdp_core.errors import InputError

_RELEASE_GAP_BEFORE = {2: 1e-3}  # manifest version -> the release gap then (version 1: the method's default)


def manifest_draw(path: str | Path) -> str | None:
    """The public commitment of the secret draw a run manifest's release used (None before draws existed)."""
    from mdp_core.runtime.files import read_json

    value = (read_json(path).get("privacy") or {}).get("draw_commitment")
    return value if isinstance(value, str) else None


def manifest_config(path: str | Path) -> ReleaseFlowConfig:
    """The config recorded in a run manifest (to re-run a release): equal to the config that ran.

    A manifest written before ``[release] simulate`` existed records ``n_individuals = 10000`` beside
    ``microdata`` (the old default, which does not mean simulated people): it is read as that release
    meant it -- simulated without microdata, the file's people with it (which then need a population). One
    written before ``[solve] all_pairs`` existed (no such key) was certified on the mDP graph: it is re-run with
    ``all_pairs = false``, not the release default (every pair, issue 51); a recorded null (the session-25 default
    and today's) keeps its meaning, on where the method can (:func:`flows.config.release_all_pairs`)."""
    from mdp_core.runtime.files import read_json

    m = read_json(path)
    if m.get("format") != "mdp-release-manifest" or not isinstance(m.get("config"), dict):
        raise InputError(f"{path}: not an mdp-release run manifest")
    data = dict(m["config"])
    version = m.get("version", 1)
    if version < 2:  # made before a release config's loss defaulted to distance: the loader's own
        data["dataset"] = _pinned_loss(data.get("dataset"))
    if version < 3:  # made before a release's gap defaulted to flows.config.RELEASE_GAP_REL: the gap it was solved to
        data["solve"] = _pinned_gap(data.get("solve"), version)
    solve = data.get("solve")
    if solve is None or (isinstance(solve, dict) and "all_pairs" not in solve):  # before all_pairs: the graph's
        data["solve"] = (solve or {}) | {"all_pairs": False}
    rel = data.get("release")
    if isinstance(rel, dict) and "simulate" not in rel:  # written before simulate existed
        rel = dict(rel)
        if rel.get("microdata") is None:
            rel["simulate"] = True
        else:
            rel.pop("n_individuals", None)
        data["release"] = rel
    return parse_config(data, f"{path}: config")


def _pinned_gap(solve: Any, version: int = 1) -> Any:
    """An older manifest's ``[solve]`` with the gap its release was solved to: an unset ``gap_rel`` was then the
    release gap of its version (:data:`_RELEASE_GAP_BEFORE`) or, in version 1, the method's own default (1e-6),
    not :data:`flows.config.RELEASE_GAP_REL`."""
    if not isinstance(solve, dict) or solve.get("gap_rel") is not None:
        return solve
    method = solve.get("method") or "auto"
    try:
        takes = {s.name: s for s in method_option_specs(method)}
    except (InputError, KeyError):
        return solve
    if "gap_rel" not in takes:
        return solve
    return solve | {"gap_rel": _RELEASE_GAP_BEFORE.get(version, takes["gap_rel"].default)}


def _pinned_loss(dataset: Any) -> Any:
    """A version-1 manifest's ``[dataset]`` with the loss its release was made with: where a kind's release
    config now defaults ``loss`` (:data:`mdp_core.declarations.dataset_kinds.RELEASE_DEFAULTS`) and the manifest left it
    unset, the loader's own default then ("travel"), so a year-old release re-runs to the same bytes."""
    if not isinstance(dataset, dict):
        return dataset
    kind = dataset.get("kind") or DatasetConfig.model_fields["kind"].default
    params = dataset.get("params")
    if params is None:  # the kind's default params, as written then (the loader's own loss)
        return dataset
    if "loss" in dataset_kinds.RELEASE_DEFAULTS.get(kind, {}) and "loss" not in params:
        return dataset | {"params": dict(params) | {"loss": "travel"}}
    return dataset


def manifest_release_name(manifest: dict[str, Any]) -> str | None:
    """The release name of a run manifest (its config's, :func:`release_name_of`): what the store's
    retention and usage group releases by (:meth:`artifacts.store.Store.prune_releases`)."""
    return release_name_of(manifest.get("config"))
