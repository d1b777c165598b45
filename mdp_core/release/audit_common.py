"""The audit's shared vocabulary (:mod:`mdp_core.release.audit`): the release contract's views (which files a
release carries, their columns and keys), the tolerances, and the small helpers every step compares with."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mdp_core.declarations import contract
from mdp_core.declarations.methods import GapOptions

# The release contract (mdp_core.declarations.contract) declares every published file once; these are its views.
INSTANCE_DIR = contract.INSTANCE_DIR
PROVENANCE = contract.PROVENANCE
PROVENANCE_FORMAT = contract.PROVENANCE_FORMAT
PROVENANCE_VERSION = contract.PROVENANCE_VERSION
PROVENANCE_VERSIONS = contract.PROVENANCE_VERSIONS
CLAIMS_TAG = "mdp-release-claims"  # = mdp_core.release.report.CLAIMS_TAG (not imported: it pulls in pandas)
INSTANCE_TABLES = contract.INSTANCE_TABLES
_LISTED = tuple(f for f in contract.PUBLISHED if f.listed)
REQUIRED = tuple(f.path for f in _LISTED if f.required)  # every release lists them
# Beside manifest.json, not listed in it (they sign it): mdp_core.release.signing.SIGNATURE / PUBLIC_KEY.
SIGNATURE_FILES = contract.SIGNATURE_FILES
# Everything a release may list (besides the top-level *.png figures): tasks.publish.released_files.
PUBLISHED = frozenset(f.path for f in _LISTED if "*" not in f.path)

# ----------------------------------------------------------------------------- allow-lists
COORDINATE = contract.COORDINATE
_PARQUET = tuple(f for f in _LISTED if f.columns is not None)
WITH_COORDINATES = frozenset(f.path for f in _PARQUET if f.coordinates)
AGGREGATE_COLUMNS = contract.published("aggregates.parquet").column_names
COLUMNS: dict[str, frozenset[str]] = {f.path: frozenset(f.column_names) for f in _PARQUET}
FORBIDDEN = contract.FORBIDDEN  # in any published column or provenance key
# Allowed names holding a FORBIDDEN fragment: the public record ids of the instance and each released output's
# record.
NAME_EXCEPTIONS: dict[str, frozenset[str]] = {f.path: f.name_exceptions for f in _PARQUET if f.name_exceptions}
ORDERED = frozenset(f.path for f in _PARQUET if f.ordered)  # exactly the declared columns, in order
SOLVE_KEYS = contract.SOLVE_KEYS
MANIFEST_SOLVE_KEYS = contract.MANIFEST_SOLVE_KEYS
GUARANTEE_KEYS_V2 = contract.GUARANTEE_KEYS_V2
GUARANTEE_KEYS = contract.GUARANTEE_KEYS
LEDGER_KEYS_V2 = contract.LEDGER_KEYS_V2
LEDGER_KEYS = contract.LEDGER_KEYS
PROTECTION_KEYS = contract.PROTECTION_KEYS
PROVENANCE_KEYS_V2 = contract.PROVENANCE_KEYS_V2
PROVENANCE_KEYS = contract.PROVENANCE_KEYS
POPULATION = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
PRIVACY_KEYS = contract.PRIVACY_KEYS
PRIVACY_KEYS_V3_OPTIONAL = contract.PRIVACY_KEYS_V3_OPTIONAL  # allowed (repeating the provenance) in v3
# privacy-block key -> the provenance key it repeats
PRIVACY_FROM_PROVENANCE = {
    "counts_epsilon": "eps_counts",
    "prior_epsilon": "eps_prior",
    "prior_source": "prior_source",
    "microdata_source": "microdata_source",
    "n_individuals": "n_individuals",
    "draw_commitment": "draw_commitment",
    "guarantee": "guarantee",
    "ledger": "ledger",
    "population": "population",
    "protection": "protection",
}
# The claims block of a report written before reports were rendered from their claims (provenance v2).
CLAIM_KEYS_V2 = frozenset(
    "epsilon eta distance_unit counts_epsilon prior_epsilon additive_epsilon ledger_total_so_far n_individuals "
    "method objective lower_bound gap max_realised_epsilon certificate_passed".split()
)
REPORT_VERSION = 3  # = mdp_core.release.report.REPORT_VERSION: claims from which the whole report.md is rendered
CLAIM_KEYS = frozenset(
    "report_version epsilon eta distance_unit n_records n_outputs n_edges n_zones n_individuals microdata_source "
    "population counts_epsilon count_noise_scale prior_epsilon prior_source additive_epsilon guarantee ledger "
    "protection draw_commitment method method_run auto_reason status objective lower_bound gap iterations seconds "
    "certificate_passed certificate_pairs certificate_violations certificate_ratio_tol max_realised_epsilon "
    "dist_loss_mean adversary_error expected_loss loss approval people_error every_pair".split()
)
# Claims a v3 report written before them does not have (the audit accepts their absence; present, each is
# checked): ``loss``, the instance's loss (issue 40); ``approval``, the manifest's approval record (issue 52);
# ``people_error``, the provenance's DP mean of the people's error (issue 50; null when not measured);
# ``every_pair``, the recomputed certificate is over every pair of a component (issue 51; the report's plain words).
CLAIM_KEYS_OPTIONAL = frozenset({"loss", "approval", "people_error", "every_pair"})
PRIOR_SOURCES = frozenset(contract.PRIOR_SOURCES)
MICRODATA_SOURCES = contract.MICRODATA_SOURCES
DEFAULT_GAP = (GapOptions.gap_abs, GapOptions.gap_rel)  # the declared gap, when solve.json records none
EXACT = 1e-12  # relative: the same number written twice (a copy, or the same computation on the same bytes)
RECOMPUTED = 1e-9  # relative: a figure recomputed from the released files (sums in another order)
TINY = 1e-14  # absolute floor for certificate evidence near 0 (max_abs_violation, max_row_sum_error)

Record = dict[str, Any]


# ----------------------------------------------------------------------------- small helpers
def _load_json(path: Path) -> tuple[dict | None, str | None]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"{path.name}: missing"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{path.name}: unreadable JSON ({type(exc).__name__})"
    if not isinstance(value, dict):
        return None, f"{path.name}: not a JSON object"
    return value, None


def _obj(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _num(value: object) -> float | None:
    """``value`` as a float (JSON numbers and "inf" / "-inf"), None for anything else (bools, NaN, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    if isinstance(value, str) and value not in ("inf", "-inf"):
        return None
    x = float(value)
    return None if math.isnan(x) else x


def _same_number(a: object, b: object, rel: float = EXACT, floor: float = 0.0) -> bool:
    """Two numbers within ``rel`` (relative) or ``floor`` (absolute); "inf" strings allowed, bools are not numbers."""
    x, y = _num(a), _num(b)
    if x is None or y is None:
        return False
    return x == y or (math.isfinite(x) and math.isfinite(y) and abs(x - y) <= max(rel * max(abs(x), abs(y)), floor))


def _agrees(a: object, b: object, rel: float = EXACT, floor: float = 0.0) -> bool:
    """``a`` states ``b``: numbers within tolerance, dicts and lists element by element, the rest equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_agrees(a[k], b[k], rel, floor) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_agrees(x, y, rel, floor) for x, y in zip(a, b, strict=True))
    if _num(a) is not None and _num(b) is not None:
        return _same_number(a, b, rel, floor)
    return type(a) is type(b) and a == b


def _show(value: object) -> str:
    """A recorded or recomputed value in a finding (floats in full: shortest repr that reads back)."""
    return repr(value) if isinstance(value, float) else json.dumps(value) if isinstance(value, dict) else str(value)


def _compare(where: str, what: str, recorded: object, expected: object, rel: float = EXACT) -> list[str]:
    """One finding when the file ``where`` states ``what`` = ``recorded`` but the release gives ``expected``."""
    if _agrees(recorded, expected, rel):
        return []
    return [f"{where}: {what} {_show(recorded)} but the released files give {_show(expected)}"]


def _forbidden(name: str) -> bool:
    return any(fragment in name.lower() for fragment in FORBIDDEN)


def _forbidden_keys(value: object, path: str = "") -> Iterator[str]:
    """Every key (dotted path) of a JSON value whose name holds a FORBIDDEN fragment."""
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if _forbidden(str(key)):
                yield here
            yield from _forbidden_keys(item, here)
    elif isinstance(value, list):
        for item in value:
            yield from _forbidden_keys(item, path)


def _keys(where: str, value: dict, allowed: frozenset[str], required: bool = True) -> list[str]:
    """Unknown keys (and, when ``required``, missing ones) of ``value`` against ``allowed``."""
    out = [f"{where}: key {k} is not allowed in a published file" for k in sorted(set(value) - allowed)]
    if required:
        out += [f"{where}: missing key {k}" for k in sorted(allowed - set(value))]
    return out


def _is_count(value: object, low: int = 0, high: float = math.inf) -> bool:
    """``value`` is an int (not a bool) in [low, high]."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
