"""The Experience bank: cross-episode knowledge that persists and evolves between batches.

Categories (each capped separately at `capacity` active entries):

    general          general skills, every task family          ids gen-001, gen-002, ...
    task:<family>    task-specific skills of one task family     ids task-001, ... (one counter for all families)
    mistakes         common mistakes; an entry is scoped to one family (`family`) or to all (`family == ""`)
    search           search priorities: where to look for an object/item type (`subject`), best first

Mistakes share one category (with a per-entry family scope) rather than one category per
family: most failure patterns (invalid commands, loops, running out of steps) recur across
families, and a per-family mistake is simply an entry whose `family` is set. Search
priorities are scoped to all families (where a kettle usually is does not depend on the task)
unless the environment keys them by family (WebShop: search phrasings per product category).

Every entry keeps a stable id (a per-category counter, never reused), its short fields, a
usage count (times shown to a policy), the update index at which it was created and last
changed, a status (active | archived) and an edit history (provenance: every add, update,
archive and capacity prune, with the previous field values). Archived entries leave retrieval
but stay in the file, at most `capacity` of them per category (`ARCHIVE_PER_CATEGORY`; the least
recently changed go first, and a consolidation that removes some warns).

Persistence is one JSON file with a schema version and a content hash, written atomically
(the previous version is kept as `<file>.bak`). Loading a newer schema, a corrupted or a
truncated file fails with `BankFormatError` and never writes anything; saving refuses to
overwrite a file that does not load.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable

from evoharness_rl.experience.operations import (
    FIXED_CATEGORIES,
    MAX_EVIDENCE_REFS,
    TASK_PREFIX,
    ApplyResult,
    OpLimits,
    Operation,
    category_error,
    check_operation,
    normalised,
    with_defaults,
)
from evoharness_rl.fileio import atomic_write_text, pid_lock
from evoharness_rl.rollout.trajectory import Trajectory
from evoharness_rl.errors import UserError

FORMAT = "evoharness-rl experience bank"
SCHEMA_VERSION = 1
DEFAULT_CAPACITY = 80  # active entries per category (paper: 80, each task family separately)
ID_PREFIX = {"general": "gen", "mistakes": "err", "search": "srch"}  # task:<family> -> "task"


class BankFormatError(UserError, ValueError):
    """A bank file that cannot be used as it is (the file is never modified)."""


class BankConflict(UserError):
    """Another process changed the bank file this bank was read from (the file is never overwritten)."""


@dataclass
class Entry:
    """One piece of Experience."""

    id: str  # stable id, e.g. "gen-003"
    category: str  # general | task:<family> | mistakes | search
    principle: str  # the advice itself (short, actionable)
    trigger: str = ""  # when it applies
    how_to_avoid: str = ""  # mistakes: the correction
    subject: str = ""  # search: the object/item type; otherwise an optional topic key
    family: str = ""  # the task family it is scoped to ("" = every family)
    evidence: list[str] = field(default_factory=list)  # references to the episodes/notes that support it
    task_types: list[str] = field(default_factory=list)  # general entries: the families that support it
    usage: int = 0  # times it was shown to a policy (recall results), over the bank's life
    outcomes: dict[str, int] = field(default_factory=lambda: {"won": 0, "lost": 0})  # episodes that recalled it since its last edit
    created: int = 0  # update index at which it was added
    updated: int = 0  # update index of its last edit
    status: str = "active"  # active | archived
    history: list[dict[str, Any]] = field(default_factory=list)  # provenance: one record per edit

    @property
    def seq(self) -> int:
        return int(self.id.rsplit("-", 1)[1])

    @property
    def active(self) -> bool:
        return self.status == "active"


_ENTRY_TYPES = {"id": str, "category": str, "principle": str, "trigger": str, "how_to_avoid": str, "subject": str,
                "family": str, "evidence": list, "task_types": list, "usage": int, "outcomes": dict, "created": int,
                "updated": int, "status": str, "history": list}


class ExperienceBank:
    """The mutable bank. Rollouts never see it directly: they read a frozen `snapshot()`."""

    ARCHIVE_PER_CATEGORY = 1  # archived entries kept per category, in units of `capacity` (the oldest go first)

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        if capacity < 1:
            raise ValueError(f"capacity={capacity} must be >= 1 (active entries per category)")
        self.capacity = capacity
        self.update_index = 0  # index of the latest consolidation applied (0: none yet)
        self.entries: dict[str, Entry] = {}
        self.next_seq: dict[str, int] = {}  # id prefix -> last number used
        self.statistics: dict[str, dict[str, int]] = {}  # additive evidence counters (heuristic consolidator)
        self.ops_history: list[dict[str, Any]] = []  # append-only: one record per consolidation
        self.path: Path | None = None  # the file it was loaded from / last saved to
        self.env = ""  # the environment whose episodes made it ("": not known, a file written before banks said)
        self._disk_hash: str | None = None  # content hash of that file as this bank read or wrote it

    # -- reading -----------------------------------------------------------------------

    def active(self, category: str | None = None) -> list[Entry]:
        """Active entries (of one category), in canonical order."""
        return [e for e in self._ordered() if e.active and (category is None or e.category == category)]

    def find(self, category: str, subject: str, family: str = "", status: str = "active") -> Entry | None:
        """The entry of `category` keyed by `subject` (and scoped to `family`), if any."""
        key = normalised(subject)
        for entry in self._ordered():
            if entry.category == category and entry.family == family and entry.status == status:
                if key and normalised(entry.subject) == key:
                    return entry
        return None

    def composition(self) -> dict[str, int]:
        """Active entries per kind: general, task (all families together), mistakes, search."""
        counts = {"general": 0, "task": 0, "mistakes": 0, "search": 0}
        for entry in self.entries.values():
            if entry.active:
                counts["task" if entry.category.startswith(TASK_PREFIX) else entry.category] += 1
        return counts

    def snapshot(self):
        """A frozen, picklable read-only view for one rollout batch (`ExperienceReader`)."""
        from evoharness_rl.experience.retrieval import BankSnapshot

        return BankSnapshot.from_entries(self.active(), self.content_hash(), self.update_index)

    def content_hash(self) -> str:
        """sha256 of the canonical bank content (part of evaluation fingerprints)."""
        return _hash(self._content())

    def _ordered(self) -> list[Entry]:
        return sorted(self.entries.values(), key=_entry_order)

    # -- usage -------------------------------------------------------------------------

    def record_usage(self, trajectories: Iterable[Trajectory]) -> dict[str, int]:
        """Add the batch's recalls to usage counts and recall outcomes; -> {id: times shown}.

        Sums are order-independent, so the result never depends on worker order. Ids
        that are not in the bank (a snapshot of another bank) are ignored.
        """
        shown: Counter[str] = Counter()
        for traj in trajectories:
            shown.update(i for i in traj.recalled_ids if i in self.entries)
            if traj.error is None:
                for entry_id in sorted(set(traj.recalled_ids) & self.entries.keys()):
                    self.entries[entry_id].outcomes["won" if traj.won else "lost"] += 1
        for entry_id, count in shown.items():
            self.entries[entry_id].usage += count
        return dict(sorted(shown.items()))

    def merge_statistics(self, delta: dict[str, dict[str, int]]) -> None:
        """Add evidence counters (sums: independent of the order batches are merged in)."""
        for key, counts in delta.items():
            target = self.statistics.setdefault(key, {})
            for name, value in counts.items():
                target[name] = target.get(name, 0) + int(value)
            self.statistics[key] = dict(sorted(target.items()))
        self.statistics = dict(sorted(self.statistics.items()))

    # -- editing -----------------------------------------------------------------------

    def apply(self, ops: Iterable[Operation], source: str, limits: OpLimits | None = None) -> ApplyResult:
        """Check and apply `ops` in order, then enforce capacity; all or nothing on a crash.

        Invalid operations are rejected (with the reason in the result) and the rest are
        applied. The work happens on a copy that replaces the bank's entries at the end,
        so an unexpected exception leaves the bank exactly as it was (and `Entry` objects
        read before the call are stale afterwards: read `bank.entries` again).
        """
        limits = limits or OpLimits()
        entries, next_seq = _CopyOnWrite(self.entries), dict(self.next_seq)
        result = ApplyResult()
        for op in ops:
            error = check_operation(op, entries, limits)
            if error:
                result.rejected.append(f"{op.op} {op.id or op.category}: {error}")
                result.outcomes.append(_outcome(op, "rejected", error=error))
                continue
            self._apply_one(entries, next_seq, with_defaults(op), source, result)
        result.pruned = self._enforce_capacity(entries)
        kept = self._drop_old_archived(dict(entries))
        result.dropped = len(entries) - len(kept)
        self.entries, self.next_seq = kept, next_seq
        return result

    def _apply_one(self, entries: "_CopyOnWrite", next_seq: dict, op: Operation, source: str, result: ApplyResult) -> None:
        chosen = op
        if op.op == "add":
            op = _redirect_add(entries, op)
            if op.op != "add":  # the bank, not the consolidator, decided this one
                result.redirected[f"add_to_{op.op}"] += 1
        if op.op == "skip":
            result.counts["skip"] += 1
            result.outcomes.append(_outcome(chosen, "skip", reason=op.reason))
            return
        record = {"update": self.update_index, "op": op.op, "source": source, "reason": op.reason}
        if op.op == "add":
            entry = self._new_entry(next_seq, op)
            entry.history.append(record)
            entries[entry.id] = entry
        else:
            entry = entries.writable(op.id)
            if op.op == "update":
                record["before"] = {k: getattr(entry, k) for k, v in op.fields().items() if getattr(entry, k) != v}
                if not record["before"]:
                    result.counts["skip"] += 1  # the "update" changes nothing: redundant evidence
                    result.redirected[f"{chosen.op}_to_skip"] += 1
                    result.outcomes.append(_outcome(chosen, "skip", entry.id, "changes nothing"))
                    return
                for name, value in op.fields().items():
                    setattr(entry, name, value)
                entry.outcomes = {"won": 0, "lost": 0}  # new advice: judge it afresh
            else:
                entry.status = "archived"
            entry.updated = self.update_index
            entry.evidence = _merge_refs(entry.evidence, op.evidence)
            entry.history.append(record)
        result.counts[op.op] += 1
        result.touched.append(entry.id)
        result.outcomes.append(_outcome(chosen, op.op, entry.id))

    def _new_entry(self, next_seq: dict, op: Operation) -> Entry:
        prefix = "task" if op.category.startswith(TASK_PREFIX) else ID_PREFIX[op.category]
        next_seq[prefix] = next_seq.get(prefix, 0) + 1
        return Entry(
            id=f"{prefix}-{next_seq[prefix]:03d}",
            category=op.category,
            principle=op.principle or "",
            trigger=op.trigger or "",
            how_to_avoid=op.how_to_avoid or "",
            subject=op.subject or "",
            family=op.family,
            evidence=_merge_refs([], op.evidence),
            task_types=sorted(set(op.task_types)),
            created=self.update_index,
            updated=self.update_index,
        )

    def _enforce_capacity(self, entries: "_CopyOnWrite") -> int:
        """Archive the least useful entries of every category above capacity; -> how many.

        Order (first archived first): entries not added in this update, lowest usage,
        least recently updated, oldest id. Deterministic; new entries get one batch of grace.
        """
        by_category: dict[str, list[Entry]] = {}
        for entry in entries.values():
            if entry.active:
                by_category.setdefault(entry.category, []).append(entry)
        pruned = 0
        for category in sorted(by_category):
            active = by_category[category]
            excess = len(active) - self.capacity
            if excess <= 0:
                continue
            active.sort(key=lambda e: (e.created == self.update_index, e.usage, e.updated, e.seq))
            for entry in active[:excess]:
                entry = entries.writable(entry.id)
                entry.status = "archived"
                entry.updated = self.update_index
                entry.history.append({"update": self.update_index, "op": "prune", "source": "capacity",
                                      "reason": f"{category} over capacity {self.capacity}; least used ({entry.usage})"})
                pruned += 1
        return pruned

    def _drop_old_archived(self, entries: dict[str, Entry]) -> dict[str, Entry]:
        """`entries` without the archived entries beyond ARCHIVE_PER_CATEGORY x capacity in a category, the least
        recently changed first: archived entries leave retrieval, but every one kept is read, copied and saved with
        the bank, so a bank that archived without end grew without end (50,000 entries: 28 -> 35 MB, and a 4-episode
        eval 6.7 -> 17.6 s). Ids are never reused (next_seq keeps counting)."""
        limit = self.ARCHIVE_PER_CATEGORY * self.capacity
        by_category: dict[str, list[Entry]] = {}
        for entry in entries.values():
            if not entry.active:
                by_category.setdefault(entry.category, []).append(entry)
        drop = set()
        for archived in by_category.values():
            if len(archived) > limit:
                archived.sort(key=lambda e: (e.updated, e.seq))
                drop.update(e.id for e in archived[:len(archived) - limit])
        return {k: e for k, e in entries.items() if k not in drop} if drop else entries

    # -- persistence ---------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        content = self._content()
        env = {"env": self.env} if self.env else {}  # beside the content: the hash (and fingerprints) stay as they were
        return {"format": FORMAT, "schema_version": SCHEMA_VERSION, **env, "content_hash": _hash(content), **content}

    def _content(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "update_index": self.update_index,
            "next_seq": dict(sorted(self.next_seq.items())),
            "entries": [dict(vars(e)) for e in self._ordered()],  # shallow: json.dumps reads it, nothing mutates it
            "statistics": self.statistics,
            "ops_history": self.ops_history,
        }

    def save(self, path: str | os.PathLike | None = None) -> Path:
        """Write atomically; the previous file (if it loads) is kept as `<file>.bak`.

        Saving back to the file this bank was loaded from (or last saved to) refuses with
        `BankConflict` when that file changed meanwhile: another process consolidated the
        same bank, and overwriting would silently drop its cycle. A lock file beside the
        bank (`<file>.lock`, the writer's pid) makes check and write one step.
        """
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ValueError("save() needs a path: this bank was neither loaded from nor saved to a file")
        data = self.to_dict()
        with pid_lock(target.with_name(target.name + ".lock"), lambda note: None, lambda pid: BankConflict(
                f"{target} is being written by another process (pid {pid}); two runs are consolidating the same "
                "bank: give each its own copy")):
            if target.exists():
                old_text = target.read_text(encoding="utf-8")
                try:
                    old = _parse(old_text, target)
                except BankFormatError as err:
                    raise BankFormatError(f"refusing to overwrite {target}: {err}") from None
                if self._is_mine(target) and _stored_hash(old) != self._disk_hash:
                    raise BankConflict(
                        f"{target} was changed by another process since this bank was read (it now holds "
                        f"{_stored_hash(old)[:19]}, not {str(self._disk_hash)[:19]}); two runs are consolidating the "
                        "same bank: give each its own copy (the file was left as the other process wrote it)")
                atomic_write_text(_backup_path(target), old_text)
            atomic_write_text(target, json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        self.path, self._disk_hash = target, data["content_hash"]
        return target

    def _is_mine(self, target: Path) -> bool:
        """`target` is the file this bank was read from or last written to."""
        return self.path is not None and os.path.abspath(self.path) == os.path.abspath(target)

    @classmethod
    def load(cls, path: str | os.PathLike, capacity: int | None = None) -> "ExperienceBank":
        """Read a bank file; `capacity` (if given) replaces the stored one from the next edit on."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"Experience bank {path} does not exist (use experience.bank=null to start an empty bank)")
        data = _parse(path.read_text(encoding="utf-8", errors="replace"), path)
        bank = cls.from_dict(data)
        if capacity is not None:
            bank.capacity = capacity
        bank.path, bank._disk_hash = path, _stored_hash(data)
        return bank

    @classmethod
    def open(cls, path: str | os.PathLike, capacity: int = DEFAULT_CAPACITY) -> "ExperienceBank":
        """Load `path` if it exists, else an empty bank that `save()` will write there."""
        if Path(path).exists():
            return cls.load(path, capacity)
        bank = cls(capacity)
        bank.path = Path(path)
        return bank

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ExperienceBank":
        bank = cls(int(data["capacity"]))
        bank.update_index = int(data["update_index"])
        bank.entries = {e.id: e for e in (Entry(**raw) for raw in data["entries"])}
        bank.next_seq = {str(k): int(v) for k, v in data["next_seq"].items()}
        for entry in bank.entries.values():  # a hand-edited file may lag behind its entries: never reuse an id
            prefix = entry.id.rsplit("-", 1)[0]
            bank.next_seq[prefix] = max(bank.next_seq.get(prefix, 0), entry.seq)
        bank.statistics = {k: dict(v) for k, v in data.get("statistics", {}).items()}
        bank.ops_history = list(data.get("ops_history", []))
        bank.env = str(data.get("env") or "")
        return bank

    def claim_env(self, env: str, source: Any = None) -> "ExperienceBank":
        """Tag the bank with the environment that uses it; a bank of another environment is refused (its
        entries name that environment's objects and actions)."""
        if self.env and self.env != env:
            raise BankFormatError(env_mismatch(source or self.path or "the bank", self.env, env))
        self.env = env
        return self


# -------------------------------------------------------------------------- helpers


def env_mismatch(source: Any, bank_env: str, env: str) -> str:
    return (f"{source} is a {bank_env} Experience bank; env={env} cannot use it: give experience.bank a {env} bank, "
            "or leave it unset for an empty one")


def file_env(path: str | os.PathLike) -> str:
    """The environment a bank file says it belongs to ("" when it does not say, or does not parse: loading reports
    that)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    return str(data.get("env") or "") if isinstance(data, dict) else ""


def _entry_order(entry: Entry) -> tuple:
    category = entry.category
    rank = FIXED_CATEGORIES.index(category) if category in FIXED_CATEGORIES else len(FIXED_CATEGORIES)
    return (rank, category, entry.seq)


def _hash(content: dict[str, Any]) -> str:
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


CONTENT_KEYS = ("capacity", "update_index", "next_seq", "entries", "statistics", "ops_history")


def _stored_hash(data: dict[str, Any]) -> str:
    """The content hash of a parsed bank file (computed when a hand edit removed the stored one)."""
    return data.get("content_hash") or _hash({k: data[k] for k in CONTENT_KEYS})


def _backup_path(path: Path) -> Path:
    return path.with_name(path.name + ".bak")


def _merge_refs(old: list[str], new: Iterable[str]) -> list[str]:
    refs = list(old) + [r for r in dict.fromkeys(new) if r not in old]
    return refs[-MAX_EVIDENCE_REFS:]


class _CopyOnWrite(dict):
    """The entries being edited by one `apply`: an entry is deep-copied the first time it changes,
    so the bank's own entries stay untouched until the edit completes."""

    def __init__(self, entries: dict[str, Entry]):
        super().__init__(entries)
        self._copied: set[str] = set()

    def writable(self, entry_id: str) -> Entry:
        if entry_id not in self._copied:
            self[entry_id] = copy.deepcopy(self[entry_id])
            self._copied.add(entry_id)
        return self[entry_id]

    def __setitem__(self, entry_id: str, entry: Entry) -> None:
        super().__setitem__(entry_id, entry)
        self._copied.add(entry_id)  # a new entry belongs to this edit already


def _outcome(op: Operation, result: str, entry_id: str = "", reason: str = "", error: str = "") -> dict[str, Any]:
    """One operation as the cycle's history keeps it: what the consolidator chose (`op` and its fields, evidence
    refs included) and what the bank did (`result`: add | update | archive | skip | rejected; `entry`)."""
    record = {**op.to_dict(), "result": result, "entry": entry_id or op.id}
    record.update({k: v for k, v in (("bank_reason", reason), ("error", error)) if v})
    return {k: v for k, v in record.items() if v not in ("", [], None)}


def _redirect_add(entries: dict[str, Entry], op: Operation) -> Operation:
    """An add keyed like an active entry (same subject) becomes its update; a duplicate text, a skip."""
    peers = sorted((e for e in entries.values() if e.category == op.category and e.family == op.family), key=_entry_order)
    if op.subject:
        for entry in peers:
            if entry.active and normalised(entry.subject) == normalised(op.subject):
                changes = {"principle": op.principle, "trigger": op.trigger or entry.trigger,
                           "how_to_avoid": op.how_to_avoid or entry.how_to_avoid}
                return Operation("update", id=entry.id, evidence=op.evidence, reason=op.reason or "same subject", **changes)
    for entry in peers:
        if normalised(entry.principle) == normalised(op.principle):
            state = "an active" if entry.active else "an archived"
            return Operation("skip", reason=f"duplicate of {state} entry {entry.id}")
    return op


def _parse(text: str, path: Path) -> dict[str, Any]:
    """Parse and validate a bank file's text; BankFormatError names what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        hint = f"; the previous version is in {_backup_path(path)}" if _backup_path(path).exists() else ""
        raise BankFormatError(
            f"{path} is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}; "
            f"a file cut short by a crash or disk-full looks like this){hint}"
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BankFormatError(f"{path} is not an Experience bank (expected a JSON object with format={FORMAT!r})")
    version = data.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise BankFormatError(f"{path}: schema_version={version!r} is not a positive integer")
    if version > SCHEMA_VERSION:
        raise BankFormatError(
            f"{path} has schema_version {version}, newer than this EvoHarness-RL supports ({SCHEMA_VERSION}); "
            "upgrade evoharness-rl to read it"
        )
    _check_structure(data, path)
    stored = data.get("content_hash")
    if stored is not None:
        content = {k: data[k] for k in CONTENT_KEYS}
        if _hash(content) != stored:
            raise BankFormatError(
                f"{path}: content hash mismatch (the file was corrupted or edited); "
                "remove the content_hash field to accept a deliberate hand edit"
            )
    return data


def _check_structure(data: dict[str, Any], path: Path) -> None:
    if not isinstance(data.get("env", ""), str):
        raise BankFormatError(f"{path}: field 'env' must be an environment name (a string)")
    for key, kind in (("capacity", int), ("update_index", int), ("next_seq", dict), ("entries", list)):
        if not isinstance(data.get(key), kind):
            raise BankFormatError(f"{path}: field {key!r} must be a {kind.__name__}")
    data.setdefault("statistics", {})
    data.setdefault("ops_history", [])
    names = {f.name for f in fields(Entry)}
    seen: set[str] = set()
    for i, raw in enumerate(data["entries"]):
        where = f"{path}: entries[{i}]"
        if not isinstance(raw, dict) or set(raw) - names or {"id", "category", "principle"} - set(raw):
            raise BankFormatError(f"{where} must be an object with fields {sorted(names)} (id, category, principle required)")
        for key, value in raw.items():
            if not isinstance(value, _ENTRY_TYPES[key]) or isinstance(value, bool):
                raise BankFormatError(f"{where}.{key} must be a {_ENTRY_TYPES[key].__name__}")
        _check_entry_values(raw, where, seen)


def _check_entry_values(raw: dict[str, Any], where: str, seen: set[str]) -> None:
    entry_id, category = raw["id"], raw["category"]
    if category_error(category):
        raise BankFormatError(f"{where}: {category_error(category)}")
    if raw.get("status", "active") not in ("active", "archived"):
        raise BankFormatError(f"{where}.status must be 'active' or 'archived'")
    prefix = "task" if category.startswith(TASK_PREFIX) else ID_PREFIX[category]
    head, _, number = entry_id.rpartition("-")
    if head != prefix or not number.isdigit():
        raise BankFormatError(f"{where}.id {entry_id!r} must look like '{prefix}-<number>' for category {category}")
    if entry_id in seen:
        raise BankFormatError(f"{where}.id {entry_id!r} appears twice")
    seen.add(entry_id)
