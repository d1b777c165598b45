"""The privacy door: every rule of a release's guarantee decided once, by one pure function, before anything
is measured. ``mdp-release check``, the run (before its first charge), the stage that measures the secret
table and ``--from-manifest`` all call :func:`plan_privacy`; nothing else decides a radius, a charge or a
refusal (``docs/privacy.md``, "The rules of the door").

Inputs are public facts of the instance (:class:`GraphFacts`, recomputed from the instance's records and
edges, never read from a stage's claim), the release's settings (:class:`Settings`) and, for an agency's
table, facts about the secret table that were validated before the door (:class:`TableFacts`: counts
only, never a row or a value). The result, :class:`PrivacyPlan`, holds the guarantee, every planned
charge in exact arithmetic (:func:`mdp_core.declarations.budget.mechanism_epsilon`: the certificate's tolerance
included, rounded up; the stretch it pays is the one over the pairs within the protection radius, the moves
the budget is charged for) and every refusal with its reason. A plan with refusals admits nothing.

The rules (each with its reason):

1. **The radius is at least eta** (``protection_radius``, unset: eta): the ledger charges eps x stretch x
   radius; a radius below the mechanism's own neighbourhood would make a release nearly free.
2. **max_distance is at most the radius** (unset: eta): a person farther from every record than the
   radius would be released as a record the guarantee does not speak for (a person in Milan released as a
   Rome record); a farther person is an error, never mapped.
3. **Nobody alone**: a record alone in its component of the mDP graph has no other record it is
   indistinguishable from, and the optimal mechanism releases it deterministically; refused whatever
   ``allow_unprotected`` says. ``allow_unprotected`` still admits several components of at least two
   records each (and a stretch above ``max_stretch``), stated in the officer's summary. The stage that
   measures also refuses a mechanism with a deterministic row (:func:`deterministic_rows`), a backstop:
   in a component of two or more records an eps-mDP row cannot be deterministic unless the whole
   component is sent to one output, a release that says nothing.
4. **A finite stretch** (else nothing can be stated or charged).
5. **The public universe is public**: the instance may not be built from the secret table: the table's
   bytes among the dataset's input files, or (for kinds whose records come from a file the user gives,
   ``Kind.universe_files``) a universe the people lie evidently closer to than its records' density
   explains (:func:`mdp_core.release.universe.universe_test`: most of the people with a record within
   15 m, or most of the records with a person, beyond a null of the people shifted by a few times that),
   whatever jitter, rounding, subset or padding made it.
6. **One population, by similarity**: a table sharing most of its people with another population of the
   store (:func:`mdp_core.release.similarity.overlap` against each population's keyed sketch: people
   within a cell of 11 m, or the records they locate to) is refused, naming that population; a
   population named ``simulated-...`` is reserved for simulated people.
7. **Every person mapped**: rows that cannot be read or mapped, and people farther than max_distance, are
   refused before any charge (``mdp-release check`` shows how many and which rows, on the operator's
   terminal only).

No refusal or error names a figure of the secret table (a count, a share): they reach Prefect's database and
logs; the figures are in :attr:`PrivacyPlan.details`, for ``check``'s terminal, and (rule 7's errors only, a
SecretTableError's ``detail``) the private failure record; a refusal by rule 5 or 6 alone records none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mdp_core.declarations.budget import Epsilon, Guarantee, Spend, compose, mechanism_epsilon
from mdp_core.errors import PrivacyError, SecretTableError

if TYPE_CHECKING:  # numpy and scipy: imported where used (a cached release's door never loads them)
    from mdp_core.release.similarity import People
    from mdp_core.release.universe import UniverseTest

SIMULATED_PREFIX = "simulated-"
CHECK_ROWS = "`mdp-release check --config F` shows how many and which, on your terminal only"
CHECK_FIGURES = "`mdp-release check --config F` shows the figures, on your terminal only"
DETERMINISTIC = 1.0 - 1e-12  # a mechanism row whose largest entry is at least this is deterministic


@dataclass(frozen=True)
class Settings:
    """A release's privacy settings, in the instance's distance unit (eps per unit): the config's
    ``[privacy]`` and ``[release]`` sections resolved against the instance (``epsilon`` and ``eta`` set)."""

    epsilon: float
    eta: float
    protection_radius: float | None = None
    max_distance: float | None = None
    eps_counts: float = 1.0
    eps_prior: float | None = None  # None: no DP prior (dataset, uniform or a public file)
    eps_error: float | None = None  # a DP mean of the people's own error (issue 50); None: not measured
    max_stretch: float = 2.0
    allow_unprotected: bool = False
    population: str | None = None  # the agency's population (None: simulated people)
    all_pairs: bool = False  # the mechanism is certified over every pair of a component in the metric (issue 51)

    def as_params(self) -> dict[str, Any]:
        """The settings as a stage's JSON parameters (``Settings(**params)`` reads them back); ``eps_error`` only
        when set, so a release without it keeps its stage parameters (and its cached measurement)."""
        return {k: v for k, v in self.__dict__.items() if k != "eps_error" or v is not None}

    @property
    def radius(self) -> float:
        """The protection radius: ``protection_radius``, unset: eta."""
        return float(self.eta if self.protection_radius is None else self.protection_radius)

    @property
    def distance_limit(self) -> float:
        """max_distance, unset: eta."""
        return float(self.eta if self.max_distance is None else self.max_distance)


@dataclass(frozen=True)
class GraphFacts:
    """Public facts of the mDP graph over the instance's records: component sizes (largest first), the
    stretch (max over pairs of one component of D_G / d) and the distance unit. ``all_pairs``: the facts of a
    mechanism certified over every pair of a component in the metric itself (stretch 1 by certificate:
    :func:`mdp_core.release.protection.graph_protection` with ``all_pairs``), not over the graph's edges."""

    n_records: int
    component_sizes: tuple[int, ...]
    stretch: float
    distance_unit: str
    stretch_within: float | None = None  # over the pairs within the protection radius (None: the stretch)
    all_pairs: bool = False

    @property
    def n_components(self) -> int:
        return len(self.component_sizes)

    @classmethod
    def of(cls, protection: Any, n_records: int, unit: str, all_pairs: bool = False) -> GraphFacts:
        """From a :class:`mdp_core.release.protection.Protection` (recomputed, not read from a file)."""
        sizes = tuple(int(s) for s in protection.component_sizes)
        within = float(protection.stretch_within)
        return cls(int(n_records), sizes, float(protection.stretch), unit, within, bool(all_pairs))

    @classmethod
    def recomputed(cls, inst: Any, radius: float | None = None, all_pairs: bool = False) -> tuple[GraphFacts, Any]:
        """The facts of ``inst``'s own mDP graph (its records, edges and distances), recomputed
        (:func:`mdp_core.release.protection.graph_protection`, with the stretch within ``radius``; ``all_pairs``:
        for a mechanism certified over every pair of a component, stretch 1), and that Protection."""
        from mdp_core.release.protection import graph_protection

        prot = graph_protection(inst, inst.edges, inst.distances, radius=radius, all_pairs=all_pairs)
        return cls.of(prot, inst.n_records, inst.distance_unit, all_pairs), prot

    @property
    def radius_stretch(self) -> float:
        """The stretch the budget pays: over the pairs within the protection radius."""
        return self.stretch if self.stretch_within is None else self.stretch_within


