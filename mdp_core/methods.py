"""The registry of solve methods by name, importing no solver (so that configs, the command line and
:mod:`mdp_core.options` can list the names without an import cycle, and without numpy or HiGHS), and the
partitioners' names (:mod:`mdp_core.partition`).

Each entry is ``"module:function"``; :func:`mdp_core.solve.solve` imports the module on first use, so an
unused method costs nothing. A method is ``f(instance, options, progress, params) -> RawSolution`` with
``params`` annotated by its options dataclass.
"""

from __future__ import annotations

from mdp_core import sourceinfo

REGISTRY: dict[str, str] = {
    "auto": "mdp_core.auto:method",
    "lp": "mdp_core.lp:method",
    "rowgen": "mdp_core.rowgen:method",
    "colgen": "mdp_core.colgen:method",
    "benders": "mdp_core.benders:method",
    "exp": "mdp_core.mechanisms:exponential_method",
    "laplace": "mdp_core.mechanisms:planar_laplace_method",
    "constopt": "mdp_core.constopt:method",
}
METHOD_NAMES: tuple[str, ...] = tuple(REGISTRY)
# Baselines: they prove no bound on the PMO optimum, so they report "feasible" with no lower bound (what they
# computed -- a closed form, an estimate, ConstOPTMech's restricted LP -- is in their solve.json ``extra``).
BASELINES = frozenset({"exp", "laplace", "constopt"})

# The partitioners of Qiu 2024 (mdp_core.partition.partition): named here so the config and the command line
# can list them without importing scipy.
PARTITIONERS: tuple[str, ...] = ("kmdv", "kmrec", "kmadj", "bsc")


def option_names(method: str) -> tuple[str, ...] | None:
    """The fields of ``method``'s options dataclass (the annotation of its function's ``params``), read from
    the source without importing the method (mdp_core.sourceinfo; for the release's cache keys, which a
    cached run computes); None when the method takes no ``params``. ``mdp_core.solve.options_class`` is
    the imported class (tests check the two agree for every method)."""
    module, _, function = REGISTRY[method].partition(":")
    cls = sourceinfo.annotation(module, function, "params")
    return None if cls is None else sourceinfo.dataclass_fields(module, cls)
