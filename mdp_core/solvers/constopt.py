"""ConstOPTMech (Imola et al. 2022, Algorithm 1 with I_NN,r), adapted to the PMO setting.

Privacy contract
    input:      the mDP graph (neighbour pairs d_ij <= eta) and record-output distances d(r_i, o_k)
                that are 1-Lipschitz along every edge; eps per distance unit.
    guarantee:  eps-mDP per distance unit on every neighbour pair, both directions.
    holds by:   construction (fixed entries: triangle inequality; free entries: the LP's rows at eps/2;
                row normalisation doubles it to eps, Imola et al. Theorem 2), then the certify gate
                (:func:`mdp_core.solvers.verify.certify`) for the LP's tolerance-level violations.
    reference:  Imola, Kasiviswanathan, White, Aggarwal, Teissier (2022), Algorithm 1 and Theorem 2.

Imola et al. fix every entry of the mechanism to a weighted exponential mechanism,
M_ik = Y_k exp(-eps' d(r_i, o_k)), except the entries of each record's r nearest outputs, which
stay free LP variables. Pairs of fixed entries satisfy the privacy constraints by the triangle
inequality, so only the constraints touching a free entry are kept: O(N r) variables instead of
N K and O(E r) privacy rows instead of 2 E K. Rows need only sum to >= 1 (that keeps the LP
feasible), the excess mass is penalised by lambda, the LP is solved at eps' = eps / 2, and the rows
are normalised: if M is (eps/2)-private on every edge then so are its row sums S_i, and
H_ik / H_jk = (M_ik / M_jk) (S_j / S_i) <= exp(eps d_ij) (Imola et al. Theorem 2, applied edge by
edge). Lambda runs over a grid ({0.001, 0.1, 1.0}) and the H with the lowest expected loss wins.

Adaptation to this project (stated in ``extra``):
  * outputs o_k need not be records: "r nearest" means the r outputs nearest to record i under
    the record-output distance d (coordinates, or mDP-graph path distance to the output's record
    when the instance has no coordinates; both satisfy |d(i, k) - d(j, k)| <= d_ij on every edge);
  * privacy constraints only on neighbour pairs (the instance's edges), both directions;
  * the objective is the expected utility loss sum_i p_i sum_k (c_ik + lambda) M_ik rather than
    the worst record's distance loss (the PMO objective of this project); lambda is in cost units.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from mdp_core.declarations.methods import ConstoptOptions
from mdp_core.declarations.solver_options import SolverOptions
from mdp_core.errors import InputError, SolverError
from mdp_core.problem.graph import path_distances
from mdp_core.problem.instance import Instance
from mdp_core.solvers import highs
from mdp_core.solvers.highs import LpModel
from mdp_core.solvers.mechanisms import record_output_distances
from mdp_core.solvers.result import RawSolution, Status
from mdp_core.solvers.verify import objective

TINY = 1e-12  # coefficients below this (relative, after scaling) are left out of the LP matrix


def output_distances(instance: Instance) -> tuple[np.ndarray, str]:
    """(N, K) record-output distances d(r_i, o_k) and where they came from."""
    try:
        return record_output_distances(instance), f"{instance.metric} coordinates"
    except InputError:
        pass
    if instance.outputs is None or "record_id" not in instance.outputs:
        raise InputError("constopt needs record/output coordinates or outputs.record_id")
    rid = instance.outputs["record_id"].to_numpy()
    d = path_distances(instance.n_records, instance.edges, instance.distances, np.unique(rid))
    col = {r: t for t, r in enumerate(np.unique(rid))}
    return d[[col[r] for r in rid]].T, "mDP-graph path distances"


def nearest_outputs(dist: np.ndarray, r: int) -> np.ndarray:
    """(N, r') indices of each record's r' = min(r, K) nearest outputs (ties: lower index)."""
    r = min(r, dist.shape[1])
    return np.argsort(dist, axis=1, kind="stable")[:, :r]


def build(instance: Instance, dist: np.ndarray, nn: np.ndarray, lam: float) -> tuple[LpModel, dict[str, Any]]:
    """The ConstOPTMech LP at eps' = eps / 2 for one lambda.

    Variables: the free entries x (record i, output nn[i, t]) at index i * r + t, then the scaled
    weights y_k (K). A fixed entry is M_ik = a_ik y_k with a_ik = exp(-eps' (d_ik - d0_k)) <= 1,
    d0_k the smallest d_ik over the fixed entries of column k (so y is O(1), not exp(eps' d)).
    Rows: for every record sum_k M_ik >= 1; for every directed edge (a, b) and every k in
    nn[a] or nn[b]: M_ak - exp(eps' d_ab) M_bk <= 0.
    """
    n, k = dist.shape
    r = nn.shape[1]
    eps2 = instance.epsilon / 2.0
    free = np.zeros((n, k), dtype=bool)
    free[np.arange(n)[:, None], nn] = True
    fidx = np.full((n, k), -1, dtype=np.int64)
    fidx[np.arange(n)[:, None], nn] = np.arange(n * r).reshape(n, r)
    nf = n * r
    d_fixed = np.where(free, np.inf, dist)
    d0 = d_fixed.min(axis=0)
    d0 = np.where(np.isfinite(d0), d0, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        coef = np.where(free, 0.0, np.exp(-eps2 * (dist - d0[None, :])))  # a_ik on fixed entries
    coef = np.nan_to_num(coef, nan=0.0, posinf=0.0)
    c = costs(instance, nn, coef, lam)

    # row sums: sum_t x_{i,t} + sum_k a_ik y_k >= 1
    ri, ki = np.nonzero(coef > TINY)
    rows = [np.repeat(np.arange(n), r), ri]
    cols = [np.arange(nf), nf + ki]
    vals = [np.ones(nf), coef[ri, ki]]
    # privacy rows for (directed edge, k) with k free for a or for b
    e, d = instance.edges, instance.distances
    a = np.r_[e[:, 0], e[:, 1]]
    b = np.r_[e[:, 1], e[:, 0]]
    g = np.exp(eps2 * np.r_[d, d])
    base = np.arange(a.size)[:, None] * k
    key = np.unique(np.r_[(base + nn[a]).ravel(), (base + nn[b]).ravel()])
    pe, pk = np.divmod(key, k)
    n_priv = key.size
    prow = n + np.arange(n_priv)
    for side, sign in ((a[pe], 1.0), (b[pe], -g[pe])):
        is_free = free[side, pk]
        col = np.where(is_free, fidx[side, pk], nf + pk)
        val = sign * np.where(is_free, 1.0, coef[side, pk])
        keep = np.abs(val) > TINY
        rows.append(prow[keep])
        cols.append(col[keep])
        vals.append(val[keep])
    m = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n + n_priv, nf + k))
    m.sum_duplicates()
    model = LpModel(
        c=c,
        a=m,
        row_lower=np.r_[np.ones(n), np.full(n_priv, -np.inf)],
        row_upper=np.r_[np.full(n, np.inf), np.zeros(n_priv)],
        col_lower=np.zeros(nf + k),
        col_upper=np.full(nf + k, np.inf),
    )
    return model, {"free": free, "fidx": fidx, "coef": coef, "n_free": nf}