@dataclass(frozen=True)
class TableFacts:
    """What the door needs to know of the secret table, validated before it: counts only (never published,
    never a row number or a value). ``other_population``: another population of the store this table shares
    most of its people with (``other_share``: that share), if any; ``universe_bytes``: the table's bytes are
    one of the dataset's input files; ``universe``: the universe test's figures (shares and counts) for a
    user's universe and a table by coordinates, else None."""

    n_people: int
    n_records: int = 0
    n_unreadable: int = 0
    unreadable: str = "cannot be read or mapped to a record"  # what is wrong with them (a verb phrase, no value)
    n_far: int = 0
    by_key: bool = False
    universe_bytes: bool = False
    other_population: str | None = None
    other_share: float = 0.0
    universe: UniverseTest | None = None


@dataclass(frozen=True)
class PrivacyPlan:
    """The door's verdict: the guarantee, the planned charges (perturbation, counts, prior: exact), the
    settings it was decided for and the refusals (empty: admitted)."""

    population: str | None
    radius: float
    max_distance: float
    guarantee: Guarantee
    spends: tuple[Spend, ...]
    settings: Settings
    refusals: tuple[str, ...] = field(default=())
    errors: tuple[str, ...] = field(default=())  # the secret table's own problems (bad rows, people too far)
    table: str | None = None  # the sealed table's keyed handle, set by the run once it sealed the table
    # the secret table's figures behind its errors and refusals (counts, shares): for the operator's terminal
    # (`mdp-release check`) and SecretTableError.detail (the private failure record) only, never a message
    details: tuple[str, ...] = field(default=(), repr=False)

    @property
    def accepted(self) -> bool:
        return not self.refusals and not self.errors

    @property
    def reasons(self) -> tuple[str, ...]:
        """Every reason this plan admits nothing: the table's errors, then the refusals."""
        return self.errors + self.refusals

    @property
    def charge(self) -> Epsilon:
        """The release's whole charge (exact)."""
        return compose(self.spends)

    def spend(self, kind: str) -> Spend:
        """The planned spend of ``kind`` ("perturb", "counts", "prior", "error")."""
        return next(s for s in self.spends if s.kind == kind)

    def charges(self) -> dict[str, float]:
        """{kind: epsilon} of the planned spends (the ledger's floats: each one read back exactly)."""
        return {s.kind: float(s.epsilon) for s in self.spends}

    def admit(self) -> PrivacyPlan:
        """This plan; or, nothing measured or charged, a SecretTableError (an InputError: the table is bad, a
        failure to fix) naming its errors, else a PrivacyError (a refusal) naming every refusal."""
        if self.errors:
            raise SecretTableError("; ".join(self.errors), "; ".join(self.errors + self.details))
        if self.refusals:
            raise PrivacyError("release refused: " + "; ".join(self.refusals))
        return self


