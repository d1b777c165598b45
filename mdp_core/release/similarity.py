"""One population by similarity: a keyed sketch of a table's people, and a new table's overlap with it
(issue 49; the door's rule 6, docs/privacy.md).

A table's people (the unkeyed :class:`People`: coordinates and the records they locate to, secret, in
memory only) become, under the store's key, a :class:`Sketch`: two Bloom filters of HMAC-SHA256 tags,

* **cells**: each person's cell of side :data:`CELL_KM` (11 m; lat/lon as ground km on a band of that
  height, Euclidean coordinates in cells of :data:`CELL_UNITS` of the data's unit) -- for tables keyed by
  coordinates;
* **records**: each person's located record (its coordinates' cell) with the person's rank among the
  people at that record (a multiset: 3 people at one record are 3 tags) -- for every table, so a table
  keyed by record (an osmid) meets one keyed by coordinates on the records both locate to.

The overlap of a new table with a population's sketch (:func:`overlap`, :class:`Overlap`) is the share of
the new table's people found in it -- a person is found when any cell within one cell of it (3 x 3 in the
plane: every move up to a cell side, 11 m, and any re-encoding of the numbers) is among the population's
cells; when either table is keyed by record, when its located record tag is among the population's -- and
the share of the population's people the new table hits (distinct tags over their count). A table is the
same population's when most of its people are (> :data:`SAME_SHARE`, 0.5) or nearly all of the
population's are in it (> :data:`SAME_SHARE_RECORDS`, 0.9: the population padded with other people); by
records alone either share above 0.9 (two independent populations over the same records share a part of
their histograms by chance). A month's version of a table moves about 1 % of its people: far above both.

A population's sketch is the union of its versions' (:meth:`Sketch.merged`: filters of any two power-of-two
sizes, folded onto the smaller; a new version's are built at least at the population's size, so they are
never smaller), counted as its latest version's people, so a version is compared with every
person on record, not with the first table: the shares of a monthly version stay those of one month's change
(docs/privacy.md, rule 6, "Versions over time"); a union more than :data:`MAX_FILL` set starts again from the
latest version.

Why Bloom filters and not a MinHash or bottom-k sample: the question is containment with a tolerance (is
each new person within a cell of one of theirs?), which needs a membership test of every cell around each
new person; a sample of the other population's tags answers only for the sampled ones. Filters of at least
:data:`BITS_PER_TAG` bits per tag (rounded up to a power of two bytes) and :data:`HASHES` hash functions: a
false match per lookup about 1.4e-5 (9 lookups per person: < 2e-4); 2,000 people take 22 KB. The key is the
store's (under ``<store>/private/``): a sketch says nothing to whoever lacks it, and the file names nothing
(``tables/<HMAC of the population>``).
Pure: numpy and the standard library.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

CELL_KM = 0.011  # the people's cell side for lat/lon (11 m): every move up to it keeps a person found
CELL_UNITS = 1e-6  # the cell side of Euclidean coordinates (the data's unit): re-encoding only
SAME_SHARE = 0.5  # the same population: most of one table's people found in the other's (coordinates)
SAME_SHARE_RECORDS = 0.9  # the same, when only the records they locate to can be compared (a table by key)
BITS_PER_TAG = 24
HASHES = 12
MAX_FILL = 0.5  # a population's merged filters at most half set: a false match per lookup <= 0.5 ** 12 = 2.4e-4
KM_PER_DEG = 6371.0088 * math.pi / 180.0


@dataclass(frozen=True)
class People:
    """A table's people, unkeyed (secret: memory only). ``points`` (n, d) float64 (lat, lon degrees when
    ``geo``; None for a table keyed by record), ``records`` (n, d) float64 the coordinates of the record
    each person locates to (rows of NaN: not located)."""

    points: np.ndarray | None
    records: np.ndarray
    geo: bool

    @property
    def by_key(self) -> bool:
        return self.points is None


def _cells(points: np.ndarray, geo: bool, shift: tuple[float, float] = (0.0, 0.0)) -> list[bytes]:
    """Each point's cell as bytes (a row of NaN: no cell, b""). Geo: bands of CELL_KM of latitude, within a
    band CELL_KM of ground distance along it; ``shift`` moves the points first (km north, east)."""
    pts = np.asarray(points, dtype=np.float64)
    ok = np.all(np.isfinite(pts), axis=1)
    if geo:
        y = pts[:, 0] * KM_PER_DEG + shift[0]
        row = np.floor(y / CELL_KM)
        coslat = np.cos(np.deg2rad((row + 0.5) * CELL_KM / KM_PER_DEG))
        x = pts[:, 1] * KM_PER_DEG * coslat + shift[1]
        idx = np.column_stack([row, np.floor(x / CELL_KM)])
    else:
        q = pts.copy()
        if q.shape[1] >= 2:
            q[:, 0] += shift[0]
            q[:, 1] += shift[1]
        idx = np.floor(q / CELL_UNITS)
    return [b"" if not good else np.asarray(r, dtype=np.int64).tobytes() for r, good in zip(idx, ok, strict=True)]


def _neighbourhood(points: np.ndarray, geo: bool) -> list[set[bytes]]:
    """Each point's cells within one cell (3 x 3 in the first two coordinates)."""
    side = CELL_KM if geo else CELL_UNITS
    out: list[set[bytes]] = [set() for _ in range(points.shape[0])]
    for dy in (-side, 0.0, side):
        for dx in (-side, 0.0, side):
            for i, c in enumerate(_cells(points, geo, (dy, dx))):
                if c:
                    out[i].add(c)
    return out


