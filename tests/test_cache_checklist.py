"""Issue 53: the method and dataset-kind checklists (docs/architecture.md) performed on the source, in a copy of the
repository, and every stage key compared. Each state of the copy is read by a fresh process (PYTHONPATH at the
copy: nothing is monkeypatched, the registries are the edited modules' own).

* A comment, blank lines and a docstring edit in the registries' modules change no key (the key hashes code, not
  text).
* A new method with its own options class in ``methods.py`` (its module in ``mdp_core/solvers/``) and a new kind
  with its own parameters in ``dataset_kinds.py`` (its loader in ``mdp_core/problem/datasets/``) leave every key of
  the releases that use neither unchanged, except those of the stages that read every declaration (prior and
  measure; and ``auto``'s solve, which may run any method); the new method's solve key exists.
* A real change in a function a stage runs does change that stage's key (and no other method's solve key)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("mdp_core", "tasks", "flows", "artifacts")
KINDS = {"grid": {"rows": 3, "cols": 4, "n_outputs": 4}, "synthetic": {"n_records": 12, "n_outputs": 4, "dim": 2}}
EVERY_DECLARATION = {"prior", "measure"}  # the contract's allow-lists, the microdata reader's record keys

# Prints {"<kind>/<method>/<stage label>": key} for a release of each kind solved with each registered method, as
# flows.release.stage_params makes the stages' parameters (the evaluate stage's own solves included).
KEYS = """
import json
from flows.config import parse_config
from flows.release import stage_params
from mdp_core.declarations.methods import REGISTRY
from tasks import evaluate
from tasks.cache import stage_key

MODULES = {"evaluate_point": "tasks.evaluate"}
out = {}
for kind, params in json.loads(KINDS).items():
    for method in REGISTRY:
        cfg = parse_config({"store": "unused", "dataset": {"kind": kind, "params": params},
                            "solve": {"method": method}, "release": {"simulate": True, "n_individuals": 50}})
        p = stage_params(cfg)
        stages = {s: (s, p[s]) for s in p} | {"prior": ("prior", {"source": "uniform"})}
        stages |= {f"evaluate_point[{s['method']}]": ("evaluate_point", s) for s in evaluate.point_specs(p["evaluate"])}
        for label, (stage, sp) in stages.items():
            out[f"{kind}/{method}/{label}"] = stage_key(stage, MODULES.get(stage, f"tasks.{stage}"), sp, {})
