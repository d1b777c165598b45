"""``mdp-release export``: dataset options on the command line -> mdp_core.problem.datasets.registry.load.

Every declared parameter of every dataset kind (mdp_core.declarations.dataset_kinds.DECLARED) is an option here (``n_records`` ->
``--n-records``), with its declared type, help and default per kind; an option the chosen ``--dataset``
does not take is an error, a value its declaration refuses (``--seed -1``) one error line (exit 2). List
parameters take several values: ``--bbox S W N E``, ``--center LAT LON``, ``--words king queen``.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from mdp_core.declarations import dataset_kinds
from mdp_core.declarations.options import Spec, specs
from mdp_core.errors import InputError

if TYPE_CHECKING:
    from mdp_core.problem.instance import Instance


def options() -> dict[str, list[tuple[str, Spec]]]:
    """Every loader parameter, by name: the dataset kinds that take it and their declarations
    (each :class:`mdp_core.declarations.dataset_kinds.Kind`'s ``params``), in declaration order."""
    out: dict[str, list[tuple[str, Spec]]] = {}
    for kind in dataset_kinds.DECLARED.values():
        for s in specs(kind.params):
            out.setdefault(s.name, []).append((kind.name, s))
    return out


def _help(entries: list[tuple[str, Spec]]) -> str:
    """``grid/road: help (default ...)``, or one such part per distinct help text."""
    parts: dict[str, list[str]] = {}
    for kind, s in entries:
        parts.setdefault(s.described, []).append(kind)
    return "; ".join(f"{'/'.join(kinds)}: {text}" for text, kinds in parts.items())


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.allow_abbrev = False  # --output must not silently mean --outputs
    p.add_argument("--dataset", required=True, choices=sorted(dataset_kinds.KINDS), help="dataset kind")
    p.add_argument("--out", required=True, help="instance directory to write")
    for entries in options().values():
        first = entries[0][1]
        if any(
            (s.base, s.many, s.bounds, s.choices) != (first.base, first.many, first.bounds, first.choices)
            for _, s in entries
        ):
            first = dataclasses.replace(first, bounds={}, choices=None)  # the loader's declaration checks it
        first.add_argument(p, help=_help(entries))


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The options the user gave that the chosen loader accepts; others given are an error."""
    known = dataset_kinds.parameters(args.dataset)
    given = {n: getattr(args, n) for n in options() if hasattr(args, n)}
    wrong = sorted(set(given) - set(known))
    if wrong:
        raise InputError(
            f"--dataset {args.dataset} does not take {', '.join('--' + w.replace('_', '-') for w in wrong)}"
        )
    return given


def build_from_args(args: argparse.Namespace) -> Instance:
    from mdp_core.problem.datasets import registry

    return registry.load(args.dataset, params_from_args(args))