def _record_tags(records: np.ndarray, geo: bool) -> list[bytes]:
    """Each person's located record's cell with the person's rank at that record (b"" when not located)."""
    seen: dict[bytes, int] = {}
    out = []
    for c in _cells(records, geo):
        if not c:
            out.append(b"")
            continue
        seen[c] = seen.get(c, 0) + 1
        out.append(c + seen[c].to_bytes(4, "little"))
    return out


def _positions(key: bytes, label: bytes, tag: bytes, nbits: int) -> list[int]:
    digest = hmac.new(key, label + b"\x00" + tag, hashlib.sha512).digest()
    return [int.from_bytes(digest[4 * j : 4 * j + 4], "little") % nbits for j in range(HASHES)]


@dataclass(frozen=True)
class Sketch:
    """A population's keyed sketch: Bloom filters (bytes) of its people's cell tags and located record tags,
    the number of people, whether a table keyed by coordinates was ever seen (``has_cells``) and the number
    of distinct cells its people occupy (``n_cells``: several people may share one)."""

    n_people: int
    cells: bytes
    records: bytes
    has_cells: bool
    n_cells: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON values (:meth:`parse` reads them back)."""
        return {
            "format": "mdp-release population sketch v1",
            "n_people": self.n_people,
            "cells": base64.b64encode(self.cells).decode(),
            "records": base64.b64encode(self.records).decode(),
            "has_cells": self.has_cells,
            "n_cells": self.n_cells,
        }

    @classmethod
    def parse(cls, d: dict[str, Any]) -> Sketch:
        return cls(
            int(d["n_people"]),
            base64.b64decode(d["cells"]),
            base64.b64decode(d["records"]),
            bool(d["has_cells"]),
            int(d.get("n_cells", 0)),
        )

    def merged(self, other: Sketch) -> Sketch:
        """The population's sketch once ``other`` (its latest version) is added to this one (its versions so far):
        the union of the filters, at the smaller of the two sizes (a filter of a power of two bits folds exactly
        onto a smaller one, :func:`_fold`), counted as ``other``'s people and cells (the latest version is the
        one a new table's ``old`` share is measured against); ``other`` alone when the union would set more than
        :data:`MAX_FILL` of its bits (a false match per lookup above MAX_FILL ** HASHES: the versions outgrew
        the filter; the population then starts again from its latest version). The claim builds ``other`` at
        least at this sketch's size (:func:`sketch`'s ``nbytes``), so the union is never folded below it: a
        smaller version cannot fill it past MAX_FILL by folding and forget the population's other people."""
        nbytes = min(len(self.records), len(other.records))
        cells = _fold(self.cells, nbytes) | _fold(other.cells, nbytes)
        recs = _fold(self.records, nbytes) | _fold(other.records, nbytes)
        if max(_fill(cells), _fill(recs)) > MAX_FILL:
            return other
        has_cells = self.has_cells or other.has_cells
        return Sketch(other.n_people, cells.tobytes(), recs.tobytes(), has_cells, other.n_cells)


