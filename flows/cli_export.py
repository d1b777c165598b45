"""``mdp-release export``: dataset options on the command line -> mdp_core.datasets.registry.load.

Every parameter of every loader in ``registry.LOADERS`` has an option here (``n_records`` ->
``--n-records``); an option the chosen ``--dataset`` does not take is an error. List parameters take
several values: ``--bbox S W N E``, ``--center LAT LON``, ``--words king queen``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from mdp_core import loaders  # the kinds and their parameters, without importing a loader
from mdp_core.errors import InputError

if TYPE_CHECKING:
    from mdp_core.instance import Instance

# option name -> (type, nargs or None, help); an option applies to every dataset kind whose loader
# has a parameter of that name.
OPTIONS: dict[str, tuple[type, int | str | None, str]] = {
    # shared
    "n_records": (int, None, "road/text/synthetic: number of secret records N"),
    "n_outputs": (
        int,
        None,
        "number of outputs K (a seeded subset of the records; default all / 100 for grid, synthetic)",
    ),
    "epsilon": (float, None, "privacy budget per distance unit"),
    "eta": (float, None, "neighbour threshold (distance unit: km for grid/road/lat-lon points)"),
    "seed": (int, None, "random seed"),
    "n_destinations": (int, None, "grid/road: number of random destinations for the path-distance cost"),
    # grid
    "rows": (int, None, "grid: number of cell rows"),
    "cols": (int, None, "grid: number of cell columns"),
    "cell_km": (float, None, "grid: cell side in km"),
    "prior": (str, None, "grid: 'uniform' or 'random'"),
    "road_nodes": (str, None, "grid: osmnx nodes file (CSV/GeoPackage) for LR-Geo road-path costs"),
    "road_edges": (str, None, "grid: osmnx edges file (CSV/GeoPackage) for LR-Geo road-path costs"),
    "road_osm": (str, None, "grid: OSM XML file (.osm/.osm.bz2) for LR-Geo road-path costs"),
    "road_pbf": (str, None, "grid: OSM PBF file for LR-Geo road-path costs (needs pyrosm)"),
    "anchor_lat": (float, None, "grid: latitude of the grid's south-west corner"),
    "anchor_lon": (float, None, "grid: longitude of the grid's south-west corner"),
    # synthetic
    "dim": (int, None, "synthetic: dimension"),
    "sigma": (float, None, "synthetic: standard deviation"),
    # road
    "nodes": (str, None, "road: osmnx nodes file (CSV or GeoPackage: osmid, x, y)"),
    "edges": (str, None, "road: osmnx edges file (CSV or GeoPackage: u, v, key, length)"),
    "osm": (str, None, "road: OSM XML file (.osm or .osm.bz2)"),
    "pbf": (str, None, "road: OSM PBF file (read with pyrosm)"),
    "bbox": (float, 4, "road: download this box (S W N E degrees; needs network access)"),
    "network_type": (str, None, "road: 'driving', 'walking', 'cycling' or 'all' (PBF and download)"),
    "region_bbox": (float, 4, "road: sample records inside this box (S W N E degrees)"),
    "center": (float, 2, "road: sample records within --radius-km of this point (LAT LON)"),
    "radius_km": (float, None, "road: radius of the circular target region in km"),
    "destinations": (int, "+", "road: destination osmids (instead of random destinations)"),
    "destination_weights": (float, "+", "road: weights of --destinations (normalised)"),
    # text
    "vectors": (str, None, "text: word-vector file (word2vec text/binary, gensim .kv) or 'glove-6b-50d'"),
    "corpus": (str, None, "text: train Word2Vec on this file (one sentence per line)"),
    "words": (str, "+", "text: explicit vocabulary (instead of sampling N words)"),
    "n_neighbours": (int, None, "text: nearest neighbours in the vocabulary sampling (default 50)"),
    "vocab_limit": (int, None, "text: sample only among the first this many words of the file"),
    "eta_fraction": (float, None, "text: default eta as a fraction of the median vector norm"),
    "vector_size": (int, None, "text: Word2Vec dimension (with --corpus)"),
    "epochs": (int, None, "text: Word2Vec epochs (with --corpus)"),
    "min_count": (int, None, "text: Word2Vec minimum word count (with --corpus)"),
    # points
    "path": (str, None, "points: records file (CSV or Parquet; lat/lon or numeric columns, optional id, weight)"),
    "outputs": (str, None, "points: outputs file (same coordinate columns, optional id)"),
    "costs": (str, None, "points: cost file (record_id, output_id, cost)"),
    "columns": (str, "+", "points: numeric coordinate columns to use (Euclidean metric)"),
}


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.allow_abbrev = False  # --output must not silently mean --outputs
    p.add_argument("--dataset", required=True, choices=sorted(loaders.KINDS), help="dataset kind")
    p.add_argument("--out", required=True, help="instance directory to write")
    for name, (typ, nargs, text) in OPTIONS.items():
        flag = "--" + name.replace("_", "-")
        metavar = None if nargs is None else name.upper().rstrip("S")
        p.add_argument(flag, dest=name, type=typ, nargs=nargs, default=None, help=text, metavar=metavar)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The options the user gave that the chosen loader accepts; others given are an error."""
    known = loaders.parameters(args.dataset)
    given = {n: getattr(args, n) for n in OPTIONS if getattr(args, n, None) is not None}
    wrong = sorted(set(given) - set(known))
    if wrong:
        raise InputError(
            f"--dataset {args.dataset} does not take {', '.join('--' + w.replace('_', '-') for w in wrong)}"
        )
    return given


def build_from_args(args: argparse.Namespace) -> Instance:
    from mdp_core.datasets import registry

    return registry.load(args.dataset, params_from_args(args))
