"""Every solve method declared once: its registry entry and its typed options.

Importing this module imports no solver, numpy, scipy or HiGHS (a test checks it): the command line
(``mdp-release solve`` groups its flags by method from here), the release config and its Prefect
parameter schema (flows/config.py), the release's cache keys (which a fully cached run computes) and the
methods themselves (``lp.method(..., params: LpOptions)``) all read these declarations.

Each :class:`Method` names its function as ``"module:function"``; :func:`mdp_core.solvers.solve.solve` imports the
module on first use, so an unused method costs nothing. A method is ``f(instance, options: SolverOptions,
progress, params: XOptions) -> RawSolution``. Shared groups of options are bases: :class:`GapOptions`
(every method with a lower bound), :class:`ExecutorOptions` (colgen, benders), :class:`PartitionOptions`
(benders, and the release's partition stage).

What the pipeline does differently per method it reads from the entry's capability flags
(:class:`Method`: ``baseline``, ``needs_partition``, ``delegates``, ``bounds``), never from a method's name;
:data:`BASELINES`, :data:`PARTITIONED` and :data:`COMPARABLE` (the config's evaluate baselines) derive from
them. Adding a method is one :data:`REGISTRY` entry plus its module (tests/test_registry.py).

No ``from __future__ import annotations``: the fields' types are read as objects (mdp_core.declarations.options).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mdp_core.declarations.options import Options, option
from mdp_core.declarations.solver_options import EXECUTORS, SOLVERS, Executor
from mdp_core.errors import InputError

# The partitioners of Qiu 2024 (mdp_core.problem.partition.partition), named here so the config and the command
# line can list them without importing scipy.
PARTITIONERS: tuple[str, ...] = ("kmdv", "kmrec", "kmadj", "bsc")


@dataclass(frozen=True)
class GapOptions(Options):
    """The requested gap, shared by every method with a lower bound: it stops the decomposition methods
    and decides when "optimal" may be reported (:func:`mdp_core.solvers.result.honest_status`)."""

    gap_abs: float = option(0.0, "optimal when UB - LB <= this (cost unit; the paper uses 0.01)", ge=0)
    gap_rel: float = option(1e-6, "optimal when UB - LB <= this * |UB|", ge=0)


@dataclass(frozen=True)
class ExecutorOptions(Options):
    """Where a decomposition's independent solves run (:mod:`mdp_core.runtime.executor`)."""

    executor: str | Executor = option(
        "auto",
        "where independent solves run (colgen: pricing LPs; benders: subproblems)",
        choices=EXECUTORS,
    )
    scheduler: str | None = option(
        None, "with executor dask: a scheduler address (tcp://host:8786); unset: a local Dask cluster"
    )


@dataclass(frozen=True)
class PartitionOptions(Options):
    """Benders' partition of the mDP graph (:func:`mdp_core.problem.partition.partition`); the release's
    ``[partition]`` section. The paper's M = 25 makes 73-99 % of the records boundary records; M = 2 was
    fastest on a small machine (bench/README.md)."""

    partition: str = option("kmdv", "partitioner", choices=PARTITIONERS, key="method")
    n_subsets: int = option(2, "number of subsets M", ge=1, le=10_000, metavar="M", flag="subsets", key="subsets")
    seed: int = option(0, "partitioner seed", ge=0)


@dataclass(frozen=True)
class AutoOptions(GapOptions):
    """Options of the "auto" method: the requested gap, passed on to the method it picks (mdp_core.solvers.auto)."""

    lp_max_rows: int = option(
        8_000_000, "largest component's full-LP privacy rows up to which a sparse instance goes to lp", ge=1
    )
    dense_degree: float = option(40.0, "mean neighbours per record from which auto picks rowgen", gt=0)
    scheduler: str | None = option(
        None,
        "a Dask scheduler (tcp://host:8786): where executor dask runs; auto sends instances too large for "
        "this machine there, and rowgen's Lagrangian subproblems otherwise",
    )
    memory_limit: float = option(
        0.0, "GB one machine may use (0: 80 percent of its memory); above it auto uses the scheduler", ge=0
    )


@dataclass(frozen=True)
class LpOptions(GapOptions):
    """Options of the ``lp`` method: the LP itself has no knobs beyond the HiGHS settings; the gap says
    when its dual (Lagrangian) bound proves the answer "optimal"."""


