"""The officer's approval on a release's page (issue 52): the claim the report states of the manifest's
``approval`` record (:mod:`flows.approval`: who, when, the note, the mode, the plan's sha256) and its bullet.

The name and the note are typed by a person (Prefect's Resume form, ``mdp-release approve``): the approval refuses
markup characters, but a report or an artifact renders whatever a record holds, so :func:`markdown_text` shows
such text literally -- one line, each character that could start inline markup backslash-escaped
(:data:`INLINE_MARKUP`; CommonMark lets any ASCII punctuation be), a character that is not printable (a control,
a zero-width or bidi one) shown as its code point -- never as markup, a link, an image or a table cell. No numpy: the audit renders the report without numerical imports.
"""

from __future__ import annotations

from typing import Any

APPROVAL_CLAIM = ("mode", "by", "at", "note", "plan_sha256")  # the record's keys the report states (not the plan)
PERSON = ("required", "policy")  # the modes in which a person decided (= audit_approval.PERSON)
# What can start inline markup where typed text is shown (never at a line's start: after "Approved by **", in a
# table cell after "| "): escapes, code, emphasis, links and images, HTML and entities, table cells,
# strikethrough, and the colon of a bare URL (GitHub's autolinks). A backslash before each (CommonMark).
INLINE_MARKUP = frozenset("\\`*_[]<>|!&~:")


def markdown_text(text: object) -> str:
    """``text`` (untrusted: a name, a note) as markdown that shows it literally: whitespace (new lines included)
    collapsed to single spaces, each character of :data:`INLINE_MARKUP` backslash-escaped, each character that is
    not printable written ``<U+XXXX>`` (its ``<`` and ``>`` escaped too)."""
    out = []
    for c in " ".join(str(text).split()):
        if c in INLINE_MARKUP:
            out.append("\\" + c)
        elif not c.isprintable():
            out.append(f"\\<U+{ord(c):04X}\\>")
        else:
            out.append(c)
    return "".join(out)


def approval_claim(record: object) -> dict[str, Any] | None:
    """The report's ``approval`` claim of the manifest's approval ``record``: its :data:`APPROVAL_CLAIM` keys
    (the plan's figures stay in the manifest, which the audit checks against the release); None without one."""
    if not isinstance(record, dict):
        return None
    return {k: record.get(k) for k in APPROVAL_CLAIM}


def approval_sentence(c: dict) -> str | None:
    """The officer's page's approval bullet, from the claim ``c["approval"]`` (None: a report made before issue
    52, no bullet): who approved the plan, when, in which mode, their note and the plan's sha256; or that nobody
    was asked."""
    a = c.get("approval")
    if not isinstance(a, dict):
        return None
    sha = a.get("plan_sha256")
    plan = f"the plan's sha256 is `{sha}`" if isinstance(sha, str) and sha.isalnum() else "no plan sha256 recorded"
    if a.get("mode") not in PERSON:
        return (
            "- **Approval.** Nobody was asked (`approval = none`: a run started by hand after `mdp-release check`, "
            f"or simulated people); {plan} (its figures: manifest.json's `approval`)."
        )
    note = f"note: {markdown_text(a['note'])}" if a.get("note") else "no note"
    return (
        f"- **Approval.** Approved by **{markdown_text(a.get('by'))}** at {markdown_text(a.get('at'))} UTC "
        f"(`approval = {'policy' if a.get('mode') == 'policy' else 'required'}`), {note}; {plan} (the figures "
        "approved: manifest.json's `approval`). A later approval of the same plan is in `approvals.json` beside it."
    )


__all__ = ["APPROVAL_CLAIM", "approval_claim", "approval_sentence", "markdown_text"]
