"""The hash of the privacy door's plan figures, the one the officer approves and the audit recomputes (issue 49).

The figures (:func:`flows.approval.plan_figures`: population, radius, max_distance, the guarantee, each charge
and the whole charge, the door's settings, the sealed table's keyed handle) are a JSON object; their hash is the
sha256 of its canonical JSON: keys sorted, no whitespace, no NaN or infinity. The approval record in the
manifest carries the figures and this hash (``approval.plan`` / ``approval.plan_sha256``), so an auditor
recomputes the hash from the published figures (:func:`mdp_core.release.audit_approval.check_approval`)
and compares the figures with the release's own. The figures read back from the manifest's JSON give the
same canonical text (Python's JSON floats round-trip exactly).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def canonical_json(figures: Mapping[str, Any]) -> str:
    """``figures`` as canonical JSON text (sorted keys, separators without spaces; ValueError on NaN / inf)."""
    return json.dumps(figures, sort_keys=True, separators=(",", ":"), allow_nan=False)


def figures_sha256(figures: Mapping[str, Any]) -> str:
    """sha256 (64 hex digits) of :func:`canonical_json` of the plan's ``figures``."""
    return hashlib.sha256(canonical_json(figures).encode()).hexdigest()


__all__ = ["canonical_json", "figures_sha256"]
