"""The registry of solve methods by name, importing no solver (so that configs, the command line and
:mod:`mdp_core.options` can list the names without an import cycle).

Each entry is ``"module:function"``; :func:`mdp_core.solve.solve` imports the module on first use, so an
unused method costs nothing. A method is ``f(instance, options, progress, params) -> RawSolution`` with
``params`` annotated by its options dataclass.
"""

from __future__ import annotations

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
# Baselines: their status describes their own computation (a closed form, an estimate, ConstOPTMech's
# restricted LP), not the PMO optimum, so the honest-status rule's "optimal needs a bound" does not apply.
BASELINES = frozenset({"exp", "laplace", "constopt"})