def plan_privacy(settings: Settings, graph: GraphFacts, table: TableFacts | None = None) -> PrivacyPlan:
    """The release's :class:`PrivacyPlan` (module docstring: the rules). Pure: no store, no file."""
    s, radius, limit = settings, settings.radius, settings.distance_limit
    why: list[str] = []
    why += _settings_rules(s, radius, limit)
    why += _graph_rules(s, graph)
    if s.all_pairs != graph.all_pairs:  # the stretch must be the one of the pairs the mechanism is certified over
        why.append(
            f"the settings {'claim' if s.all_pairs else 'do not claim'} every pair certified (all_pairs) but the mDP "
            f"graph's facts were computed {'with' if graph.all_pairs else 'without'} it"
        )
    errors: list[str] = []
    details: list[str] = []
    if table is not None:
        why += _table_rules(s, table)
        errors += _table_errors(table, limit, graph.distance_unit)
        details += _table_details(table, limit, graph.distance_unit)
    stretch = graph.stretch if math.isfinite(graph.stretch) and graph.stretch >= 1 else 1.0
    within = min(max(graph.radius_stretch, 1.0), stretch) if math.isfinite(graph.radius_stretch) else stretch
    prior = s.eps_prior is not None
    additive = compose([s.eps_counts, s.eps_prior or 0.0, s.eps_error or 0.0])
    unit, every, error = graph.distance_unit, graph.all_pairs, bool(s.eps_error)
    guarantee = Guarantee(s.epsilon, stretch, radius, float(additive), unit, prior, within, limit, every, error)
    spends = [Spend.of("perturb", mechanism_epsilon(s.epsilon, within, radius)), Spend.of("counts", s.eps_counts)]
    if prior:
        spends.append(Spend.of("prior", float(s.eps_prior or 0.0)))
    if error:
        spends.append(Spend.of("error", float(s.eps_error or 0.0)))
    return PrivacyPlan(
        s.population, radius, limit, guarantee, tuple(spends), s, tuple(why), tuple(errors), details=tuple(details)
    )


def _settings_rules(s: Settings, radius: float, limit: float) -> list[str]:
    why = []
    if radius < s.eta:
        why.append(
            f"protection_radius = {radius:g} is below eta = {s.eta:g}: the budget is charged at the protection "
            "radius, which may not be smaller than the mechanism's neighbourhood (a tiny radius would make every "
            "release nearly free)"
        )
    if limit > radius:
        why.append(
            f"max_distance = {limit:g} is above the protection radius {radius:g}: a person that far from every "
            "record would be released as a record the guarantee does not speak for; set max_distance <= "
            "protection_radius (people farther away are then an error, never moved to a distant record)"
        )
    if s.population is not None and s.population.startswith(SIMULATED_PREFIX):
        why.append(
            f"population {s.population!r}: names starting with {SIMULATED_PREFIX!r} are reserved for simulated "
            "people; an agency's table needs its own population name"
        )
    return why


