"""Privacy accounting in exact arithmetic: the epsilon of a measurement, a spend, their composition, a cap,
and the guarantee a release states (its text and its provenance record). No numerical import: a declaration
the ledger (:mod:`artifacts.private`), the release (:mod:`mdp_core.release.make`), the audit
(:mod:`mdp_core.release.audit`) and the report all read.

Who is protected, against whom: each individual of a population (the people whose records a microdata table
holds), against anyone who sees every release published for it, including someone who knows every other
record. Neighbour relation: two collections of the population's tables are neighbours when they differ only in
the records of one individual, each moved to a record within the protection radius of it in the data's metric
(for the noisy counts and the DP prior: any change of that one individual's record, replace-one eps-DP).

Exactness. An epsilon is a :class:`fractions.Fraction`. A float denotes the shortest decimal that reads back
as it (Python's ``repr``: what the user typed in the config and what the ledger's JSON stores), so 0.1 + 0.2
composes to exactly 3/10 and a cap of 0.3 admits it. The binary value of the same float (``Fraction(0.1)``)
differs from that decimal by less than half a unit in the last place (relative 1.1e-16), far below the
mechanism certificate's relative tolerance (1e-9, rounded up into every stated factor); reading the binary
value instead would refuse 0.1 + 0.2 under a cap of 0.3 by 2**-55. The reading is exact and monotone: two
floats give the same Epsilon only when they are equal, and a smaller float a smaller Epsilon.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from mdp_core.errors import InputError, PrivacyError

CERTIFIED_RATIO_TOL = 1e-9  # = mdp_core.solvers.verify.RATIO_TOL (not imported: spec has no numerical import)


@dataclass(frozen=True, order=True)
class Epsilon:
    """A privacy loss bound (dimensionless, >= 0), held exactly. Build it with :meth:`of`."""

    value: Fraction

    def __post_init__(self) -> None:
        if not isinstance(self.value, Fraction) or self.value < 0:
            raise InputError(f"an epsilon must be an exact non-negative number, got {self.value!r}")

    @classmethod
    def of(cls, x: EpsilonLike, what: str = "epsilon") -> Epsilon:
        """``x`` exactly: an Epsilon as is; an int or Fraction as is; a float as the shortest decimal that
        reads back as it (module docstring). InputError for a bool, text, NaN, infinity or a negative."""
        if isinstance(x, Epsilon):
            return x
        if isinstance(x, bool) or not isinstance(x, (int, float, Fraction)):
            raise InputError(f"{what} must be a number")
        if isinstance(x, float):
            if not math.isfinite(x):
                raise InputError(f"{what} must be a finite number >= 0, got {x!r}")
            x = Fraction(repr(x))
        if x < 0:
            raise InputError(f"{what} must be a finite number >= 0, got {float(x)!r}")
        return cls(Fraction(x))

    def __add__(self, other: Epsilon) -> Epsilon:
        return Epsilon(self.value + other.value)

    def __sub__(self, other: Epsilon) -> Fraction:  # may be negative (what is left after a lowered cap)
        return self.value - other.value

    def __float__(self) -> float:
        """The nearest float (what a ledger entry or a provenance file records)."""
        return float(self.value)

    def __str__(self) -> str:
        return f"{float(self):.6g}"


EpsilonLike = Epsilon | Fraction | int | float
ZERO = Epsilon(Fraction(0))


@dataclass(frozen=True)
class Spend:
    """One measurement's charge: ``kind`` ("perturb", "counts", "prior", ...), its ``epsilon`` and a JSON
    ``detail`` (no secret value)."""

    kind: str
    epsilon: Epsilon
    detail: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, kind: str, epsilon: EpsilonLike, detail: Mapping[str, Any] | None = None) -> Spend:
        return cls(kind, Epsilon.of(epsilon, f"the epsilon of {kind}"), dict(detail or {}))


def compose(spends: Iterable[Spend | EpsilonLike]) -> Epsilon:
    """Basic sequential composition (Dwork and Roth 2014, *The Algorithmic Foundations of Differential
    Privacy*, Thm 3.16): measurements of one individual's data that are eps_1-, ..., eps_k-DP under one
    neighbour relation are jointly (eps_1 + ... + eps_k)-DP under it, whatever their order and adaptivity.
    Protected: each individual of the population, against anyone seeing every output; neighbours: tables
    differing in one individual's records (each moved within the protection radius for the mDP part, as
    Chatzikokolakis et al. 2013 compose metric guarantees). Returns the exact sum (order-independent)."""
    total = Fraction(0)
    for s in spends:
        total += (s.epsilon if isinstance(s, Spend) else Epsilon.of(s)).value
    return Epsilon(total)


@dataclass(frozen=True)
class Budget:
    """A cap on the composed spend of one population (None: no cap yet, everything is admitted)."""

    cap: Epsilon | None

    @classmethod
    def of(cls, cap: EpsilonLike | None) -> Budget:
        return cls(None if cap is None else Epsilon.of(cap, "the cap"))

    def admits(
        self,
        spent: Iterable[Spend | EpsilonLike] | EpsilonLike,
        planned: Iterable[Spend | EpsilonLike] | EpsilonLike = (),
    ) -> bool:
        """True when ``compose(spent + planned) <= cap`` exactly (``spent`` and ``planned``: one epsilon or
        several)."""
        if self.cap is None:
            return True
        return compose([*_many(spent), *_many(planned)]) <= self.cap

    def left(self, spent: Iterable[Spend | EpsilonLike] | EpsilonLike) -> Fraction | None:
        """cap - composed spend (negative after a lowering), None without a cap."""
        return None if self.cap is None else self.cap - compose(_many(spent))


def _many(x: Iterable[Spend | EpsilonLike] | EpsilonLike) -> list[Spend | EpsilonLike]:
    if isinstance(x, (Epsilon, Spend, Fraction, int, float)):
        return [x]
    return list(x)


# ------------------------------------------------------------------------------------------ the guarantee
def round_up(x: Fraction) -> float:
    """The smallest float whose reading (:meth:`Epsilon.of`: its shortest decimal) is >= ``x``: what a
    ledger records for an exact charge, never below it."""
    f = float(x)
    while Fraction(repr(f)) < x:
        f = math.nextafter(f, math.inf)
    return f


def mechanism_epsilon(epsilon_per_unit: float, stretch: float, protection_radius: float) -> float:
    """The ledger charge of a perturbation: eps (per unit) x stretch x protection radius x (1 + the
    certificate's relative tolerance) in exact arithmetic, rounded *up* to a float (the metric guarantee
    e^(eps stretch d) at d = the radius the agency protects people within, as the statement states it:
    :func:`stated_metric`). eps and the radius are read as the decimals written (:meth:`Epsilon.of`), the
    stretch (a computed float) as its exact binary value. PrivacyError for a stretch that is not a finite
    number >= 1."""
    if not math.isfinite(stretch) or stretch < 1.0:
        raise PrivacyError(f"the mDP graph's stretch {stretch!r} is not a finite number >= 1")
    eps = Epsilon.of(float(epsilon_per_unit), "eps").value
    radius = Epsilon.of(float(protection_radius), "the protection radius").value
    tolerance = 1 + Fraction(repr(CERTIFIED_RATIO_TOL))
    return round_up(eps * Fraction(float(stretch)) * radius * tolerance)


def additive_epsilon(prov: Mapping[str, Any]) -> float | None:
    """eps_counts + eps_prior (+ eps_error, issue 50: absent in earlier releases, 0) of a provenance record
    (exact sum, as a float); None when one is missing or not a number."""
    parts: list[float] = []
    for key in ("eps_counts", "eps_prior", "eps_error"):
        p = prov.get(key, 0.0) if key == "eps_error" else prov.get(key)
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or p < 0:
            return None
        parts.append(p)
    return float(compose(parts))


def this_release(epsilon_per_unit: float, stretch: float, protection_radius: float, additive: float) -> float:
    """A release's charge to its population's ledger: the exact composition of :func:`mechanism_epsilon`
    (the perturbed locations: eps x stretch x radius with the certificate's tolerance, rounded up) and
    ``additive`` (counts, DP prior), rounded up to a float; what ``ledger.this_release`` must say."""
    return round_up(compose([mechanism_epsilon(epsilon_per_unit, stretch, protection_radius), additive]).value)


def stated_metric(epsilon_per_unit: float, stretch: float) -> str:
    """The metric epsilon as the statement prints it: eps x stretch x (1 + the certificate's relative
    tolerance), rounded *up* to 6 significant digits, so the printed figure is never below what is proven."""
    x = epsilon_per_unit * stretch * (1 + CERTIFIED_RATIO_TOL)
    if not (math.isfinite(x) and x > 0):
        return f"{x:g}"
    e = math.floor(math.log10(x)) - 5
    return f"{math.ceil(x / 10.0**e) * 10.0**e:.6g}"


@dataclass(frozen=True)
class Guarantee:
    """What a release promises: ``epsilon_per_unit`` of the certified mechanism (per ``distance_unit``), the
    mDP graph's ``stretch`` (>= 1), the ``protection_radius`` the budget is charged at, the eps-DP
    ``additive_epsilon`` (counts, plus the DP prior when ``with_prior``)."""

    epsilon_per_unit: float
    stretch: float
    protection_radius: float
    additive_epsilon: float
    distance_unit: str
    with_prior: bool
    stretch_within_radius: float | None = None  # None: the stretch (releases before issue 40)
    max_snap: float | None = None  # people's largest distance to their record (max_distance); None: not stated
    all_pairs: bool = False  # every pair of a component certified in the metric itself (stretch 1, issue 51)
    with_error: bool = False  # the additive epsilon includes a DP mean of the people's error (eps_error, issue 50)

    @property
    def _released(self) -> str:
        """What the factor covers beside the microdata: the counts, the DP prior, the people's mean error."""
        return "counts" + (", prior" if self.with_prior else "") + (", mean error" if self.with_error else "")

    @property
    def _composed(self) -> str:
        """The eps-DP measurements composed with the mechanism, in words."""
        parts = ["counts"] + (["prior"] if self.with_prior else []) + (["mean error"] if self.with_error else [])
        return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]

    @property
    def radius_stretch(self) -> float:
        """The stretch over the pairs within the protection radius: what a move the budget is charged for
        can cost (<= :attr:`stretch`; 1 when every pair within the radius is an edge of the mDP graph)."""
        return self.stretch if self.stretch_within_radius is None else self.stretch_within_radius

    def statement(self) -> str:
        """The guarantee in words (``guarantee.statement``; the audit checks its figures).

        A certified mechanism gives z_ik <= exp(eps d_ij) z_jk on the mDP graph's edges, hence
        exp(eps D_G(i, j)) for any two records of one component (D_G: shortest path), and
        exp(eps stretch d(i, j)) in the data's metric d (stretch = max D_G / d, the graph's dilation:
        Chatzikokolakis et al. 2013; Bordenabe, Chatzikokolakis and Palamidessi, CCS 2014); the eps-DP counts
        (and DP prior) add ``additive_epsilon`` by sequential composition (Dwork and Roth 2014, Thm 3.16)."""
        unit = self.distance_unit
        if self.all_pairs:
            return self._every_pair() + self._people()
        within = ""
        if self.radius_stretch < self.stretch:
            within = (
                f"for any individual and any two records r, r' at most {self.protection_radius:g} {unit} apart (the "
                f"protection radius), the probability of every possible release changes by at most a factor "
                f"exp({stated_metric(self.epsilon_per_unit, self.radius_stretch)} * d(r, r') + "
                f"{self.additive_epsilon:g}) (eps {self.epsilon_per_unit:g} x stretch {self.radius_stretch:.6g} "
                "over the pairs within the radius); farther apart, "
            )
        return (
            within
            + (
                f"for any individual and any two records r, r' in one component of the mDP graph, the probability of "
                f"every possible release (microdata, {self._released}) changes by at most a factor "
                f"exp({stated_metric(self.epsilon_per_unit, self.stretch)} * d(r, r') + {self.additive_epsilon:g}), d "
                f"in {unit} in the data's own metric (eps {self.epsilon_per_unit:g} per {unit} of the certified "
                f"mechanism x stretch {self.stretch:.6g} of the mDP graph, Chatzikokolakis et al. 2013 and Bordenabe et "
                f"al. 2014, composed sequentially with the eps-DP {self._composed}, Dwork and Roth "
                f"2014 Thm 3.16); the budget is charged for records up to {self.protection_radius:g} {unit} apart (the "
                f"factor includes the certificate's relative tolerance {CERTIFIED_RATIO_TOL:g}, rounded up)"
            )
            + self._people()
        )

    def _every_pair(self) -> str:
        """The statement of a mechanism certified over every two records of one component at their distance in the
        metric itself (:attr:`mdp_core.declarations.solver_options.SolverOptions.all_pairs`): one rate, no graph
        stretch (Chatzikokolakis et al. 2013 with the metric d itself)."""
        unit = self.distance_unit
        return (
            f"eps {self.epsilon_per_unit:g} per {unit} for any two records: for any individual and any two records r, "
            f"r' in one component of the mDP graph, the probability of every possible release (microdata, "
            f"{self._released}) changes by at most a factor "
            f"exp({stated_metric(self.epsilon_per_unit, self.stretch)} * d(r, r') + {self.additive_epsilon:g}), d in "
            f"{unit} in the data's own metric (every two records of a component certified at their distance d itself, "
            f"Chatzikokolakis et al. 2013: no graph stretch, stretch {self.stretch:.6g}; composed sequentially with the "
            f"eps-DP {self._composed}, Dwork and Roth 2014 Thm 3.16); the budget is charged for "
            f"records up to {self.protection_radius:g} {unit} apart (the factor includes the certificate's relative "
            f"tolerance {CERTIFIED_RATIO_TOL:g}, rounded up)"
        )

    def _people(self) -> str:
        """The guarantee for people's own coordinates (issue 50): each person is mapped to a record at most
        ``max_snap`` away before the mechanism runs (post-processing of the person's location cannot weaken an
        mDP guarantee on the records), and d(r, r') <= d(p, p') + s(p) + s(p') (triangle inequality), so two people
        p, p' get the records' factor at d(p, p') + 2 x max_snap."""
        if self.max_snap is None:
            return ""
        s, unit = self.max_snap, self.distance_unit
        within = (
            ""  # every pair certified: one rate, so one factor
            if self.all_pairs
            else f"exp({stated_metric(self.epsilon_per_unit, self.radius_stretch)} * (d(p, p') + 2 x {s:g}) + "
            f"{self.additive_epsilon:g}) while their records are within the protection radius, and "
        )
        return (
            f"; for people's own coordinates: each person is mapped to a record at most {s:g} {unit} away (max_distance) "
            f"before the mechanism, so for two people p, p' the factor is at most {within}"
            f"exp({stated_metric(self.epsilon_per_unit, self.stretch)} * (d(p, p') + 2 x {s:g}) + "
            f"{self.additive_epsilon:g}) in one component (d(r, r') <= d(p, p') + s(p) + s(p'), s: a person's "
            "distance to their record)"
        )

    def record(self) -> dict[str, Any]:
        """The provenance v3 ``guarantee`` block (the audit checks each figure)."""
        return {
            "epsilon_per_unit": self.epsilon_per_unit,
            "stretch": self.stretch,
            "metric_epsilon_per_unit": self.epsilon_per_unit * self.stretch,
            "protection_radius": self.protection_radius,
            "additive_epsilon": self.additive_epsilon,
            "distance_unit": self.distance_unit,
            "statement": self.statement(),
        } | ({} if self.stretch_within_radius is None else {"stretch_within_radius": self.stretch_within_radius})

    def charge(self) -> float:
        """This release's charge: :func:`this_release` of the guarantee's figures, at the stretch within the
        protection radius (a move within the radius is what the budget is charged for)."""
        return this_release(self.epsilon_per_unit, self.radius_stretch, self.protection_radius, self.additive_epsilon)


__all__ = [
    "CERTIFIED_RATIO_TOL",
    "ZERO",
    "Budget",
    "Epsilon",
    "Guarantee",
    "Spend",
    "additive_epsilon",
    "compose",
    "mechanism_epsilon",
    "round_up",
    "stated_metric",
    "this_release",
]
