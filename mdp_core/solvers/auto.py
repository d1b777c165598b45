"""The "auto" method: pick lp or rowgen from the instance's structure, and say why.

Privacy contract
    input:      an instance with its mDP graph (edges with d_ij <= eta).
    guarantee:  eps-mDP per distance unit, through the method it delegates to and the certify gate.
    holds by:   the certify gate (:func:`mdp_core.solvers.verify.certify`).
    reference:  bench/README.md (the measurements behind the rule).

The rule (:func:`choose`) looks only at the instance, the machine's CPU count and memory and the configured
cluster, so the choice is deterministic for a given instance and machine setting. It is recorded in ``extra["auto"]``
(``method``, ``reason`` and the features it used), which goes into solve.json and the manifest.

* Dense graphs (mean degree >= ``AutoOptions.dense_degree`` = 40: the papers' eps * eta = 20 settings): row
  generation. It solves the same LP over the rows that bind, a few per cent of them there, and keeps a valid
  lower bound all along; the full LP does not finish.
* Sparse graphs (grids, binding road instances, text: degree 10-12): the full LP, up to
  ``AutoOptions.lp_max_rows`` = 8 M privacy rows in the largest component (its memory is what caps it); above
  that, row generation.
* Rowgen holds only the mechanism's support (``support_tau`` = :data:`SUPPORT_TAU`) when the costs are the
  data's own distance from record to output (:func:`loss_is_metric`): its starting support is made from that
  metric. On that loss it is picked whatever the degree; on any other loss the support is off.
* Benders is never chosen, and column generation only as the distributed path below.
* The distributed path: column generation with its pricing LPs on a Dask cluster (``executor="dask"``), when a
  cluster is configured (``scheduler``, a ``tcp://`` address) *and* the method picked above would not fit in
  this machine's memory: its estimated peak (:func:`memory_estimate`, linear in the full LP's privacy rows:
  :data:`MEMORY_MODEL`, a line above every peak measured) exceeds ``memory_limit`` GB (default: 80 % of this
  machine's physical memory). Colgen is the method whose work splits by output (each worker holds the pricing
  LPs of its outputs, the client only the master): it is picked because it fits, not because it is faster.
  Without a cluster, or within the budget, the single-machine choice stands.
* With a cluster, when rowgen is picked and fits: rowgen's row-sum Lagrangian ascent (``lagrangian_steps`` =
  :data:`LAGRANGIAN_STEPS`) with its K subproblems on that cluster (:func:`delegated`). Without a cluster it
  stays off.

The measurements behind each rule: bench/README.md ("Which method wins", "Row-sum Lagrangian bound", "The
Lagrangian's subproblems on Dask") and bench/HISTORY.md ("Why auto chooses what it does").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from mdp_core.declarations.methods import AutoOptions, GapOptions
from mdp_core.declarations.solver_options import SolverOptions
from mdp_core.errors import InputError
from mdp_core.problem.graph import components
from mdp_core.problem.instance import Instance
from mdp_core.problem.metrics import pairwise
from mdp_core.solvers import colgen, lp, rowgen
from mdp_core.solvers.result import RawSolution

# the methods auto may pick: (function, options class)
CHOICES: dict[str, tuple[Callable[..., RawSolution], type[GapOptions]]] = {
    "lp": (lp.method, lp.LpOptions),
    "rowgen": (rowgen.method, rowgen.RowgenOptions),
    "colgen": (colgen.method, colgen.ColgenOptions),  # only with executor="dask": the distributed path
}

# peak memory: (GB, bytes per full-LP privacy row), an upper line through the peaks measured here (docstring)
LAGRANGIAN_STEPS = 30  # rowgen's Lagrangian steps a round when auto puts them on a cluster (module docstring)
MEMORY_MODEL = {"lp": (0.0, 1650.0), "rowgen": (0.7, 4.0)}
MEMORY_SHARE = 0.8  # of this machine's physical memory: the default budget of one machine
SUPPORT_TAU = 1e-5  # rowgen's starting support when the loss is the metric (module docstring)


def features(instance: Instance) -> dict[str, Any]:
    """What the rule looks at: sizes, degree, the largest component's full-LP rows, eps * eta, cores."""
    n, k = instance.n_records, instance.n_outputs
    count, labels = components(n, instance.edges)
    comp_edges = np.bincount(labels[instance.edges[:, 0]], minlength=count) if instance.n_edges else np.zeros(1)
    return {
        "n_records": n,
        "n_outputs": k,
        "n_edges": instance.n_edges,
        "mean_degree": round(2 * instance.n_edges / max(n, 1), 3),
        "components": int(count),
        "largest_component": int(np.bincount(labels).max(initial=0)),
        "largest_component_rows": int(2 * comp_edges.max(initial=0) * k),
        "eps_eta": round(instance.epsilon * instance.eta, 6),
        "cores": os.cpu_count() or 1,
        "loss_is_metric": loss_is_metric(instance),
    }


def loss_is_metric(instance: Instance) -> bool:
    """Whether the costs are the data's own distance from record to output, c_ik = d(r_i, o_k) (to 1e-9
    relative): the loss for which :func:`mdp_core.solvers.rowgen.support_estimate`, made from the same
    metric, predicts the optimal mechanism's support (module docstring). False when the instance has no
    coordinates to measure it by."""
    try:
        d = pairwise(instance.metric, instance.record_points(), instance.output_points())
    except (InputError, ValueError, KeyError, TypeError):
        return False
    return bool(d.shape == instance.costs.shape and np.allclose(instance.costs, d, rtol=1e-9, atol=1e-12))