def _graph_rules(s: Settings, g: GraphFacts) -> list[str]:
    why = []
    if not math.isfinite(g.stretch) or g.stretch < 1:
        why.append(
            "the mDP graph's stretch is unbounded: some pair of records in one component has no provable metric "
            "distance (records without coordinates whose distances are stored only for neighbours): give the "
            "records coordinates"
        )
    alone = sum(1 for size in g.component_sizes if size == 1)
    if alone:
        why.append(
            f"{alone} record(s) of {g.n_records} are alone in their component of the mDP graph at eta = {s.eta:g} "
            f"{g.distance_unit}: nobody there is protected from anybody (refused whatever allow_unprotected "
            "says); raise eta (`mdp-release check` suggests one) or use fewer, coarser records"
        )
    problems = []
    if g.n_components > 1:
        sizes = list(g.component_sizes)
        problems.append(
            f"the mDP graph has {g.n_components} components (sizes {sizes[:6]}{'...' if len(sizes) > 6 else ''}): "
            "records in different components are not protected from each other"
        )
    if math.isfinite(g.stretch) and g.stretch > s.max_stretch:
        problems.append(
            f"its stretch (path distance over metric distance, worst pair) is {g.stretch:.4g} > max_stretch = "
            f"{s.max_stretch:g}: two records are protected only as if they were {g.stretch:.4g} times farther "
            "apart than they are (the guarantee in the data's metric is eps x stretch)"
        )
    if problems and not s.allow_unprotected:
        why.append(
            "; ".join(problems) + ". Raise eta (`mdp-release check` suggests one that connects the records), or "
            "accept it explicitly: [privacy] max_stretch (the ledger charges eps x stretch x protection_radius) or "
            "allow_unprotected = true (the report then states who is unprotected)"
        )
    return why


def same_population(population: str) -> str:
    """Rule 6's refusal (a table sharing most of its people with ``population``): the rule, its threshold and the
    remedy, never the measured share (a figure of the secret table: ``mdp-release check`` shows it, terminal only)."""
    return (
        f"this table shares most of its people with population {population!r} in this store (rule 6, one population "
        "by similarity: more than half of its people found there, or nearly all of that population's; a table "
        "keyed by record, by the records both locate to: either share above 0.9): the same "
        f"people belong to one population (its budget); release it as population = {population!r}"
    )


def _table_rules(s: Settings, t: TableFacts) -> list[str]:
    why = []
    if t.universe_bytes:
        why.append(
            "the public universe is built from the secret table itself (the microdata file is one of the "
            "dataset's input files): every person's location would be published as a record; build the universe "
            "from public data (a road network, a grid, a public list of places)"
        )
    elif t.universe is not None and t.universe.built_from_people:
        why.append(
            f"the public universe is built from the people (rule 5, the universe test at delta = "
            f"{t.universe.delta:.3g}): the people lie closer to its records than a universe independent of them "
            "explains, so its records would publish the people's locations; build the universe from public data "
            f"(a road network, a grid, a public list of places) ({CHECK_FIGURES})"
        )
    if t.other_population is not None and t.other_population != s.population:
        why.append(same_population(t.other_population))
    return why


def _table_errors(t: TableFacts, limit: float, unit: str) -> list[str]:
    why = []
    if t.n_unreadable:
        why.append(f"microdata: some row(s) {t.unreadable} ({CHECK_ROWS})")
    if t.n_far:
        why.append(
            f"microdata: some individual(s) lie farther than max_distance = {limit:g} {unit} from every record; "
            f"check the coordinates or raise [release] max_distance ({CHECK_ROWS})"
        )
    if t.n_people == 0:
        why.append("microdata: the table holds no individual")
    return why


def _table_details(t: TableFacts, limit: float, unit: str) -> list[str]:
    """The table's figures behind its errors and refusals (counts, shares): for the operator's terminal
    (``mdp-release check``) and, with rule 7's errors, the private failure record; never a message."""
    out = []
    if t.n_unreadable:
        out.append(f"microdata: {t.n_unreadable} of {t.n_people} row(s) {t.unreadable}")
    if t.n_far:
        out.append(
            f"microdata: {t.n_far} of {t.n_people} individual(s) lie farther than max_distance = {limit:g} {unit}"
        )
    if t.universe is not None and t.universe.built_from_people:
        out.append(t.universe.reason())
    if t.other_population is not None:
        out.append(f"rule 6: {t.other_share:.0%} of this table's people found in population {t.other_population!r}")
    return out


