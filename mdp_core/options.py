"""Option dataclasses as the one source of truth: defaults, help texts and command-line arguments.

Each method's options are a frozen dataclass (``lp.LpOptions``, ``colgen.ColgenOptions``,
``benders.BendersOptions``, ...; the HiGHS settings are ``highs.SolverOptions``). A field's
default is the option's default; its ``metadata`` may hold ``help``, ``choices``, ``metavar`` and
``cli=False`` (not a command-line option, e.g. Benders' ``labels`` array). The pydantic config
(flows/config.py) and the command line (flows/cli.py) read them through these helpers.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Callable, Iterable
from typing import Any

from mdp_core.errors import InputError

_BOUNDS = (
    ("ge", ">=", lambda v, b: v >= b),
    ("gt", ">", lambda v, b: v > b),
    ("le", "<=", lambda v, b: v <= b),
    ("lt", "<", lambda v, b: v < b),
)


def validate(obj: Any) -> None:
    """Check an options dataclass against its fields' declared constraints (scikit-learn style: one
    table, one message format). ``metadata`` keys: ``integer`` (bool), ``ge`` / ``gt`` / ``le`` /
    ``lt`` (bounds; NaN fails them), ``choices``. Raises InputError naming the field."""
    for f in dataclasses.fields(obj):
        v, meta = getattr(obj, f.name), f.metadata
        if meta.get("integer") and (isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v):
            raise InputError(f"{f.name} must be an integer, got {v!r}")
        bounds = [(sym, b, ok) for key, sym, ok in _BOUNDS if (b := meta.get(key)) is not None]
        if bounds and not (isinstance(v, (int, float)) and all(ok(v, b) for _, b, ok in bounds)):
            need = " and ".join(f"{sym} {b:g}" for sym, b, _ in bounds)
            raise InputError(f"{f.name} must be {need}, got {v!r}")
        if "choices" in meta and isinstance(v, str) and v not in meta["choices"]:
            raise InputError(f"{f.name} must be one of {tuple(meta['choices'])}, got {v!r}")


def fields_of(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def default(cls: type, name: str) -> Any:
    f = fields_of(cls)[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise KeyError(f"{cls.__name__}.{name} has no default")


def help_text(cls: type, name: str) -> str | None:
    return fields_of(cls)[name].metadata.get("help")


def _base_type(tp: Any) -> Any:
    """int / float / str / bool / tuple element type of an annotation (``str | Executor`` -> str)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) is tuple:
        return (tuple, args[0])
    if args:  # a union: its first plain type
        plain = [a for a in args if a in (int, float, str, bool)]
        return plain[0] if plain else None
    return tp if tp in (int, float, str, bool) else None


def add_arguments(
    group: Any,
    classes: Iterable[type],
    skip: Iterable[str] = (),
    types: dict[str, Callable[[str], Any]] | None = None,
    suppress: bool = True,
) -> list[str]:
    """Add ``--field-name`` arguments for the fields of ``classes`` (argparse group or parser).

    Fields named in ``skip``, fields with ``metadata["cli"] is False`` and fields of types the
    command line cannot express are left out; a name shared by several classes is added once.
    With ``suppress`` an argument not given on the command line is absent from the namespace (so
    the method's own default applies); otherwise its default is the dataclass default.
    ``types`` overrides the parser of a field. Returns the destinations added.
    """
    seen = set(skip)
    added: list[str] = []
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name in seen or f.metadata.get("cli", True) is False:
                continue
            base = _base_type(hints[f.name])
            if base is None:
                continue
            seen.add(f.name)
            kw: dict[str, Any] = {"dest": f.name, "help": f.metadata.get("help")}
            kw["default"] = argparse.SUPPRESS if suppress else default(cls, f.name)
            if "metavar" in f.metadata:
                kw["metavar"] = f.metadata["metavar"]
            if base is bool:
                kw["action"] = argparse.BooleanOptionalAction
            elif isinstance(base, tuple):
                kw |= {"nargs": "+", "type": base[1]}
            else:
                kw["type"] = (types or {}).get(f.name, base)
                if "choices" in f.metadata:
                    kw["choices"] = list(f.metadata["choices"])
            group.add_argument("--" + f.name.replace("_", "-"), **kw)
            added.append(f.name)
    return added
