"""Bank edits: the four operations and the checks every one passes before it is applied.

    add      a new entry (category, principle, ...)        -> gets a fresh stable id
    update   new text for an existing active entry (id)    -> old values kept in its history
    archive  removes an existing active entry from retrieval (kept for provenance)
    skip     a candidate judged redundant or too specific  -> counted, nothing changes

Consolidators (LLM or heuristic) only *propose* operations; `check_operation` rejects
anything malformed (unknown op, unknown or archived id, invalid category or family,
empty or over-long fields) with a reason, and `ExperienceBank.apply` applies the rest
in order, deterministically.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

OPS = ("add", "update", "archive", "skip")
# What the bank turns a valid operation into, apart from the consolidator's choice: an add keyed like an active
# entry becomes its update, an add repeating an entry's text a skip, an update that changes nothing a skip.
REDIRECTIONS = ("add_to_update", "add_to_skip", "update_to_skip")
TEXT_FIELDS = ("principle", "trigger", "how_to_avoid", "subject")
FIXED_CATEGORIES = ("general", "mistakes", "search")
TASK_PREFIX = "task:"
MAX_EVIDENCE_REFS = 8  # evidence references kept per entry (the most recent)
MAX_REF_CHARS = 160  # one evidence reference
MAX_SUBJECT_CHARS = 80  # a search subject (object type, product type) or topic key
_FAMILY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,79}$")


def task_category(family: str) -> str:
    return TASK_PREFIX + family


def valid_family(family: str) -> bool:
    return bool(_FAMILY.match(family))


def category_error(category: str) -> str | None:
    """None if `category` is valid, else why not."""
    if category in FIXED_CATEGORIES:
        return None
    if category.startswith(TASK_PREFIX) and valid_family(category[len(TASK_PREFIX) :]):
        return None
    return (
        f"category {category[:60]!r} is not valid; expected one of {', '.join(FIXED_CATEGORIES)} "
        f"or '{TASK_PREFIX}<family>' (family: letters, digits, _ . -)"
    )


@dataclass(frozen=True)
class Operation:
    """One proposed edit. Only the fields that matter for `op` are read."""

    op: str  # add | update | archive | skip
    id: str = ""  # update / archive: the existing entry
    category: str = ""  # add: general | task:<family> | mistakes | search
    family: str = ""  # add: the task family the entry is scoped to ("" = every family)
    principle: str | None = None  # add/update: the advice itself
    trigger: str | None = None  # add/update: when it applies
    how_to_avoid: str | None = None  # add/update: the correction (mistakes)
    subject: str | None = None  # add/update: search subject (object type) or topic key
    evidence: tuple[str, ...] = ()  # stable evidence references (episodes, notes)
    task_types: tuple[str, ...] = ()  # general candidates: the families that support them
    reason: str = ""  # why (kept in the entry's history)

    def fields(self) -> dict[str, str]:
        """The text fields this operation sets (None = leave unchanged)."""
        return {name: getattr(self, name) for name in TEXT_FIELDS if getattr(self, name) is not None}

    def to_dict(self) -> dict[str, Any]:
        data = {"op": self.op, "id": self.id, "category": self.category, "family": self.family}
        data.update(self.fields())
        data.update(evidence=list(self.evidence), task_types=list(self.task_types), reason=self.reason)
        return {k: v for k, v in data.items() if v not in ("", [], None)}


@dataclass
class OpLimits:
    max_field_chars: int = 300  # a longer principle / trigger / how_to_avoid is rejected
    min_general_support: int = 2  # a general add needs this many supporting task families


def check_operation(op: Operation, entries: dict, limits: OpLimits) -> str | None:
    """None if `op` may be applied to a bank whose entries are `entries` (id -> Entry), else why not."""
    if op.op not in OPS:
        return f"unknown operation {str(op.op)[:40]!r}; expected one of {', '.join(OPS)}"
    if len(op.reason) > limits.max_field_chars:
        return f"reason is {len(op.reason)} characters; at most {limits.max_field_chars}"
    if op.op == "skip":
        return None
    error = _check_fields(op, limits)
    if error:
        return error
    if op.op == "add":
        return _check_add(op, limits)
    entry = entries.get(op.id)
    if entry is None:
        return f"{op.op} refers to id {op.id[:40]!r}, which is not in the bank"
    if entry.status != "active":
        return f"{op.op} refers to {op.id}, which is already archived"
    if op.op == "update":
        if not op.fields():
            return f"update of {op.id} changes no field"
        if op.principle is not None and not op.principle.strip():
            return f"update of {op.id} would empty its principle"
    return None


def _check_fields(op: Operation, limits: OpLimits) -> str | None:
    for name, value in op.fields().items():
        if not isinstance(value, str):
            return f"field {name} must be a string, got {type(value).__name__}"
        cap = MAX_SUBJECT_CHARS if name == "subject" else limits.max_field_chars
        if len(value) > cap:
            return f"field {name} is {len(value)} characters; at most {cap}"
    for ref in op.evidence:
        if not isinstance(ref, str) or len(ref) > MAX_REF_CHARS:
            return f"evidence reference {str(ref)[:40]!r} is not a string of at most {MAX_REF_CHARS} characters"
    return None


def _check_add(op: Operation, limits: OpLimits) -> str | None:
    error = category_error(op.category)
    if error:
        return error
    if not (op.principle or "").strip():
        return "add needs a non-empty principle"
    if op.family and not valid_family(op.family):
        return f"family {op.family[:60]!r} is not a valid task family name"
    if op.category.startswith(TASK_PREFIX) and op.family != op.category[len(TASK_PREFIX) :]:
        return f"a {op.category} entry must be scoped to family {op.category[len(TASK_PREFIX):]!r}"
    if op.category == "general" and op.family:
        return "general entries apply to every family; family must be empty"
    if op.category == "search" and not (op.subject or "").strip():
        return "a search priority needs a subject (the object or item type)"
    general_scope = op.category == "general" or (op.category == "mistakes" and not op.family)
    if general_scope and len(set(op.task_types)) < limits.min_general_support:
        return (
            f"a general {op.category} entry needs >= {limits.min_general_support} supporting task types in "
            f"task_types, got {list(op.task_types)}"
        )
    return None


def normalised(text: str | None) -> str:
    """Comparison form of a text field (case, spacing and trailing punctuation ignored)."""
    return " ".join((text or "").lower().split()).rstrip(".!")


def with_defaults(op: Operation) -> Operation:
    """An add with empty optional fields filled in, so stored entries always have every field."""
    if op.op != "add":
        return op
    return replace(op, trigger=op.trigger or "", how_to_avoid=op.how_to_avoid or "", subject=op.subject or "")


@dataclass
class ApplyResult:
    """What `ExperienceBank.apply` did."""

    counts: dict[str, int] = field(default_factory=lambda: {name: 0 for name in OPS})  # applied ops by type
    redirected: dict[str, int] = field(default_factory=lambda: {name: 0 for name in REDIRECTIONS})  # the bank's own changes
    pruned: int = 0  # entries archived by the capacity limit
    dropped: int = 0  # archived entries removed from the bank by its archive limit (ExperienceBank.ARCHIVE_PER_CATEGORY)
    rejected: list[str] = field(default_factory=list)  # one line per operation refused, with the reason
    touched: list[str] = field(default_factory=list)  # ids added / updated / archived, in order
    outcomes: list[dict[str, Any]] = field(default_factory=list)  # one per operation given: chosen, applied as, entry