def costs(instance: Instance, nn: np.ndarray, coef: np.ndarray, lam: float) -> np.ndarray:
    """LP objective for one lambda: p_i (c_ik + lambda) on free entries, sum_i p_i (c_ik + lambda) a_ik
    on y_k; divided by its largest entry (HiGHS tolerances are absolute)."""
    n = nn.shape[0]
    weights = instance.prior[:, None] * (instance.costs + lam)
    c = np.r_[weights[np.arange(n)[:, None], nn].ravel(), np.sum(weights * coef, axis=0)]
    return c / (float(np.max(np.abs(c))) or 1.0)


def assemble(x: np.ndarray, parts: dict[str, Any]) -> np.ndarray:
    """The LP answer as an (N, K) row-normalised mechanism H (negative solver noise clipped)."""
    nf = parts["n_free"]
    x = np.maximum(x, 0.0)
    m = np.where(parts["free"], x[np.maximum(parts["fidx"], 0)], parts["coef"] * x[nf:][None, :])
    s = m.sum(axis=1, keepdims=True)
    if np.any(s <= 0):
        raise SolverError("ConstOPTMech LP returned an all-zero row")
    return m / s


def constopt(
    instance: Instance,
    r: int = ConstoptOptions.r,
    lambdas: Sequence[float] = ConstoptOptions.lambdas,
    options: SolverOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """ConstOPTMech: solve the LP for every lambda and keep the normalised H with the least
    expected loss. Returns (H (N, K), info)."""
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 1:
        raise InputError(f"r must be a positive integer, got {r!r}")
    lambdas = [float(v) for v in lambdas]
    if not lambdas or any(not (np.isfinite(v) and v > 0) for v in lambdas):
        raise InputError(f"lambdas must be a non-empty list of numbers > 0, got {lambdas}")
    options = options or SolverOptions()
    dist, source = output_distances(instance)
    nn = nearest_outputs(dist, int(r))
    best: tuple[float, np.ndarray, float] | None = None
    runs = []
    h = None
    for lam in lambdas:
        t0 = time.perf_counter()
        if h is None:  # one model; later lambdas only change the costs and warm-start from the basis
            model, parts = build(instance, dist, nn, lam)
            h = highs.new_highs(options)
            highs.pass_model(h, model)
        else:
            c = costs(instance, nn, parts["coef"], lam)
            highs.change_costs(h, np.arange(c.size), c)
        sol = highs.run(h)
        run: dict[str, Any] = {
            "lambda": lam,
            "status": sol.describe(),
            "seconds": round(time.perf_counter() - t0, 3),
            "iterations": sol.iterations,
            "lp_variables": int(model.a.shape[1]),
            "lp_rows": int(model.a.shape[0]),
            "lp_nonzeros": int(model.a.nnz),
        }
        if sol.x.shape[0]:
            hm = assemble(sol.x, parts)
            loss = objective(instance, hm)
            run["expected_loss"] = loss
            if best is None or loss < best[0]:
                best = (loss, hm, lam)
        runs.append(run)
        if progress:
            progress(
                f"constopt lambda={lam:g}: {sol.describe()}, {model.a.shape[0]} rows, loss {run.get('expected_loss')}"
            )
    if best is None:
        raise SolverError(f"ConstOPTMech: no lambda gave a solution ({[r_['status'] for r_ in runs]})")
    info = {
        "r": int(nn.shape[1]),
        "lambda": best[2],
        "runs": runs,
        "distances": source,
        "lp_epsilon": instance.epsilon / 2.0,
        "objective": "expected loss + lambda * row mass",
    }
    return best[1], info


def method(
    instance: Instance, options: SolverOptions, progress: Callable[[str], None] | None, params: ConstoptOptions
) -> RawSolution:
    """``solve(instance, "constopt", r=..., lambdas=...)``: status "feasible", no lower bound.

    ConstOPTMech's LPs are a restriction of the PMO (most entries fixed, eps halved), so their optimality
    proves nothing about the PMO optimum: its mechanism can cost far more (36-47 % above it on small grids at
    eps 2). Each lambda's own LP status stays in ``extra["runs"]``; ``extra["lp_status"]`` sums them up."""
    h, info = constopt(instance, params.r, params.lambdas, options, progress)
    solved = all(run["status"] == Status.OPTIMAL for run in info["runs"])
    info["lp_status"] = Status.OPTIMAL.value if solved else "not every lambda solved to optimality"
    info["optimality"] = "not proven: a baseline without a lower bound on the PMO optimum"
    return RawSolution(h, status=Status.FEASIBLE, lower_bound=None, extra=info)