def _fold(bits: bytes, nbytes: int) -> np.ndarray:
    """A Bloom filter of ``len(bits)`` bytes (a power of two) as the filter of ``nbytes`` bytes (a smaller or
    equal power of two) of the same tags: its positions are taken modulo its size in bits, and p mod 2m mod m =
    p mod m, so OR-ing its ``nbytes`` slices is exact (no tag lost; the fill, hence false matches, grow)."""
    return np.bitwise_or.reduce(np.frombuffer(bits, np.uint8).reshape(-1, nbytes), axis=0)


def _fill(bits: np.ndarray) -> float:
    """The share of a filter's bits that are set."""
    return float(np.unpackbits(bits).mean()) if bits.size else 0.0


def _bloom(key: bytes, label: bytes, tags: list[bytes], nbytes: int) -> bytes:
    bits = np.zeros(nbytes * 8, dtype=bool)
    for t in tags:
        if t:
            bits[_positions(key, label, t, nbytes * 8)] = True
    return np.packbits(bits).tobytes()


def _member(key: bytes, label: bytes, tag: bytes, bits: np.ndarray) -> bool:
    """Whether ``tag`` is in the Bloom filter whose unpacked bits are ``bits``."""
    return bool(all(bits[p] for p in _positions(key, label, tag, bits.size)))


def sketch(people: People, key: bytes, nbytes: int = 0) -> Sketch:
    """The keyed sketch of ``people`` under ``key`` (the store key), its filters of at least ``nbytes`` bytes
    (rounded up to a power of two; the claim passes the population's current size, so the merge of a smaller
    version never folds the population's people onto the smaller version's filters)."""
    n = int(people.records.shape[0])
    need = max(1.0, n * BITS_PER_TAG / 8, float(nbytes))
    nbytes = 1 << max(7, math.ceil(math.log2(need)))  # a power of two: versions merge
    cells = [] if people.points is None else _cells(people.points, people.geo)
    return Sketch(
        n,
        _bloom(key, b"cell", cells, nbytes),
        _bloom(key, b"record", _record_tags(people.records, people.geo), nbytes),
        people.points is not None,
        len({c for c in cells if c}),
    )


@dataclass(frozen=True)
class Overlap:
    """A new table against a population's sketch: ``new`` the share of the new table's people found there,
    ``old`` the share of the population's people found in the new table (distinct tags hit over the
    population's distinct cells, or people by records), ``by_cells`` compared by cells (else by records)."""

    new: float
    old: float
    by_cells: bool

    @property
    def share(self) -> float:
        """The larger share (what a refusal states)."""
        return max(self.new, self.old)

    @property
    def same(self) -> bool:
        """One population: by cells, most of the new table's people (> SAME_SHARE) or nearly all of the
        population's (> SAME_SHARE_RECORDS: the population padded with others); by records, either share
        above SAME_SHARE_RECORDS."""
        if self.by_cells:
            return self.new > SAME_SHARE or self.old > SAME_SHARE_RECORDS
        return self.share > SAME_SHARE_RECORDS


def overlap(people: People, key: bytes, other: Sketch) -> Overlap:
    """How many people ``people`` and the population of ``other`` have in common (:class:`Overlap`). By cells
    when both were keyed by coordinates (a person found when a cell within one cell of it is the other's),
    else by the records they locate to."""
    n = int(people.records.shape[0])
    by_cells = people.points is not None and other.has_cells
    if n == 0 or other.n_people == 0:
        return Overlap(0.0, 0.0, by_cells)
    hit: set[bytes] = set()
    found = 0
    if people.points is not None and by_cells:
        bits = np.unpackbits(np.frombuffer(other.cells, np.uint8))
        for cells in _neighbourhood(people.points, people.geo):
            mine = [c for c in cells if _member(key, b"cell", c, bits)]
            found += bool(mine)
            hit.update(mine)
    else:
        bits = np.unpackbits(np.frombuffer(other.records, np.uint8))
        for t in _record_tags(people.records, people.geo):
            if t and _member(key, b"record", t, bits):
                found += 1
                hit.add(t)
    of = other.n_cells if by_cells and other.n_cells else other.n_people
    return Overlap(found / n, min(1.0, len(hit) / of), by_cells)


__all__ = [
    "CELL_KM",
    "MAX_FILL",
    "SAME_SHARE",
    "SAME_SHARE_RECORDS",
    "Overlap",
    "People",
    "Sketch",
    "overlap",
    "sketch",
]
