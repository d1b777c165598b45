"""The checklists of docs/architecture.md, each repeated as written (issue 42).

Each test copies the repository's source packages into a temporary folder, makes there exactly the edits its
checklist names -- every file it touches must be named by the checklist's text (:func:`touch`) --, runs the
generators the checklist names (its ``python docs/gen_config.py ...`` commands, as written), then runs the
affected path in a fresh interpreter on the copy (``PYTHONPATH`` and working folder the copy, every module
imported from it): the entry itself (a solve, a load, a table written and read back), the copy's tests of the
generated documents and of the declarations' listings, and a small release through the flow's stage loop
(``conftest.run_stages``: ``flows.release.run_stages``, each stage's task ``.fn``) published through the publishing
task's door (``conftest.publish_release``: signed, audited from the exact bytes) and audited clean.

"Add a stage" is repeated by ``tests/test_stages.py::test_an_added_stage_runs_in_its_declared_place`` (a
declared stage and its task run by ``run_stages`` in their declared place): checked here to exist only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("mdp_core", "tasks", "flows", "artifacts", "docs")
# beside the packages: what the copy's own tests read (pyproject's markers, the README the docs link to) and the
# tests the experiments run on the copy (conftest: publish_release)
FILES = (
    "pyproject.toml",
    "README.md",
    *(f"tests/{n}.py" for n in ("conftest", "test_docs", "test_registry", "test_config")),
)
QUIET = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "MPLBACKEND": "Agg"}
TESTED_ELSEWHERE = {"Add a stage": ("tests/test_stages.py", "def test_an_added_stage_runs_in_its_declared_place")}


def checklists() -> dict[str, str]:
    """docs/architecture.md's checklists: {title: its text}, e.g. ``"Add a solve method"``."""
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text[text.index("\n## Checklists\n") :]
    section = section[: section.find("\n## ", 1)] if "\n## " in section[1:] else section
    parts = re.split(r"^\*\*(.+?)\.\*\*\n", section, flags=re.M)
    return {title: body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def named(checklist: str, path: str) -> bool:
    """Whether ``checklist`` names the file ``path`` (relative, POSIX): its path, its folder as a folder
    (`` `mdp_core/solvers/` ``), its module or package (`` `mdp_core.release` ``), or a link to the document
    (``[methods.md](methods.md)``)."""
    p = Path(path)
    module, package = ".".join(p.with_suffix("").parts), ".".join(p.parent.parts)
    candidates = (path, f"`{p.parent.as_posix()}/`", f"`{module}`", f"`{package}`", f"]({p.name})", f"]({p.name}#")
    return any(c in checklist for c in candidates)


def touch(root: Path, checklist: str, path: str, old: str | None, new: str) -> None:
    """The checklist's edit of ``path`` in the copy at ``root``: ``old`` (present exactly once) replaced by
    ``new``, or (``old`` None) a new file. ``path`` must be named by ``checklist``."""
    assert named(checklist, path), f"the checklist does not name {path}, which its addition needs"
    target = root / path
    if old is None:
        assert not target.exists(), path
        target.write_text(textwrap.dedent(new).lstrip())
        return
    text = target.read_text()
    assert text.count(old) == 1, f"{path}: the text this experiment edits has changed: {old!r}"
    target.write_text(text.replace(old, new))


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    """The repository's source packages, documents and the tests the experiments run, copied (no .git, no
    store, no caches)."""
    root = tmp_path / "repo"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in PACKAGES:
        shutil.copytree(
            REPO / name,
            root / name,
            ignore=lambda d, names: skip(d, names) | ({"store"} if Path(d) == REPO / "artifacts" else set()),
        )
    for name in FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name)
    return root


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PYTHONPATH")} | QUIET
    home = root.parent / "home"
    return env | {
        "PYTHONPATH": str(root),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PREFECT_HOME": str(home / "prefect"),
        "MDP_RELEASE_HOME": str(home / "mdp"),
        "MDP_RELEASE_STORE": str(home / "store"),
    }


def regenerate(root: Path, checklist: str) -> list[str]:
    """Run, in the copy, each generator command the checklist names (``python docs/gen_config.py ...``, as
    written); the commands."""
    commands = re.findall(r"`(python docs/gen_config\.py[^`]*)`", checklist)
    for command in commands:
        subprocess.run(
            ["bash", "-c", command.replace("python ", f"{sys.executable} ", 1)],
            cwd=root,
            env=_env(root),
            check=True,
            timeout=120,
        )
    return commands


