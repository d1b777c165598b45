"""Issue 42: a stage's cache key comes from the declarations. A dataset kind and a solve method are added in a
package outside the repository (a module under tmp_path, registered in the registries for one test), and the
stage keys are compared: the kind's loader is in the ingest key of the releases using that kind only, a method
in the solve key of the releases using that method only, and an edited loader or method is recomputed, never
reused stale. The stages that read every declaration (prior, measure: the contract's allow-lists, the
microdata's record keys) are the only other keys a new entry moves."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from artifacts.store import Store
from flows.config import parse_config
from flows.release import stage_params, task_at
from mdp_core.declarations import contract, dataset_kinds, methods
from mdp_core.problem.datasets import registry
from mdp_core.problem.io import read_instance, read_mechanism
from mdp_core.solvers import solve as solve_mod
from tasks import evaluate, export, graph, ingest, solve
from tasks.cache import code_modules, forget_code_versions, stage_key

PKG = "mdp_cache_plugin42"
KIND, METHOD = "tiny42", "lp42"
# each cached stage's module, as the flow names it in the manifest's code versions (flows.release._run_manifest)
MODULES = {st.name: task_at(st.task).fn.__module__ for st in contract.STAGES if st.cached}
MODULES |= {"evaluate_point": evaluate.evaluate_point.fn.__module__}

HELPER = "SIGMA = 1.0\n"
LOADER = '''
"""A dataset kind declared outside mdp_core (no __future__ import: its options' types are read as objects)."""

from dataclasses import dataclass

from mdp_core.declarations.options import Options, option
from {pkg}.helper import SIGMA


@dataclass(frozen=True)
class TinyParams(Options):
    """tiny: Gaussian points."""

    n_records: int = option(8, "number of records")
    epsilon: float = option(2.0, "privacy budget per unit")
    eta: float = option(1.5, "neighbour threshold")
    seed: int = option(0, "random seed", ge=0)


def tiny(n_records=8, epsilon=2.0, eta=1.5, seed=0):
    from mdp_core.problem.datasets.synthetic import synthetic

    return synthetic(n_records=n_records, n_outputs=4, dim=2, sigma={sigma}, epsilon=epsilon, eta=eta, seed=seed)
'''
METHOD_LP = """
from mdp_core.solvers import lp


def method(instance, options, progress, params):
    return lp.method(instance, options, progress, params)
"""
METHOD_EXP = """
from mdp_core.solvers.mechanisms import exponential
from mdp_core.solvers.result import RawSolution, Status


def method(instance, options, progress, params):
    return RawSolution(exponential(instance), status=Status.FEASIBLE, lower_bound=None)
"""


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The package ``PKG`` under tmp_path (helper, loader, method modules), importable; every code version and
    the package's modules forgotten afterwards."""
    root = tmp_path / "plugins"
    (root / PKG).mkdir(parents=True)
    (root / PKG / "__init__.py").write_text("")
    write(root, "helper", HELPER)
    write(root, "loader", LOADER.format(pkg=PKG, sigma="SIGMA"))
    write(root, "method", METHOD_LP)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # a reload reads the edited source
    forget_code_versions()
    yield root
    for name in [m for m in sys.modules if m == PKG or m.startswith(f"{PKG}.")]:
        del sys.modules[name]
    forget_code_versions()


def write(root: Path, module: str, text: str) -> None:
    (root / PKG / f"{module}.py").write_text(textwrap.dedent(text).lstrip())
    importlib.invalidate_caches()


def register_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kind ``KIND`` in every table the registry of kinds is built into (removed after the test)."""
    mod = importlib.import_module(f"{PKG}.loader")
    kind = dataset_kinds.Kind(KIND, mod.TinyParams, f"{PKG}.loader:tiny")
    monkeypatch.setitem(dataset_kinds.DECLARED, KIND, kind)
    monkeypatch.setitem(dataset_kinds.PARAMETERS, KIND, kind.params)
    monkeypatch.setitem(dataset_kinds.LOADER_PATHS, KIND, kind.loader)
    monkeypatch.setitem(dataset_kinds.FILE_PARAMETERS, KIND, kind.file_parameters)
    monkeypatch.setitem(registry.LOADERS, KIND, registry.loader(kind.loader))
    forget_code_versions()


def register_method(monkeypatch: pytest.MonkeyPatch) -> None:
    """The method ``METHOD`` (the LP's options) in the registry and the solver's table (removed after the test)."""
    entry = methods.Method(f"{PKG}.method:method", methods.LpOptions, "the LP, from a plugin")
    monkeypatch.setitem(methods.REGISTRY, METHOD, entry)
    monkeypatch.setitem(solve_mod.METHODS, METHOD, entry)  # its function is imported on first use
    forget_code_versions()


def release(tmp_path: Path, method: str = "lp") -> dict[str, tuple[str, dict[str, Any]]]:
    """label -> (stage, params) of every cached stage of a grid release solved with ``method`` (the evaluate
    stage's own solves included), as flows.release.stage_params makes them."""
    cfg = parse_config(
        {
            "store": str(tmp_path / "store"),
            "dataset": {"kind": "grid", "params": {"rows": 3, "cols": 4, "n_outputs": 4}},
            "solve": {"method": "lp"},
            "release": {"simulate": True, "n_individuals": 50},
        }
    )
    p = stage_params(cfg)
    p["solve"]["method"] = p["evaluate"]["method"] = method  # the config knows the declared methods only
    out = {s: (s, p[s]) for s in p}
    out["prior"] = ("prior", {"source": "uniform"})
    out |= {f"evaluate_point[{s['method']}]": ("evaluate_point", s) for s in evaluate.point_specs(p["evaluate"])}
    return out


def keys(stages: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, str]:
    forget_code_versions()
    return {label: stage_key(stage, MODULES[stage], params, {}) for label, (stage, params) in stages.items()}


def moved(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {label for label in before if before[label] != after[label]}


TINY = {"kind": KIND, "params": {"n_records": 8}, "inputs": {}}


def test_a_kinds_loader_and_its_package_are_in_its_ingest_key_only(plugin, monkeypatch, tmp_path):
    register_kind(monkeypatch)
    assert {f"{PKG}.loader", f"{PKG}.helper"} <= set(code_modules("tasks.ingest"))  # the conservative form too
    grid = keys(release(tmp_path))
    tiny = stage_key("ingest", "tasks.ingest", TINY, {})

    write(plugin, "helper", "SIGMA = 3.0\n")  # a module the loader imports, in the loader's own package
    assert stage_key("ingest", "tasks.ingest", TINY, {}) == tiny  # the same process: versions computed once
    forget_code_versions()
    tiny_helper = stage_key("ingest", "tasks.ingest", TINY, {})
    write(plugin, "loader", LOADER.format(pkg=PKG, sigma="2 * SIGMA"))
    forget_code_versions()
    tiny_loader = stage_key("ingest", "tasks.ingest", TINY, {})

    assert len({tiny, tiny_helper, tiny_loader}) == 3
    assert keys(release(tmp_path)) == grid  # no stage of the grid release moved


def test_an_edited_loader_is_recomputed_not_reused(plugin, monkeypatch, tmp_path):
    register_kind(monkeypatch)
    store = str(tmp_path / "store")
    first = ingest.ingest.fn(store, TINY)
    assert ingest.ingest.fn(store, TINY).key == first.key  # unchanged: a cache hit

    write(plugin, "loader", LOADER.format(pkg=PKG, sigma="5 * SIGMA"))
    importlib.reload(sys.modules[f"{PKG}.loader"])  # what a new process would import
    monkeypatch.setitem(registry.LOADERS, KIND, registry.loader(dataset_kinds.DECLARED[KIND].loader))
    forget_code_versions()
    second = ingest.ingest.fn(store, TINY)

    assert second.key != first.key
    old, new = (read_instance(Store(store).root / ref.path) for ref in (first, second))
    assert not np.allclose(old.costs, new.costs)  # the edited loader's instance, not the stored one


def test_adding_a_method_or_a_kind_moves_only_the_stages_reading_every_declaration(plugin, monkeypatch, tmp_path):
    lp, auto = keys(release(tmp_path)), keys(release(tmp_path, "auto"))
    register_method(monkeypatch)
    lp_method = keys(release(tmp_path))
    register_kind(monkeypatch)
    lp_both = keys(release(tmp_path))

    # ingest, graph, partition, export, solve, evaluate and evaluate_point keep their keys; prior and
    # measure read every declaration (mdp_core.declarations.contract's allow-lists, microdata's record keys)
    assert moved(lp, lp_method) == {"prior", "measure"}
    assert moved(lp_method, lp_both) == {"prior", "measure"}
    assert "solve" in moved(auto, keys(release(tmp_path, "auto")))  # auto may run any method: it uses them all


def test_the_used_methods_module_is_in_its_solve_key_only(plugin, monkeypatch, tmp_path):
    register_method(monkeypatch)
    lp, mine = keys(release(tmp_path)), keys(release(tmp_path, METHOD))
    assert mine["solve"] != lp["solve"]

    write(plugin, "method", METHOD_EXP)
    edited = keys(release(tmp_path, METHOD))

    assert moved(mine, edited) == {"solve", "evaluate"}  # evaluate names the released method too
    assert keys(release(tmp_path)) == lp


def test_an_edited_method_is_recomputed_not_reused(plugin, monkeypatch, tmp_path):
    register_kind(monkeypatch)
    register_method(monkeypatch)
    store = str(tmp_path / "store")
    inst = ingest.ingest.fn(store, TINY)
    g = graph.graph.fn(store, {"eta": 1.5}, inst)
    exported = export.export.fn(store, {"epsilon": 2.0}, inst, g)
    params = {"method": METHOD, "solver": {}, "method_args": {}}
    first = solve.solve.fn(store, params, exported)

    write(plugin, "method", METHOD_EXP)
    importlib.reload(sys.modules[f"{PKG}.method"])
    monkeypatch.setitem(solve_mod.METHODS, METHOD, methods.REGISTRY[METHOD])  # imported again on first use
    forget_code_versions()
    second = solve.solve.fn(store, params, exported)

    assert second.key != first.key
    n, k = read_instance(Store(store).root / exported.path).costs.shape
    old, new = (read_mechanism(Store(store).path(ref, "mechanism.parquet"), n, k) for ref in (first, second))
    assert not np.allclose(old, new)  # the exponential mechanism now, not the stored LP optimum