def machine_memory() -> float:
    """This machine's physical memory in GB (0 when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 0.0


def memory_estimate(method: str, f: dict[str, Any]) -> float:
    """Estimated peak GB of ``method`` ("lp" or "rowgen") on an instance with features ``f``:
    :data:`MEMORY_MODEL`'s GB plus its bytes per full-LP privacy row times the rows (the largest
    component's for lp, which solves one component at a time; all of them for rowgen)."""
    rows = f["largest_component_rows"] if method == "lp" else 2 * f["n_edges"] * f["n_outputs"]
    fixed, per_row = MEMORY_MODEL[method]
    return fixed + per_row * rows / 1e9


def choose(instance: Instance, params: AutoOptions) -> tuple[str, str, dict[str, Any]]:
    """(method, reason, features) for ``instance`` (module docstring)."""
    f = features(instance)
    name, reason = _one_machine(f, params)
    need = memory_estimate(name, f)
    budget = params.memory_limit or MEMORY_SHARE * machine_memory()
    f |= {"memory_estimate_gb": float(f"{need:.4g}"), "memory_budget_gb": float(f"{budget:.4g}")}
    if name == "rowgen" and f["loss_is_metric"] and not (params.scheduler and budget > 0 and need > budget):
        reason += (
            f"; variables only on the mechanism's support (support_tau {SUPPORT_TAU:g}): the loss is the metric"
            " distance, whose support the nearest-output closure predicts"
        )
    if params.scheduler and name == "rowgen" and not (budget > 0 and need > budget):
        reason += (
            f"; with the row-sum Lagrangian's {instance.n_outputs} subproblems on the Dask cluster at "
            f"{params.scheduler} ({LAGRANGIAN_STEPS} steps a round)"
        )
    if params.scheduler and budget > 0 and need > budget:
        return (
            "colgen",
            (
                f"{name} would need about {need:.3g} GB (> {budget:.3g} GB on this machine): column generation with "
                f"its pricing LPs on the Dask cluster at {params.scheduler}"
            ),
            f,
        )
    return name, reason, f


def delegated(name: str, params: AutoOptions, f: dict[str, Any] | None = None) -> dict[str, Any]:
    """The options auto sets on the method ``name`` it picked, beyond the gap (module docstring): rowgen
    holds only the support (``support_tau`` = :data:`SUPPORT_TAU`) when the loss is the metric (``f``,
    :func:`features`); with a cluster, colgen's pricing LPs or rowgen's Lagrangian subproblems go there."""
    support = {"support_tau": SUPPORT_TAU} if name == "rowgen" and f and f.get("loss_is_metric") else {}
    if not params.scheduler:
        return support
    if name == "colgen":
        return {"executor": "dask", "scheduler": params.scheduler}
    if name == "rowgen":
        return support | {
            "lagrangian_steps": LAGRANGIAN_STEPS,
            "lagrangian_executor": "dask",
            "scheduler": params.scheduler,
        }
    return {}


def _one_machine(f: dict[str, Any], params: AutoOptions) -> tuple[str, str]:
    """The single-machine choice: (method, reason)."""
    rows, degree = f["largest_component_rows"], f["mean_degree"]
    if f["loss_is_metric"]:
        return (
            "rowgen",
            (
                f"the loss is the metric distance (mean degree {degree:g}, full LP {rows:,} privacy rows): row "
                "generation on the mechanism's support, 6-40x faster than the full LP even on sparse graphs"
            ),
        )
    if degree >= params.dense_degree:
        return (
            "rowgen",
            (
                f"dense mDP graph (mean degree {degree:g} >= {params.dense_degree:g}; full LP {rows:,} privacy rows): "
                "row generation solves it over the rows that bind"
            ),
        )
    if rows > params.lp_max_rows:
        return (
            "rowgen",
            (
                f"largest component's full LP has {rows:,} privacy rows (> {params.lp_max_rows:,}): too large to "
                "hold; row generation solves it over the rows that bind"
            ),
        )
    return (
        "lp",
        (
            f"sparse mDP graph (mean degree {degree:g}), largest component's full LP {rows:,} privacy rows "
            f"(<= {params.lp_max_rows:,}): HiGHS solves it outright"
        ),
    )


def method(
    instance: Instance, options: SolverOptions, progress: Callable[[str], None] | None, params: AutoOptions
) -> RawSolution:
    """The "auto" entry of :data:`mdp_core.solvers.solve.METHODS`: delegate to :func:`choose`'s method."""
    name, reason, feats = choose(instance, params)
    if options.all_pairs and name == "lp":
        name, reason = (
            "rowgen",
            reason
            + (
                "; but every pair of a component is certified in the metric (all_pairs): row generation adds the rows"
                " beyond the edges lazily, where the full LP would hold s (s - 1) K of them per component"
            ),
        )
    if progress:
        progress(f"auto: {name} ({reason})")
    f, cls = CHOICES[name]
    more = delegated(name, params, feats)
    raw = f(instance, options, progress, cls(gap_abs=params.gap_abs, gap_rel=params.gap_rel, **more))
    raw.extra = {"auto": {"method": name, "reason": reason, "features": feats}} | raw.extra
    return raw