# The interpreter on the copy: every module of the project imported from it; the copy's tests of the generated
# documents and of the registries' listings; a small release through the flow's stage loop, published through
# the publishing task's door, audited. Then the experiment's own script, which prints its facts as one JSON line.
DRIVER = '''
import json, sys, tempfile
from pathlib import Path

ROOT = Path.cwd()
sys.path.insert(0, str(ROOT / "tests"))
import conftest, test_docs, test_registry
from artifacts.store import Store
from flows.config import parse_config
from mdp_core.release import audit


def from_copy():
    """Every module of the project this interpreter imported is the copy's."""
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("mdp_core", "tasks", "flows", "artifacts") and getattr(module, "__file__", None):
            assert Path(module.__file__).is_relative_to(ROOT), f"{name} was imported from {module.__file__}"


from_copy()


def docs_current():
    """The copy's generated documents are current and list what the registries declare."""
    test_docs.test_configuration_reference_is_generated()
    test_docs.test_published_columns_table_is_generated()
    test_docs.test_published_columns_table_is_the_audit_allow_list()
    test_registry.test_docs_list_exactly_the_registered_kinds_and_methods()


SMALL = {  # a 3 x 3 grid, simulated people, no baseline, one eps: every stage in about 2 s
    "dataset": {"kind": "grid", "params": {"rows": 3, "cols": 3, "n_outputs": 4, "seed": 2}},
    "privacy": {"epsilon": 3.0, "eta": 2.0},
    "release": {"simulate": True, "n_individuals": 50},
    "evaluate": {"baselines": [], "eps_factors": [1.0], "counts_eps": [1.0], "counts_seeds": 1},
}


def release(**sections):
    """A release of SMALL with ``sections`` replaced: every stage through the flow's own loop with the tasks' .fn
    (conftest.run_stages), published by the publishing task (its door audits the staged folder), audited
    again: the folder."""
    store = tempfile.mkdtemp(dir=ROOT.parent)
    cfg = parse_config(SMALL | sections | {"store": store})
    folder = conftest.publish_release(Store(store), conftest.run_stages(store, cfg), cfg=cfg)
    findings = audit.audit_release(folder)
    assert not findings, findings
    return folder
'''