print(json.dumps(out))
"""

NEW_OPTIONS = '''

@dataclass(frozen=True)
class LeapOptions(GapOptions):
    """Options of the "leap" method (mdp_core.solvers.leap): the LP, with a knob of its own."""

    stride: int = option(2, "records per leap", ge=1)
'''
NEW_ENTRY = """    "leap": Method("mdp_core.solvers.leap:method", LeapOptions, "the LP again, by leaps"),
"""
LEAP = '''"""The "leap" method: the exact LP (a method added by the checklist)."""

from mdp_core.declarations.methods import LeapOptions
from mdp_core.solvers import lp


def method(instance, options, progress, params: LeapOptions):
    return lp.method(instance, options, progress, params)
'''
NEW_PARAMS = '''

@dataclass(frozen=True)
class DotsParams(Options):
    """mdp_core.problem.datasets.dots.dots: points on a line."""

    n_records: int = option(6, "number of records")
    epsilon: float = option(2.0, "privacy budget per distance unit")
'''
NEW_KIND = """        Kind("dots", DotsParams, f"{_LOADERS}.dots:dots"),
"""
DOTS = '''"""The "dots" kind: points on a line (a kind added by the checklist)."""

from mdp_core.problem.datasets.synthetic import synthetic


def dots(n_records=6, epsilon=2.0):
    return synthetic(n_records=n_records, n_outputs=3, dim=1, epsilon=epsilon, eta=1.0, seed=0)
'''


def edit(path: Path, before: str, insert: str, *, after: bool = False) -> None:
    """Insert ``insert`` before (or after) the one occurrence of ``before`` in ``path``."""
    text = path.read_text()
    assert text.count(before) == 1, (path, before)
    path.write_text(text.replace(before, before + insert if after else insert + before))


def keys(copy: Path, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"PYTHONPATH": str(copy), "MDP_RELEASE_HOME": str(tmp_path / "home"), "KINDS": json.dumps(KINDS)}
    code = "import os; KINDS = os.environ['KINDS']\n" + KEYS
    run = subprocess.run([sys.executable, "-c", code], cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def moved(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {label for label in before if after.get(label) != before[label]}


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    """mdp_core, tasks, flows and artifacts copied under tmp_path (no bytecode: each process reads the source)."""
    root = tmp_path / "repo"
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, root / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.mark.slow
def test_the_method_and_kind_checklists_move_only_the_keys_of_what_they_add(copy, tmp_path):
    base = keys(copy, tmp_path)
    methods_py = copy / "mdp_core/declarations/methods.py"
    kinds_py = copy / "mdp_core/declarations/dataset_kinds.py"
    assert base["grid/lp/solve"] != base["grid/rowgen/solve"] != base["synthetic/lp/solve"]

    # text that is not code: a comment and blank lines in both registries, a reworded docstring
    edit(methods_py, '    "lp": Method(', "    # the exact LP: the reference every other method is checked against\n\n")
    edit(kinds_py, "_LOADERS = ", "# where the built-in loaders live\n\n\n")
    edit(methods_py, '"""Options of the ``lp`` method', " (a docstring, reworded)", after=True)
    assert keys(copy, tmp_path) == base

    # the checklists: a method with its own options class, a kind with its own parameters, their modules
    edit(methods_py, "\n\n@dataclass(frozen=True)\nclass Method:", NEW_OPTIONS)
    edit(methods_py, "}\nMETHOD_NAMES", NEW_ENTRY)
    (copy / "mdp_core/solvers/leap.py").write_text(LEAP)
    edit(kinds_py, "\n\n@dataclass(frozen=True)\nclass Kind:", NEW_PARAMS)
    edit(kinds_py, "    )\n}\nKINDS", NEW_KIND)
    (copy / "mdp_core/problem/datasets/dots.py").write_text(DOTS)
    added = keys(copy, tmp_path)

    assert {"grid/leap/solve", "synthetic/leap/solve"} <= set(added)
    stays = {label for label in base if label.split("/")[2] not in EVERY_DECLARATION and "/auto/" not in label}
    assert not moved(base, added) & stays  # every solve but auto's, every ingest, graph, export, evaluate ...
    assert {label.split("/")[2] for label in moved(base, added)} <= EVERY_DECLARATION | {"solve", "evaluate"}
    assert "grid/auto/solve" in moved(base, added)  # auto may run the new method

    # lp's module: a comment and a docstring change no key; a real change in its method moves the solves that run
    # it (lp, and auto and leap, which import it), not rowgen's or the baselines'
    lp_py = copy / "mdp_core/solvers/lp.py"
    edit(lp_py, "\ndef method(", "\n# the registry's entry point")
    edit(lp_py, '"""The "lp" entry of', " (a docstring is not code)", after=True)
    assert keys(copy, tmp_path) == added
    edit(lp_py, "    res = solve_lp(instance, options, progress)\n", "    progress = None  # a change of code\n")
    changed = keys(copy, tmp_path)
    solves = {label for label in moved(added, changed) if label.endswith("/solve")}
    assert {"grid/lp/solve", "synthetic/lp/solve", "grid/leap/solve", "grid/auto/solve"} <= solves
    assert not solves & {
        "grid/rowgen/solve",
        "grid/colgen/solve",
        "grid/exp/solve",
        "grid/laplace/solve",
        "synthetic/exp/solve",
    }