@dataclass(frozen=True)
class RowgenOptions(GapOptions):
    """Options of the "rowgen" method (mdp_core.solvers.rowgen)."""

    neighbours: int = option(4, "initial rows: each record's this many shortest edges", ge=0)
    rows_per_round: int = option(
        0, "violated rows added per round, largest deficit first (0 = max(20000, N K / 2))", ge=0
    )
    min_deficit: float = option(
        1e-12, "a violated row enters only when z_ak / g_ab - z_bk exceeds this (probability mass)", ge=0
    )
    far_rows_per_round: int = option(
        0,
        "with all_pairs: rows of pairs beyond the edges added per round, largest deficit first (0 = max(2000,"
        " rows_per_round's count / 10) when the metric closure adds more than a tenth of the requested gap or no"
        " edge row is violated, else 1: mdp_core.solvers.rowgen.far_count)",
        ge=0,
    )
    max_rounds: int = option(100, "LP solves at most", ge=1)
    loose_tolerance: float = option(
        1e-2,
        "interior point relative gap of the rounds that cannot close the gap by the rule of"
        " mdp_core.solvers.rowgen.round_tolerance (0 = every round at a tenth of gap_rel)",
        ge=0,
        lt=1,
    )
    deficit_share: float = option(
        0.0,
        "more rows per round: every violated row of the largest deficits summing to this share of all"
        " violated rows' deficit, when more than rows_per_round (0 = off)",
        ge=0,
        le=1,
    )
    share_from_round: int = option(1, "deficit_share applies to the rows chosen after this round's LP on", ge=1)
    lp_solver: str = option(
        "ipm",
        "each round's LP: interior point without crossover, cold, or dual simplex, warm",
        choices=SOLVERS,
    )
    lagrangian_steps: int = option(
        0,
        "after each round's LP, subgradient steps on the row-sum Lagrangian from its duals (0 = off)",
        ge=0,
    )
    lagrangian_rows: bool = option(
        False,
        "with lagrangian_steps: a round that may close the gap also gets the rows binding in the"
        " Lagrangian's subproblems at its best multipliers (the round's LP then waits for the ascent)",
    )
    lagrangian_executor: str = option(
        "serial", "where the Lagrangian's K subproblems run (mdp_core.solvers.lagrangian)", choices=EXECUTORS
    )
    scheduler: str | None = option(
        None, "with lagrangian_executor dask: a scheduler address (tcp://host:8786); unset: a local Dask cluster"
    )
    support_tau: float = option(
        0.0,
        "variables only on a support that grows by pricing: it starts where the nearest-output mechanism's"
        " closure reaches this mass (mdp_core.solvers.rowgen.support_estimate; 0 = every record and output)",
        ge=0,
        lt=1,
    )


@dataclass(frozen=True)
class ColgenOptions(ExecutorOptions, GapOptions):
    """Options of the "colgen" method (mdp_core.solvers.colgen); a component stops when its gap is closed."""

    max_iterations: int = option(200, "master solves at most (per component)", ge=1)
    seeds_per_record: int = option(3, "cheapest outputs of each record given its seed column", ge=0)
    tol: float = option(
        1e-12,
        "a column enters when its reduced cost per unit mass is below -max(tol, gap_rel |master| / (100 n))",
        ge=0,
    )
    smoothing: float = option(
        0.5, "Wentges dual smoothing weight: price at alpha * centre + (1 - alpha) * u (0 = off)", ge=0, lt=1
    )
    master_solver: str = option(
        "simplex", "master LP: primal simplex, warm-started, or ipm + crossover, cold", choices=SOLVERS
    )


@dataclass(frozen=True)
class BendersOptions(PartitionOptions, ExecutorOptions, GapOptions):
    """Options of the "benders" method (mdp_core.solvers.benders); it stops when the gap is closed."""

    labels: Any = option(None, "(N,) subset ids; overrides the partitioner", exposed=False)
    max_iterations: int = option(1000, "master solves at most", ge=1)
    initial_cuts: bool = option(False, "Property 3.2 rows between non-adjacent boundary records of a subset")
    initial_cut_cap: float = option(12.0, "initial cuts only where eps * D <= this", gt=0)
    rho0: float = option(4.0, "initial slack penalty (scaled costs: max p_i c_ik = 1)", gt=0)
    stabilise: float = option(0.5, "weight of the stabilisation centre (0 = plain Benders)", ge=0, lt=1)
    stall_iterations: int = option(
        15,
        "stop (feasible) when the gap is below STALL_GAP and no bound moved for this many iterations (0 = never)",
        ge=0,
    )
    heuristic: bool = option(True, "the seed incumbent and the priced closure heuristic")


@dataclass(frozen=True)
class ExpOptions(Options):
    """The exponential mechanism has no options."""


@dataclass(frozen=True)
class LaplaceOptions(Options):
    """Options of the planar Laplace baseline (Monte Carlo, mdp_core.solvers.mechanisms)."""

    n_samples: int = option(20_000, "Monte Carlo samples per record", ge=1)
    seed: int = option(0, "Monte Carlo seed", ge=0)
    smooth: bool = option(True, "pull the estimate onto the constraint set")


@dataclass(frozen=True)
class ConstoptOptions(Options):
    """Options of ConstOPTMech (Imola et al. 2022, mdp_core.solvers.constopt)."""

    r: int = option(10, "free LP entries per record (its r nearest outputs)", ge=1)
    lambdas: tuple[float, ...] = option((0.001, 0.1, 1.0), "row-mass penalties tried", ge=0)