def table_facts(
    located: Any,
    n_records: int,
    max_distance: float,
    *,
    universe_bytes: bool = False,
    other: tuple[str, float] | None = None,
    universe: UniverseTest | None = None,
) -> TableFacts:
    """:class:`TableFacts` of a located table (:func:`mdp_core.problem.microdata.locate`: record ids (n,),
    distances (n,) in the instance's unit, the unmappable rows (n,) bool, ``by``). ``other``: (population,
    share) of another population sharing most of its people (:func:`mdp_core.release.similarity.overlap`);
    ``universe``: the universe test of a user's universe (:func:`table_people`), None when none applies."""
    import numpy as np

    ids = np.asarray(located.record_ids)
    dist = np.asarray(located.distances, dtype=np.float64)
    bad = np.asarray(located.bad, dtype=bool)
    with np.errstate(invalid="ignore"):
        far = ~bad & (np.nan_to_num(dist, nan=0.0) > max_distance)
    return TableFacts(
        n_people=int(ids.size),
        n_records=int(n_records),
        n_unreadable=int(bad.sum()),
        unreadable=str(getattr(located, "bad_reason", "") or TableFacts.unreadable),
        n_far=int(far.sum()),
        by_key=str(located.by).startswith("record"),
        universe_bytes=universe_bytes,
        other_population=None if other is None else other[0],
        other_share=0.0 if other is None else float(other[1]),
        universe=universe,
    )


def table_people(frame: Any, inst: Any, located: Any) -> People:
    """The table's people for the universe test and the population sketch (secret: memory only): their
    coordinates in the instance's space (lat, lon; x0..; None for a table keyed by record) and the
    coordinates of the record each locates to (NaN where it does not; the record id when records have no
    coordinates)."""
    import numpy as np
    import pandas as pd

    from mdp_core.problem.microdata import canonical_frame
    from mdp_core.release.similarity import People

    recs = inst.records
    by = str(located.by)
    # in the space the people were located in: lat/lon, or the instance's own x0.. (a grid's km) when the
    # table gave those (a grid's records carry both)
    geo = recs is not None and {"lat", "lon"} <= set(recs.columns) and not by.startswith("x")
    if geo:
        coords = recs[["lat", "lon"]].to_numpy(dtype=np.float64)
    elif inst.coordinate_columns():
        coords = np.asarray(inst.record_points(), dtype=np.float64)
    else:
        coords = np.arange(inst.n_records, dtype=np.float64)[:, None]
    ids = np.asarray(located.record_ids, dtype=np.int64)
    at = np.full((ids.size, coords.shape[1]), np.nan)
    at[ids >= 0] = coords[ids[ids >= 0]]
    if by.startswith("record"):
        return People(None, at, geo)
    cols = ["lat", "lon"] if geo else inst.coordinate_columns()
    df = canonical_frame(frame)
    pts = np.column_stack([pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64) for c in cols])
    pts[np.asarray(located.bad, dtype=bool)] = np.nan
    anchor = _grid_anchor(inst)
    if not geo and anchor is not None and recs is not None and {"lat", "lon"} <= set(recs.columns):
        # a grid's km, brought into lat, lon by the grid's own map: the universe test and the population sketch
        # see the same people whichever columns the table gives (in km, a sketch in lat, lon missed them all)
        from mdp_core.problem.datasets.grid import grid_latlon

        latlon = recs[["lat", "lon"]].to_numpy(dtype=np.float64)
        at = np.full((ids.size, 2), np.nan)
        at[ids >= 0] = latlon[ids[ids >= 0]]
        return People(grid_latlon(pts, anchor), at, True)
    return People(pts, at, geo)


def _grid_anchor(inst: Any) -> tuple[float, float] | None:
    """The (lat, lon) south-west corner of a grid instance whose km (x0, x1) map exactly to its records' lat, lon
    (:func:`mdp_core.problem.datasets.grid.grid_latlon`); None for any other instance."""
    anchor = (inst.provenance.get("parameters") or {}).get("anchor_sw")
    if inst.provenance.get("dataset") != "grid" or anchor is None or len(inst.coordinate_columns()) != 2:
        return None
    return float(anchor[0]), float(anchor[1])