def run_in(root: Path, script: str) -> dict:
    """:data:`DRIVER` then ``script`` in a fresh interpreter on the copy; the JSON line it prints last."""
    driver = root.parent / "experiment.py"
    driver.write_text(DRIVER + textwrap.dedent(script) + "from_copy()\n")
    proc = subprocess.run(
        [sys.executable, str(driver)], cwd=root, env=_env(root), capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, f"the experiment failed on the copy:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_checklist_is_repeated_here_or_named() -> None:
    here = Path(__file__).read_text()
    for title in checklists():
        if title in TESTED_ELSEWHERE:
            where, needle = TESTED_ELSEWHERE[title]
            assert where in checklists()[title], f"{title}: the checklist does not name {where}"
            assert needle in (REPO / where).read_text(), f"{title}: {where} has no {needle!r}"
        else:
            assert f'checklists()["{title}"]' in here, f"no test repeats the checklist {title!r}"


@pytest.mark.slow  # 46-74 s each under load (issue 53): a copy's own tests run
def test_add_a_solve_method(copy: Path) -> None:
    """A ``uniform`` baseline (every output equally likely: eps-mDP for every eps) added as the checklist says
    is solved and certified, listed by the documents and released by the flow."""
    checklist = checklists()["Add a solve method"]
    touch(
        copy,
        checklist,
        "mdp_core/declarations/methods.py",
        "@dataclass(frozen=True)\nclass Method:",
        '@dataclass(frozen=True)\nclass UniformOptions(Options):\n    """The uniform mechanism has no options."""'
        "\n\n\n@dataclass(frozen=True)\nclass Method:",
    )
    touch(
        copy,
        checklist,
        "mdp_core/declarations/methods.py",
        "\n}\nMETHOD_NAMES",
        '\n    "uniform": Method("mdp_core.solvers.uniform:method", UniformOptions, "every output equally likely", '
        "baseline=True),\n}\nMETHOD_NAMES",
    )
    touch(
        copy,
        checklist,
        "mdp_core/solvers/uniform.py",
        None,
        '''
        """The uniform mechanism: each record released as each output with probability 1 / K (every row the
        same, so eps-mDP for every eps); a baseline, with no lower bound."""

        from __future__ import annotations

        import numpy as np

        from mdp_core.declarations.methods import UniformOptions
        from mdp_core.declarations.solver_options import SolverOptions
        from mdp_core.problem.instance import Instance
        from mdp_core.solvers.result import RawSolution, Status


        def method(instance: Instance, options: SolverOptions, progress, params: UniformOptions) -> RawSolution:
            n, k = instance.costs.shape
            return RawSolution(np.full((n, k), 1.0 / k), status=Status.FEASIBLE, lower_bound=None)
        ''',
    )
    touch(
        copy,
        checklist,
        "docs/methods.md",
        "`constopt` (ConstOPTMech, Imola et al. 2022)",
        "`constopt` (ConstOPTMech, Imola et al. 2022), `uniform` (every output equally likely)",
    )
    assert regenerate(copy, checklist) == ["python docs/gen_config.py > docs/configuration.md"]
    assert '\\| "uniform"' in (copy / "docs" / "configuration.md").read_text()

    facts = run_in(
        copy,
        """
        import pandas as pd
        from mdp_core.problem.datasets.grid import grid
        from mdp_core.solvers.solve import solve

        import test_config

        docs_current()
        test_config.test_each_method_option_is_declared_once_and_read_everywhere()  # its module, flags, [solve]
        sol = solve(grid(3, 3, n_outputs=4, eta=2.0), "uniform")
        folder = release(solve={"method": "uniform"})
        mechanism = pd.read_parquet(folder / "mechanism.parquet")
        print(json.dumps({
            "status": str(sol.status), "passed": bool(sol.certificate.passed), "z": sol.z.tolist(),
            "released": json.loads((folder / "solve.json").read_text())["method"],
            "probabilities": sorted(set(mechanism["prob"].round(12))),
        }))
        """,
    )
    assert facts["passed"] and "feasible" in facts["status"].lower()
    assert all(row == [0.25] * 4 for row in facts["z"])
    assert facts["released"] == "uniform" and facts["probabilities"] == [0.25]


GEOJSON = {
    "type": "FeatureCollection",
    "features": [
        {
            "type": "Feature",
            "geometry": {"type": "Point", "coordinates": [24.93 + 0.004 * (i % 3), 60.17 + 0.004 * (i // 3)]},
            "properties": {"name": f"stop {i}"},
        }
        for i in range(9)
    ],
}


@pytest.mark.slow  # 46-74 s each under load (issue 53): a copy's own tests run
def test_add_a_dataset_kind(copy: Path) -> None:
    """A ``geojson`` kind (each Point feature a public record, its ``name`` published) added as the checklist
    says is loaded through the registry, listed by the documents and released by the flow, ``name`` included."""
    checklist = checklists()["Add a dataset kind"]
    touch(
        copy,
        checklist,
        "mdp_core/declarations/dataset_kinds.py",
        "@dataclass(frozen=True)\nclass Kind:",
        '''@dataclass(frozen=True)
class GeojsonParams(Options):
    """mdp_core.problem.datasets.geojson.geojson: the Point features of a GeoJSON file (haversine km)."""

    path: str = option(help="GeoJSON FeatureCollection of Point features, each with a public name")
    epsilon: float = option(10.0, "privacy budget per distance unit (1 / km)")
    eta: float = option(2.0, "neighbour threshold (km)")


@dataclass(frozen=True)
class Kind:''',
    )
    touch(
        copy,
        checklist,
        "mdp_core/declarations/dataset_kinds.py",
        "\n    )\n}\nKINDS: tuple[str, ...] = tuple(DECLARED)",
        '\n        Kind("geojson", GeojsonParams, f"{_LOADERS}.geojson:geojson", file_parameters=("path",), '
        'public_columns=frozenset({"name"})),\n    )\n}\nKINDS: tuple[str, ...] = tuple(DECLARED)',
    )
    touch(
        copy,
        checklist,
        "mdp_core/declarations/contract.py",
        "osmid:int64 word:large_string",
        "osmid:int64 word:large_string name:large_string",
    )
    touch(
        copy,
        checklist,
        "mdp_core/problem/datasets/geojson.py",
        None,
        '''
        """GeoJSON points: each Point feature of a FeatureCollection is a public record (lat, lon: haversine km) and
        an output; its ``name`` property is published in records.parquet; c_ik = d(r_i, o_k)."""

        from __future__ import annotations

        import json
        from pathlib import Path

        import numpy as np

        from mdp_core.declarations.dataset_kinds import GeojsonParams
        from mdp_core.problem.datasets.common import from_points
        from mdp_core.problem.instance import Instance
        from mdp_core.problem.metrics import haversine_km
        from mdp_core.runtime.files import file_sha256


        def geojson(path: str, epsilon: float = GeojsonParams.epsilon, eta: float = GeojsonParams.eta) -> Instance:
            features = json.loads(Path(path).read_text())["features"]
            lon_lat = np.array([f["geometry"]["coordinates"] for f in features], dtype=np.float64)
            pts = lon_lat[:, ::-1].copy()
            names = np.array([str(f["properties"]["name"]) for f in features], dtype=object)
            return from_points(
                pts,
                "haversine",
                eta,
                epsilon,
                haversine_km(pts, pts),
                output_record_ids=np.arange(len(pts)),
                extra_columns={"name": names},
                provenance={
                    "dataset": "geojson",
                    "generator": "mdp_core.problem.datasets.geojson",
                    "parameters": {"n_records": len(pts)},
                    "source": {"path": Path(path).name, "sha256": file_sha256(path)},
                },
            )
        ''',
    )
    touch(
        copy,
        checklist,
        "docs/datasets.md",
        "\n| `points` |",
        "\n| `geojson` | a GeoJSON FeatureCollection of Point features (`--path`), each one's `name` published "
        "| haversine km; c_ik = d(r_i, o_k) |\n| `points` |",
    )
    regenerate(copy, checklist)
    assert '### kind = "geojson"' in (copy / "docs" / "configuration.md").read_text()
    places = copy.parent / "places.geojson"
    places.write_text(json.dumps(GEOJSON))

    facts = run_in(
        copy,
        f"""
        import pandas as pd
        from mdp_core.problem.datasets import registry

        docs_current()
        test_registry.test_loader_takes_exactly_its_declared_parameters("geojson")
        inst = registry.load("geojson", {{"path": {str(places)!r}, "eta": 0.6}})
        folder = release(
            dataset={{"kind": "geojson", "params": {{"path": {str(places)!r}}}}},
            privacy={{"epsilon": 3.0, "eta": 0.6}},
        )
        records = pd.read_parquet(folder / "instance" / "records.parquet")
        print(json.dumps({{
            "loaded": [inst.n_records, inst.n_outputs, inst.metric], "names": list(inst.records["name"]),
            "published": list(records.columns), "released": list(records["name"]),
        }}))
        """,
    )
    names = [f"stop {i}" for i in range(9)]
    assert facts["loaded"] == [9, 9, "haversine"] and facts["names"] == names
    assert "name" in facts["published"] and facts["released"] == names


@pytest.mark.slow  # 46-74 s each under load (issue 53): a copy's own tests run
def test_add_a_published_column(copy: Path) -> None:
    """A ``label`` column of utility_vs_eps.parquet added as the checklist says is written by write_published in
    its declared place and type, allowed by the audit, listed by privacy.md's generated table and published by
    the flow."""
    checklist = checklists()["Add a published column"]
    touch(
        copy,
        checklist,
        "mdp_core/declarations/tables.py",
        'cols("factor:double epsilon:double method:large_string expected_loss:double")',
        'cols("factor:double epsilon:double method:large_string expected_loss:double label:large_string")',
    )
    touch(
        copy,
        checklist,
        "mdp_core/release/report_plots.py",
        '    utility = pd.DataFrame(sweep).sort_values(["method", "epsilon"], kind="stable").reset_index(drop=True)\n',
        '    utility = pd.DataFrame(sweep).sort_values(["method", "epsilon"], kind="stable").reset_index(drop=True)\n'
        '    utility["label"] = [f"{m} at {f:g} x eps" for m, f in zip(utility["method"], utility["factor"])]\n',
    )
    assert regenerate(copy, checklist) == ["python docs/gen_config.py --privacy"]
    assert "`label` large_string |" in (copy / "docs" / "privacy.md").read_text()

    facts = run_in(
        copy,
        """
        import pyarrow.parquet as pq
        from mdp_core.errors import InputError
        from mdp_core.problem.io import read_table, write_published

        docs_current()
        name = "utility_vs_eps.parquet"
        out = Path(tempfile.mkdtemp(dir=ROOT.parent)) / name
        cols = {"label": ["lp at 1 x eps"], "method": ["lp"], "expected_loss": [0.5], "epsilon": [2.0], "factor": [1.0]}
        write_published(out, cols, name)
        schema = {f.name: str(f.type) for f in pq.read_schema(out)}
        try:
            write_published(out, {k: v for k, v in cols.items() if k != "label"}, name)
            refused = False
        except InputError:
            refused = True
        folder = release()
        published = read_table(folder / name)
        print(json.dumps({
            "schema": schema, "read": read_table(out)["label"].tolist(), "missing_refused": refused,
            "allowed": sorted(audit.COLUMNS[name]), "published": published["label"].tolist(),
        }))
        """,
    )
    assert facts["schema"] == {
        "factor": "double",
        "epsilon": "double",
        "method": "large_string",
        "expected_loss": "double",
        "label": "large_string",
    }
    assert facts["read"] == ["lp at 1 x eps"] and facts["missing_refused"] and "label" in facts["allowed"]
    assert facts["published"] and all(label.endswith(" at 1 x eps") for label in facts["published"])