@dataclass(frozen=True)
class Method:
    """A registry entry: the function (``"module:function"``, imported on first use, or the function), its
    options dataclass, a one-line description and the capabilities the pipeline branches on -- code asks
    these flags, never a method's name.

    * ``baseline``: a closed-form or heuristic mechanism (exp, laplace, constopt) versus the optimal LP
      methods. A baseline proves no bound on the PMO optimum: it reports "feasible" with no lower bound
      (:func:`mdp_core.solvers.solve.solve` never upgrades it to "optimal"), so it takes no gap options.
    * ``needs_partition``: the method solves on a partition of the mDP graph (Qiu 2024's Benders): it takes
      the partition stage's ``labels`` and its partitioner options come from the release's ``[partition]``
      section, not ``[solve]``; its options class derives from :class:`PartitionOptions`.
    * ``delegates``: the method picks another registered method and runs it (``auto``); the one that ran is
      ``extra[name]["method"]`` of its solve.json. It is never a comparison baseline of itself.
    * ``all_pairs``: the method takes :attr:`mdp_core.declarations.solver_options.SolverOptions.all_pairs` (its
      mechanism is private for every two records of a component in the metric: lp and rowgen add those rows,
      the exponential and planar Laplace mechanisms are by construction); :func:`mdp_core.solvers.solve.solve`
      refuses the option for any other method.
    * ``bounds``: for an iterative method writing trace.parquet, the bounds plot's (title, lower-bound label,
      upper-bound label); None: no trace.

    A declaration contradicting its options class (a partition method whose options lack
    :class:`PartitionOptions`, a baseline with gap options) is a TypeError at import.
    """

    function: str | Callable[..., Any]
    options: type[Options]
    help: str
    baseline: bool = False
    needs_partition: bool = False
    delegates: bool = False
    all_pairs: bool = False
    bounds: tuple[str, str, str] | None = None

    def __post_init__(self) -> None:
        if self.needs_partition != issubclass(self.options, PartitionOptions):
            raise TypeError(
                f"{self.options.__name__}: needs_partition={self.needs_partition} but the options "
                f"{'do not ' if self.needs_partition else ''}derive from PartitionOptions"
            )
        if self.baseline and issubclass(self.options, GapOptions):
            raise TypeError(f"{self.options.__name__}: a baseline proves no bound, so it takes no gap options")


_UB = "upper bound (best feasible)"
REGISTRY: dict[str, Method] = {
    "auto": Method(
        "mdp_core.solvers.auto:method",
        AutoOptions,
        "lp or rowgen from the instance's structure",
        delegates=True,
        all_pairs=True,
    ),
    "lp": Method(
        "mdp_core.solvers.lp:method", LpOptions, "the exact LP (HiGHS), one component at a time", all_pairs=True
    ),
    "rowgen": Method(
        "mdp_core.solvers.rowgen:method",
        RowgenOptions,
        "the exact LP by row generation (dense graphs)",
        all_pairs=True,
        bounds=("Row generation", "lower bound (LP over the rows so far)", _UB),
    ),
    "colgen": Method(
        "mdp_core.solvers.colgen:method",
        ColgenOptions,
        "the exact LP by column generation",
        bounds=("Column generation", "lower bound", _UB),
    ),
    "benders": Method(
        "mdp_core.solvers.benders:method",
        BendersOptions,
        "partition + Benders decomposition (Qiu 2024)",
        needs_partition=True,
        bounds=("Benders decomposition", "lower bound (master)", _UB),
    ),
    "exp": Method(
        "mdp_core.solvers.mechanisms:exponential_method",
        ExpOptions,
        "exponential mechanism",
        baseline=True,
        all_pairs=True,
    ),
    "laplace": Method(
        "mdp_core.solvers.mechanisms:planar_laplace_method",
        LaplaceOptions,
        "planar Laplace",
        baseline=True,
        all_pairs=True,
    ),
    "constopt": Method(
        "mdp_core.solvers.constopt:method", ConstoptOptions, "ConstOPTMech (Imola et al. 2022)", baseline=True
    ),
}
METHOD_NAMES: tuple[str, ...] = tuple(REGISTRY)
BASELINES = frozenset(name for name, m in REGISTRY.items() if m.baseline)
PARTITIONED = frozenset(name for name, m in REGISTRY.items() if m.needs_partition)
# What the evaluate stage may compare the released mechanism with: the baselines first, then the optimal
# methods, in registry order; no delegating method (it would only repeat the method it picks).
COMPARABLE: tuple[str, ...] = tuple(
    sorted((n for n, m in REGISTRY.items() if not m.delegates), key=lambda n: not REGISTRY[n].baseline)
)


def method(name: str) -> Method:
    """The registry entry of ``name``; an unknown name is an InputError listing the known ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise InputError(f"unknown method {name!r}; choose one of {list(METHOD_NAMES)}") from None


def needs_partition(name: str) -> bool:
    """Whether method ``name`` solves on the partition stage's labels (:attr:`Method.needs_partition`)."""
    return method(name).needs_partition
