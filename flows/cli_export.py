"""``mdp-release export``: dataset options on the command line -> mdp_core.datasets.registry.load."""

from __future__ import annotations

import argparse
from typing import Any

from mdp_core.datasets import registry
from mdp_core.instance import Instance

# option name -> (type, help); an option applies to every dataset kind whose loader has that parameter.
OPTIONS: dict[str, tuple[type, str]] = {
    "rows": (int, "grid: number of cell rows"),
    "cols": (int, "grid: number of cell columns"),
    "cell_km": (float, "grid: cell side in km"),
    "n_records": (int, "number of secret records N"),
    "n_outputs": (int, "number of outputs K"),
    "n_destinations": (int, "number of random destinations for the path-distance cost"),
    "prior": (str, "grid: 'uniform' or 'random'"),
    "dim": (int, "synthetic: dimension"),
    "sigma": (float, "synthetic: standard deviation"),
    "epsilon": (float, "privacy budget per distance unit"),
    "eta": (float, "neighbour threshold (distance unit)"),
    "seed": (int, "random seed"),
}


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, choices=sorted(registry.LOADERS), help="dataset kind")
    p.add_argument("--out", required=True, help="instance directory to write")
    for name, (typ, text) in OPTIONS.items():
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=typ, default=None, help=text)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The options the user gave that the chosen loader accepts; others given are an error."""
    known = registry.parameters(args.dataset)
    given = {n: getattr(args, n) for n in OPTIONS if getattr(args, n, None) is not None}
    wrong = sorted(set(given) - set(known))
    if wrong:
        from mdp_core.errors import InputError

        raise InputError(f"--dataset {args.dataset} does not take {', '.join('--' + w.replace('_', '-') for w in wrong)}")
    return given


def build_from_args(args: argparse.Namespace) -> Instance:
    return registry.load(args.dataset, params_from_args(args))
