"""How an option is declared, once: its name, type, default, help text and constraints.

Options are fields of frozen dataclasses deriving from :class:`Options` and declared with
:func:`option`: the solve methods' (:mod:`mdp_core.declarations.methods`), the HiGHS settings
(:mod:`mdp_core.declarations.solver_options`) and the dataset loaders' parameters (:mod:`mdp_core.declarations.dataset_kinds`). Those
modules import no numerical library and do not postpone their annotations, so a field's type is the real
type object: the command line (flows/cli.py, flows/cli_export.py), the release config and its Prefect
parameter schema (flows/config.py) and the method itself read the same field, through :func:`specs`,
without reading source or evaluating text.

Constraints (``ge`` / ``gt`` / ``le`` / ``lt``, ``choices``) and the type are checked by
:func:`validate` when an options object is built (scikit-learn style: one table, one message format);
the config gives pydantic the same bounds and choices.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import types
import typing
from dataclasses import dataclass
from typing import Any

from mdp_core.errors import InputError

REQUIRED = dataclasses.MISSING  # the default of an option that has none
PLAIN = (int, float, str, bool)
_BOUNDS = (
    ("ge", ">=", lambda v, b: v >= b),
    ("gt", ">", lambda v, b: v > b),
    ("le", "<=", lambda v, b: v <= b),
    ("lt", "<", lambda v, b: v < b),
)


def option(
    default: Any = REQUIRED,
    help: str = "",
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: tuple[str, ...] | None = None,
    metavar: str | None = None,
    nargs: int | str | None = None,
    flag: str | None = None,
    key: str | None = None,
    exposed: bool = True,
) -> Any:
    """A dataclass field declaring one option.

    ``ge`` ... ``lt``: bounds (of each element of a list); ``choices``: the allowed strings. ``flag``: the
    command-line name without dashes when not the field's (``--subsets`` for ``n_subsets``); ``key``: the
    config key when not the field's; ``nargs``: how many values a list option takes on the command line
    (default ``+``); ``exposed=False``: a library-only field, neither a command-line option nor a config key
    (an array, a tuned tolerance)."""
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}
    meta = {"help": help, "bounds": bounds, "choices": choices, "metavar": metavar, "nargs": nargs}
    meta |= {"flag": flag, "key": key, "exposed": exposed}
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class Spec:
    """One declared option, as the command line and the config read it."""

    name: str  # the field (the method's keyword argument)
    type: Any  # the declared type (int, float | None, tuple[float, ...], str | Executor, ...)
    base: type | None  # its int / float / str / bool (of the elements, for a list); None: not expressible
    many: bool  # a list of ``base``
    optional: bool  # None allowed
    default: Any  # REQUIRED: none
    help: str
    bounds: dict[str, float]
    choices: tuple[str, ...] | None
    metavar: str | None
    nargs: int | str | None
    flag: str  # --flag
    key: str  # config key
    exposed: bool

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def described(self) -> str:
        """The help text with the default (an unset default is explained by the help text itself)."""
        shown = self.default is not REQUIRED and self.default is not None
        return f"{self.help} (default: {show(self.default)})" if shown else self.help

    def check(self, value: Any) -> None:
        """InputError naming this option when ``value`` breaks its type, bounds or choices."""
        if not _conforms(value, self.type):
            raise InputError(f"{self.name} must be {_describe(self.type)}, got {value!r}")
        for v in value if isinstance(value, (list, tuple)) else [value]:
            self.check_item(v)

    def check_item(self, v: Any) -> None:
        """InputError naming this option when one value (of a list: one element) breaks its bounds or choices."""
        if self.bounds and isinstance(v, numbers.Real) and not isinstance(v, bool):
            if not all(ok(v, self.bounds[k]) for k, _, ok in _BOUNDS if k in self.bounds):
                need = " and ".join(f"{sym} {self.bounds[k]:g}" for k, sym, _ in _BOUNDS if k in self.bounds)
                raise InputError(f"{self.name} must be {need}, got {v!r}")
        if self.choices is not None and isinstance(v, str) and v not in self.choices:
            raise InputError(f"{self.name} must be one of {self.choices}, got {v!r}")

    def parse(self, text: str) -> Any:
        """One command-line value, converted to the declared type and checked (argparse's ``type``)."""
        assert self.base is not None
        try:
            value = self.base(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{_WORDS[self.base].split(' ', 1)[1]} expected, got {text!r}") from None
        try:
            self.check_item(value)
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    def add_argument(self, group: Any, help: str | None = None) -> None:
        """This option as ``--flag`` of an argparse parser or group; absent from the namespace when not
        given (the declared default applies where the options are built). ``help``: instead of its own."""
        kw: dict[str, Any] = {"dest": self.name, "default": argparse.SUPPRESS, "metavar": self.metavar}
        kw["help"] = (help if help is not None else self.described).replace("%", "%%")
        if self.base is bool and not self.many:
            kw["action"] = argparse.BooleanOptionalAction
            kw.pop("metavar")
        else:
            kw["type"] = self.parse
            if self.choices is not None:
                kw["choices"] = list(self.choices)
            if self.many:
                kw["nargs"] = self.nargs or "+"
        group.add_argument(self.flag, **kw)


@dataclass(frozen=True)
class Options:
    """Base of every options dataclass: building one checks each field against its declaration."""

    def __post_init__(self) -> None:
        validate(self)


def validate(obj: Any) -> None:
    """Check every field of options dataclass ``obj`` (:meth:`Spec.check`); InputError naming the first bad one."""
    for s in specs(type(obj)):
        s.check(getattr(obj, s.name))


_SPECS: dict[type, tuple[Spec, ...]] = {}


def specs(cls: type) -> tuple[Spec, ...]:
    """The declared options of dataclass ``cls``, in field order (its bases' first)."""
    if cls not in _SPECS:
        _SPECS[cls] = _read(cls)
    return _SPECS[cls]


def _read(cls: type) -> tuple[Spec, ...]:
    out = []
    for f in dataclasses.fields(cls):
        if isinstance(f.type, str):
            raise TypeError(f"{cls.__name__}.{f.name}: declare options without postponed annotations")
        base, many, optional = _shape(f.type)
        meta = f.metadata
        out.append(
            Spec(
                name=f.name,
                type=f.type,
                base=base,
                many=many,
                optional=optional,
                default=f.default,
                help=meta.get("help", ""),
                bounds=dict(meta.get("bounds", {})),
                choices=meta.get("choices"),
                metavar=meta.get("metavar"),
                nargs=meta.get("nargs"),
                flag="--" + (meta.get("flag") or f.name).replace("_", "-"),
                key=meta.get("key") or f.name,
                exposed=meta.get("exposed", True) and base is not None,
            )
        )
    return tuple(out)


def spec(cls: type, name: str) -> Spec:
    return next(s for s in specs(cls) if s.name == name)


def default(cls: type, name: str) -> Any:
    """The declared default of option ``name`` of ``cls``."""
    return spec(cls, name).default


def show(value: Any) -> str:
    """A default as ``--help`` shows it (infinity: none)."""
    if isinstance(value, float) and math.isinf(value):
        return "none"
    if isinstance(value, (list, tuple)):
        return " ".join(show(v) for v in value)
    if isinstance(value, bool):
        return "on" if value else "off"
    return "unset" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _members(tp: Any) -> tuple[Any, ...]:
    return typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)


def _shape(tp: Any) -> tuple[type | None, bool, bool]:
    """(int / float / str / bool, list of it?, None allowed?) of a declared type."""
    base, many, optional = None, False, False
    for m in _members(tp):
        if m is type(None):
            optional = True
        elif typing.get_origin(m) in (list, tuple) and typing.get_args(m)[0] in PLAIN:
            base, many = typing.get_args(m)[0], True
        elif m in PLAIN and base is None:
            base = m
    return base, many, optional


def _conforms(v: Any, tp: Any) -> bool:
    if tp is Any:
        return True
    for m in _members(tp):
        origin = typing.get_origin(m)
        if m is type(None) and v is None:
            return True
        if m is bool and isinstance(v, bool):
            return True
        if m is int and isinstance(v, numbers.Integral) and not isinstance(v, bool):
            return True
        if m is float and isinstance(v, numbers.Real) and not isinstance(v, bool):
            return True
        if m is str and isinstance(v, str):
            return True
        if origin in (list, tuple) and isinstance(v, (list, tuple)):
            if all(_conforms(x, typing.get_args(m)[0]) for x in v):
                return True
        if m not in PLAIN and m is not type(None) and origin is None and not isinstance(v, (str, numbers.Number)):
            return v is not None  # e.g. an Executor object
    return False


_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false", type(None): "unset"}


def _describe(tp: Any) -> str:
    words = []
    for m in _members(tp):
        if typing.get_origin(m) in (list, tuple):
            words.append(f"a list of {_WORDS.get(typing.get_args(m)[0], 'values').split(' ', 1)[1]}s")
        elif m in _WORDS:
            words.append(_WORDS[m])
    return " or ".join(words) or "a value"
