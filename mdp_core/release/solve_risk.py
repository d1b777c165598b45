"""What can refuse a release only after its solve, foreseen from the instance (issue 49: ``mdp-release check``
accepted eps 60 and eps 0.5 that the run refused after solving). Two rules act on the solved mechanism, not
on the plan, so the privacy door cannot apply them; :func:`solve_risks` gives ``check`` their figures.

**Deterministic rows** (:func:`mdp_core.release.door.refuse_deterministic`: a row whose largest entry is at
least D = :data:`mdp_core.release.door.DETERMINISTIC` is refused). Row i can put mass D on one output while
each graph neighbour j keeps mass on its own output only when z_ik <= exp(eps d_ij) z_jk allows it:
D <= exp(eps d_ij) (1 - D), i.e. eps d_ij >= ln(D / (1 - D)) (27.6 at D = 1 - 1e-12) for every neighbour j.
A record whose nearest neighbour in the mDP graph lies that far (eps x spacing) may be released as itself by
a loss-minimising mechanism (it costs no loss), and the run then refuses. The figure: how many records, and
the largest eps x nearest-neighbour spacing.

**A repair above max_mix** (:func:`mdp_core.solvers.verify.certify`). A solver answer violating a privacy row
z_ik <= g z_jk (g = exp(eps d_ij)) by v (HiGHS's primal feasibility tolerance: v up to ``primal_tolerance``)
is mixed with the uniform row by t = v / (v + (g - 1) / K) ~ v K / (eps d_ij) for small eps d_ij. The figure:
that t at the shortest edge not unified (eps d >= :data:`mdp_core.solvers.verify.UNIFY_LOG_RATIO`), against
max_mix (the pairs closer than that are unified instead: counted, ``unified_pairs``). Both are "may": the
solver's actual residual is often far below its tolerance, and the mechanism need not use a row's freedom.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def nearest_neighbour(n_records: int, edges: np.ndarray, distances: np.ndarray) -> np.ndarray:
    """(N,) each record's distance to its nearest neighbour in the mDP graph (inf: no neighbour)."""
    near = np.full(n_records, np.inf)
    if len(edges):
        np.minimum.at(near, edges[:, 0], distances)
        np.minimum.at(near, edges[:, 1], distances)
    return near


def solve_risks(inst: Any, epsilon: float, max_mix: float, primal_tolerance: float) -> dict[str, Any]:
    """The figures of both rules (module docstring) for the instance ``inst`` (its edges and distances: the
    mDP graph at eta) at ``epsilon`` per unit: {"deterministic_records", "deterministic_log_ratio" (ln(D / (1 -
    D))), "largest_eps_spacing", "smallest_eps_edge", "repair_estimate", "max_mix", "unified_pairs"}."""
    from mdp_core.release.door import DETERMINISTIC
    from mdp_core.solvers.verify import UNIFY_LOG_RATIO

    limit = math.log(DETERMINISTIC / (1 - DETERMINISTIC))
    near = nearest_neighbour(inst.n_records, np.asarray(inst.edges), np.asarray(inst.distances, dtype=float))
    spacing = epsilon * near[np.isfinite(near)]
    scaled = epsilon * np.asarray(inst.distances, dtype=float)
    kept = scaled[scaled >= UNIFY_LOG_RATIO]
    smallest = float(kept.min()) if kept.size else math.inf
    g1 = math.expm1(smallest) if math.isfinite(smallest) else math.inf
    t = primal_tolerance / (primal_tolerance + g1 / inst.n_outputs) if math.isfinite(g1) else 0.0
    return {
        "deterministic_records": int((spacing >= limit).sum()),
        "deterministic_log_ratio": limit,
        "largest_eps_spacing": float(spacing.max()) if spacing.size else None,
        "smallest_eps_edge": smallest if math.isfinite(smallest) else None,
        "repair_estimate": t,
        "max_mix": max_mix,
        "unified_pairs": int((scaled < UNIFY_LOG_RATIO).sum()),
    }


def risk_lines(r: dict[str, Any], unit: str) -> list[str]:
    """The sentences ``check`` prints for the figures ``r`` of :func:`solve_risks` (none: no risk)."""
    out = []
    if r["deterministic_records"]:
        out.append(
            f"the run may refuse after its solve: {r['deterministic_records']} record(s) lie eps x spacing >= "
            f"{r['deterministic_log_ratio']:.3g} from their nearest neighbour "
            f"(largest {r['largest_eps_spacing']:.3g}): "
            "the mechanism may release them as themselves (deterministic rows, refused); lower epsilon or raise eta"
        )
    if r["repair_estimate"] > r["max_mix"]:
        out.append(
            f"the run may refuse after its solve: the shortest edge is eps x d = {r['smallest_eps_edge']:.3g} (in "
            f"{unit}); a solver residual of one primal tolerance there needs a repair of {r['repair_estimate']:.3g} "
            f"> max_mix {r['max_mix']:g}; raise epsilon, drop near-duplicate records or raise [solve] max_mix"
        )
    return out


__all__ = ["nearest_neighbour", "risk_lines", "solve_risks"]