def resolved_rows(rows: Any, inst: Any) -> Any:
    """The sealed rows of a table keyed by a user's file ids (``record`` matched against ``inst``'s
    :attr:`~mdp_core.declarations.dataset_kinds.Kind.file_columns` key, the road file's ``osmid``) with each key
    replaced by the generated record id it names (text; a key naming no record: missing, counted unreadable),
    canonical again (:func:`mdp_core.problem.microdata.sealed_rows`) over the published instance, which has no
    such column: what the run seals and every later step maps against the published instance. Any other rows:
    unchanged. Secret in, secret out (memory only)."""
    from mdp_core.declarations.dataset_kinds import FILE_COLUMNS, published_instance
    from mdp_core.problem.microdata import KEY_COLUMNS, sealed_rows

    recs = inst.records
    col = next((c for c in KEY_COLUMNS if c in FILE_COLUMNS and recs is not None and c in recs.columns), None)
    if col is None or list(rows.columns) != ["record"]:
        return rows
    import numpy as np
    import pandas as pd

    keys = rows["record"]
    pos = np.asarray(pd.Index(recs[col].astype(str)).get_indexer(keys.astype(str)), dtype=np.int64)
    bad = keys.isna().to_numpy() | (pos < 0)
    ids = [None if b else str(i) for b, i in zip(bad, pos, strict=True)]
    return sealed_rows(pd.DataFrame({"record": pd.Series(ids, dtype=object)}), published_instance(inst))


def _universe_degrees(points: Any, inst: Any, cols: list[str]) -> Any:
    """The (n, 2) people ``points`` given in a grid's own km (x0 east, x1 north) in lat, lon degrees, by the
    grid's own map (:func:`mdp_core.problem.datasets.grid.grid_latlon` at its anchor, the one its records'
    lat, lon come from): what the universe test compares with the file's (lat, lon) points ``cols``. A
    SecretTableError naming the columns to give (nothing charged) for an instance with no such exact map."""
    anchor = _grid_anchor(inst)
    if anchor is None or points.shape[1] != 2:
        raise SecretTableError(
            "the secret table gives the people in the instance's own coordinates, which cannot be compared "
            f"with the universe file's points ({', '.join(cols)}, degrees) for rule 5: give them as lat, lon"
        )
    from mdp_core.problem.datasets.grid import grid_latlon

    return grid_latlon(points, anchor)


def universe_facts(people: People, inst: Any) -> UniverseTest | None:
    """The universe test of ``people`` against the points of the user's file ``inst``'s records come from: its
    kind's :attr:`~mdp_core.declarations.dataset_kinds.Kind.universe_points` when ``inst`` carries them (the
    grid's snapped road nodes, not its cell centres; people given in the grid's km are brought into lat, lon
    by the grid's own map first, so a table's verdict does not depend on the columns it gives), else the
    records' coordinates. None for a table keyed by record (its people are their records, nothing to test)."""
    if people.points is None:
        return None
    import numpy as np

    from mdp_core.declarations.dataset_kinds import DECLARED
    from mdp_core.release.universe import universe_test

    recs = inst.records
    names = set() if recs is None else set(recs.columns)
    points = [list(k.universe_points) for k in DECLARED.values() if k.universe_points]
    at = next((cols for cols in points if set(cols) <= names), None)
    if at is not None:
        pts = people.points if people.geo else _universe_degrees(people.points, inst, at)
        return universe_test(pts, recs[at].to_numpy(dtype=np.float64), True)
    coords = recs[["lat", "lon"]].to_numpy(dtype=np.float64) if people.geo else np.asarray(inst.record_points())
    return universe_test(people.points, coords, people.geo)


def deterministic_rows(z: Any) -> int:
    """How many rows of the mechanism ``z`` (N, K) put (almost) all their mass on one output."""
    import numpy as np

    z = np.asarray(z, dtype=np.float64)
    return int((z.max(axis=1) >= DETERMINISTIC).sum()) if z.size else 0


def refuse_deterministic(z: Any) -> None:
    """PrivacyError when a row of ``z`` is deterministic (rule 3's backstop), before anything is charged."""
    n = deterministic_rows(z)
    if n:
        raise PrivacyError(
            f"release refused: {n} of {z.shape[0]} row(s) of the mechanism are deterministic (a record released as "
            "itself is not protected); raise eta or lower eps"
        )


__all__ = [
    "SIMULATED_PREFIX",
    "GraphFacts",
    "PrivacyPlan",
    "Settings",
    "TableFacts",
    "deterministic_rows",
    "plan_privacy",
    "refuse_deterministic",
    "resolved_rows",
    "same_population",
    "table_facts",
    "table_people",
    "universe_facts",
]
