"""The report's plain words name the pairs the stated rate is for (issue 51): a release certified over every pair
of a component in the metric (``[solve] all_pairs``) says "for any two records", as its provenance statement and
``check`` do; one certified on the mDP graph says "within the protection radius". The words follow the claim
``every_pair`` (the certificate's ``pairs`` "all"); a report whose claims predate it keeps the words it was rendered
with, and still audits clean.

One real release per mode (the flow's stage loop, real HiGHS, no Prefect server) on conftest's 4 x 5 grid,
published and audited: conftest's session release for the graph, and the same grid at eta 1.2 km (the diagonals
are not edges: the graph's stretch is above 1) solved over every pair.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import claims_of, publish_release, rehash, run_stages

from artifacts.store import Store
from flows.config import parse_config
from mdp_core.release import audit, report
from mdp_core.runtime.files import read_json

ANY = "for any two records"
WITHIN = "within the protection radius"


def config(root: Path):
    """eps 3 / km, eta 1.2 km, the exact LP over every pair, 200 simulated people."""
    return parse_config(
        {
            "store": str(root),
            "dataset": {"kind": "grid", "params": {"rows": 4, "cols": 5, "n_outputs": 6, "seed": 2}},
            "privacy": {"epsilon": 3.0, "eta": 1.2},
            "solve": {"method": "lp", "all_pairs": True},
            "release": {"simulate": True, "n_individuals": 200},
            "evaluate": {"eps_factors": [1.0], "baselines": ["exp"]},
        }
    )


@pytest.fixture(scope="module", params=[False, True], ids=["graph", "every-pair"])
def release(request, tmp_path_factory) -> tuple[bool, Path]:
    """(every pair?, the published folder): the graph's is conftest's session release (eta 2 km), never edited."""
    if not request.param:
        return False, request.getfixturevalue("released")
    root = tmp_path_factory.mktemp("store")
    cfg = config(root)
    return True, publish_release(Store(root), run_stages(root, cfg), cfg=cfg)


def bullet(text: str, name: str) -> str:
    """The officer's page's bullet ``- **name.** ...`` (one line)."""
    return next(line for line in text.splitlines() if line.startswith(f"- **{name}.**"))


def test_the_plain_words_name_the_pairs_of_the_certificate(release):
    every, folder = release
    text = (folder / "report.md").read_text()
    assert claims_of(folder)["every_pair"] is every
    guarantee, laplace = bullet(text, "Guarantee"), bullet(text, "Against planar Laplace")
    for line in (guarantee, laplace):
        assert (ANY in line) is every and (WITHIN in line) is not every, line
    checks = bullet(text, "Checks")
    assert ("and every other pair of one component, in the metric" in checks) is every
    if every:  # as the provenance's statement says it
        assert read_json(folder / audit.PROVENANCE)["guarantee"]["statement"].startswith(f"eps 3 per km {ANY}")
    assert audit.audit_release(folder) == []


def test_claims_without_the_key_keep_the_words_they_were_rendered_with(release, tmp_path):
    """A report made before the claim existed (its claims without ``every_pair``) re-renders, character for
    character, with the words of the graph's scope, and audits clean; a claim edited to say every pair over a
    graph certificate is a finding."""
    every, folder = release
    run = tmp_path / "run"
    shutil.copytree(folder, run)
    old = {k: v for k, v in claims_of(run).items() if k != "every_pair"}
    rendered = report.render_report(old, report.evaluation_markdown(run / "evaluation.parquet"), pngs(run))
    assert WITHIN in bullet(rendered, "Guarantee") and ANY not in bullet(rendered, "Guarantee")
    (run / "report.md").write_text(rendered)
    rehash(run, "report.md")
    assert audit.audit_release(run) == []
    if not every:
        forged = old | {"every_pair": True}
        (run / "report.md").write_text(
            report.render_report(forged, report.evaluation_markdown(run / "evaluation.parquet"), pngs(run))
        )
        rehash(run, "report.md")
        assert any("every_pair" in f for f in audit.audit_release(run))


def pngs(run: Path) -> frozenset[str]:
    return frozenset(p.name for p in run.glob("*.png"))
