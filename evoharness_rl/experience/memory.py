"""The paper's memory baselines (ExpeL, ReasoningBank; paper Table 1, Appendix J): what they share.

    store = load_bank(experience_cfg)         # baselines.py: experience.bank, or an empty store of experience.method
    snapshot = store.snapshot()                              # frozen for a window; pickled to the env workers
    text, ids = snapshot.prompt_context(objective, family)   # into the system prompt at episode start
    report = update_memory(store, trajectories, updater)     # one window's update cycle

EvoHarness's bank is read by the policy through `recall` (or rendered as a view every turn);
these baselines follow their papers instead: the memory is put into the ReAct agent's
prompt once, at episode start (`rollout/episode.py`), and the agent has no harness verbs
(`harness.mode=env_only`). `experience.method` picks the store (`expel.py`,
`reasoningbank.py`); `experience.consolidator` picks how it learns, through the same
registry as the bank's consolidators (`evolution.make_consolidator`): `heuristic` runs the
method's deterministic rules (no LLM), `openai` and `self` send the method's prompts
through the same call path as the LLM consolidator (`llm.call_json`), `none` learns nothing.

A cycle works on a copy of the store: when every call of the cycle failed (no JSON, a
cut-off answer, a dead endpoint) and nothing was applied, the store is left as it was and
the cycle is logged as failed; an operation on an unknown id is rejected and named, the
others still apply. Stores are JSON files written atomically; a file of another kind (an
EvoHarness bank, the other baseline's memory) or a damaged one fails in one line.
"""

from __future__ import annotations

import abc
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Optional, Protocol

from evoharness_rl.bm25 import import_bm25s
from evoharness_rl.errors import UserError
from evoharness_rl.experience.consolidation import Evidence, Proposal
from evoharness_rl.experience.retrieval import tokenize
from evoharness_rl.fileio import atomic_write_json
from evoharness_rl.rollout.trajectory import Trajectory

LOG = logging.getLogger(__name__)
SCHEMA = 1


class MemoryFormatError(UserError, ValueError):
    """A memory file that cannot be used as it is (the file is never modified)."""


# ------------------------------------------------------------------------------ retrieval


class SimilarityIndex:
    """BM25 (bm25s, the bank's tokenizer) over a fixed list of texts; picklable (the index is rebuilt on load)."""

    def __init__(self, texts: Iterable[str]):
        self.texts = tuple(texts)
        self._build()

    def _build(self) -> None:
        self._index = None
        if self.texts:
            self._index = import_bm25s().BM25()
            self._index.index([tokenize(t) or ["_empty_"] for t in self.texts], show_progress=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"texts": self.texts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.texts = state["texts"]
        self._build()

    def top(self, query: str, k: int) -> list[int]:
        """Positions of the `k` texts most similar to `query` (positive scores only), best first; ties keep order."""
        tokens = tokenize(query)
        if self._index is None or not tokens or k < 1:
            return []
        scores = self._index.get_scores(tokens)
        ranked = sorted((i for i in range(len(self.texts)) if scores[i] > 0), key=lambda i: -float(scores[i]))
        return ranked[:k]


class MemorySnapshot(abc.ABC):
    """What the episodes of one window read: frozen, picklable, and an `ExperienceReader` (recall answers with the
    same memory, by the query). Subclasses implement `prompt_context`."""

    def __init__(self, content_hash: str, cycle: int):
        self.content_hash = content_hash  # the trajectories' bank_version
        self.cycle = cycle  # the trajectories' bank_cycle

    @abc.abstractmethod
    def prompt_context(self, objective: str, family: str) -> tuple[str, list[str]]:
        """-> (text for the system prompt, "" for an empty memory; ids of the items it shows)."""

    def recall(self, query: str, family: str, k: int) -> tuple[str, list[str]]:
        text, ids = self.prompt_context(query, family)
        return text or f"No stored experience matches '{query.strip()}'.", ids


# ---------------------------------------------------------------------------------- stores


class MemoryStore(abc.ABC):
    """A baseline's memory: JSON persistence, content hash, copy. Subclasses hold the items and their rules."""

    method: ClassVar[str] = ""
    LISTS: ClassVar[tuple[str, ...]] = ()  # the attributes holding the items (lists of dicts)

    def __init__(self, capacity: int = 80, view: dict[str, int] | None = None):
        self.capacity = capacity
        self.view = dict(view or {})  # how snapshots render (experience.memory_k ...); not part of the file
        self.update_index = 0  # cycles run on this memory (trajectories' bank_cycle)
        self.next_id: dict[str, int] = {}  # id prefix -> last number used (ids are never reused)
        for name in self.LISTS:
            setattr(self, name, [])

    def new_id(self, prefix: str) -> str:
        self.next_id[prefix] = self.next_id.get(prefix, 0) + 1
        return f"{prefix}{self.next_id[prefix]}"

    def content(self) -> dict[str, list[dict]]:
        return {name: getattr(self, name) for name in self.LISTS}

    def content_hash(self) -> str:
        """sha256 of the items (not of the cycle counter): a failed cycle leaves it unchanged."""
        text = json.dumps({"method": self.method, **self.content()}, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def size(self) -> int:
        return sum(len(getattr(self, name)) for name in self.LISTS)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "schema": SCHEMA, "capacity": self.capacity, "cycle": self.update_index,
                "next_id": self.next_id, **self.content(), "content_hash": self.content_hash()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MemoryStore":
        store = cls(int(data.get("capacity", 80)))
        store.update_index = int(data.get("cycle", 0))
        store.next_id = {str(k): int(v) for k, v in dict(data.get("next_id") or {}).items()}
        for name in cls.LISTS:
            setattr(store, name, [dict(item) for item in data.get(name, [])])
        return store

    def copy(self) -> "MemoryStore":
        return type(self).from_dict(json.loads(json.dumps(self.to_dict())))

    def adopt(self, other: "MemoryStore") -> None:
        """Take over `other`'s items (a finished cycle's working copy, a resumed window's saved memory)."""
        view = self.view
        self.__dict__.update(other.__dict__)
        self.view = view

    def save(self, path: str | os.PathLike) -> None:
        atomic_write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike, capacity: int | None = None) -> "MemoryStore":
        """Read a memory file of this method; anything else fails in one line naming the file and the problem."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{cls.method} memory {path} does not exist (leave experience.bank unset to "
                                    "start from an empty memory)")
        try:
            data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except ValueError as err:
            raise MemoryFormatError(f"{path} is not valid JSON ({err}); restore it or start from an empty memory") from None
        store = cls._checked(data, path)
        if capacity is not None:
            store.capacity = capacity
        return store

    @classmethod
    def _checked(cls, data: Any, path: Path) -> "MemoryStore":
        if not isinstance(data, dict):
            raise MemoryFormatError(f"{path} holds a {type(data).__name__}, not a {cls.method} memory")
        kind = data.get("method")
        if kind != cls.method:
            what = f"a {kind} memory" if kind else ("an EvoHarness Experience bank" if "entries" in data
                                                    else "a JSON object without `method`")
            raise MemoryFormatError(f"{path} is {what}, not a {cls.method} memory; pass a bank.json written by an "
                                    f"experience.method={cls.method} eval")
        if int(data.get("schema", 0)) > SCHEMA:
            raise MemoryFormatError(f"{path} has schema {data['schema']}, newer than this version reads ({SCHEMA})")
        for name in cls.LISTS:
            items = data.get(name, [])
            if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(i.get("id"), str) for i in items):
                raise MemoryFormatError(f"{path}: `{name}` must be a list of objects with an id")
        store = cls.from_dict(data)
        stored = data.get("content_hash")
        if stored and stored != store.content_hash():
            raise MemoryFormatError(f"{path}: content hash mismatch (the items were edited by hand); "
                                    "remove `content_hash` to accept the edit")
        return store

    @abc.abstractmethod
    def snapshot(self) -> MemorySnapshot:
        """The frozen, picklable view the episodes of one window read."""


# ---------------------------------------------------------------------------------- cycles


class MemoryUpdater(Protocol):
    name: str  # the source recorded with every item

    def update(self, store: MemoryStore, evidence: Evidence, proposal: Proposal) -> None:
        """Apply the method's operations to `store` (a working copy); outcomes go to `proposal.operations`, calls
        and failures to its counters."""
        ...


class MethodUpdater:
    """Base of the baselines' update steps: the method's prompts through `generate` (experience.consolidator openai
    or self), or with `generate=None` its deterministic rules, which read episodes like the heuristic consolidator
    (action skeletons, failure patterns and their advice)."""

    def __init__(self, grounding: Any, generate: Optional[Callable[[list[dict[str, str]]], str]], name: str,
                 max_chars: int = 300):
        from evoharness_rl.experience.heuristic import HeuristicConsolidator

        self.grounding, self.generate, self.name, self.max_chars = grounding, generate, name, max_chars
        self.rules = HeuristicConsolidator(grounding)


class NoUpdate:
    """`experience.consolidator=none`: the memory stays as it is."""

    name = "none"

    def update(self, store: MemoryStore, evidence: Evidence, proposal: Proposal) -> None:
        return None


PASSIVE_OPS = ("store",)  # operations that need no decision (ExpeL filing a success in its pool)
COUNTED = {"removed": "removed", "pruned": "pruned", "skipped": "skip"}  # outcomes counted under their own name


@dataclass
class MemoryReport:
    """One cycle of a baseline's memory; the same record keys as ConsolidationReport where they mean the same."""

    update_index: int
    method: str
    source: str
    episodes: int
    errored_episodes: int
    episodes_seen: int
    ops: dict[str, int]  # applied operations (and removals) by kind
    operations: list[dict[str, Any]]  # every operation with its result
    failures: list[str]
    rejected: list[str]
    warnings: list[str]
    llm_calls: int
    prompt_chars: int
    prompt_tokens: int
    completion_tokens: int
    bank_before: str
    bank_hash: str
    size: int  # items in the memory after the cycle
    wall_s: float = 0.0
    families: list[str] = field(default_factory=list)
    chosen: dict[str, int] = field(default_factory=dict)  # operations the updater decided, whatever became of them

    @property
    def status(self) -> str:
        if not (self.failures or self.rejected):
            return "ok"
        return "partial" if any(n for op, n in self.ops.items() if op not in PASSIVE_OPS) else "failed"

    def cycle_record(self, **context: Any) -> dict[str, Any]:
        return {"cycle": self.update_index, **context, "status": self.status, "method": self.method,
                "source": self.source, "bank_before": self.bank_before, "bank_after": self.bank_hash,
                "episodes_in_batch": self.episodes, "episodes_seen": self.episodes_seen,
                "errored_episodes": self.errored_episodes, "families": self.families, "chosen": self.chosen,
                "applied": self.ops,
                "operations": self.operations, "failures": self.failures, "rejected": self.rejected,
                "llm_calls": self.llm_calls, "prompt_chars": self.prompt_chars, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "size": self.size, "wall_s": self.wall_s}

    def metrics(self) -> dict[str, float]:
        out = {f"experience/applied/{op}": float(n) for op, n in self.ops.items()}
        out.update({"experience/episodes_in_batch": float(self.episodes),
                    "experience/episodes_seen": float(self.episodes_seen),
                    "experience/failures": float(len(self.failures)), "experience/rejected_ops": float(len(self.rejected)),
                    "experience/failed": float(self.status == "failed"), "experience/llm_calls": float(self.llm_calls),
                    "experience/prompt_chars": float(self.prompt_chars), "experience/memory_size": float(self.size)})
        return out


def update_memory(store: MemoryStore, trajectories: Iterable[Trajectory], updater: MemoryUpdater,
                  log: Any = None) -> MemoryReport:
    """One cycle: the updater works on a copy, which replaces `store` unless the cycle failed outright."""
    start = time.perf_counter()
    trajectories = list(trajectories)
    u = store.update_index + 1
    evidence = Evidence.from_trajectories(trajectories, u)
    before = store.content_hash()
    work = store.copy()
    proposal = Proposal(episodes_seen=0)
    if evidence.episodes:
        try:
            updater.update(work, evidence, proposal)
        except Exception as err:  # an updater bug or a dead backend must not take the evaluation down
            LOG.exception("memory updater %s failed", updater.name)
            proposal.failures.append(f"{updater.name} memory update raised {type(err).__name__}: {err}"[:500])
    ops: dict[str, int] = {}
    for outcome in proposal.operations:
        key = COUNTED.get(outcome.get("result"), "") or (outcome.get("op") if outcome.get("result") == "applied" else "")
        if key:
            ops[key] = ops.get(key, 0) + 1
    chosen: dict[str, int] = {}
    for outcome in proposal.operations:
        if outcome.get("op") not in (*PASSIVE_OPS, "prune"):
            chosen[outcome["op"]] = chosen.get(outcome["op"], 0) + 1
    decided = any(n for op, n in ops.items() if op not in PASSIVE_OPS)
    if decided or not (proposal.failures or proposal.rejected):
        store.adopt(work)
    else:  # every call failed: the window teaches nothing, the memory stays as it was
        ops = {}
    store.update_index = u
    seen = len(evidence.episodes) if proposal.episodes_seen is None else proposal.episodes_seen
    report = MemoryReport(
        update_index=u, method=store.method, source=updater.name, episodes=len(evidence.episodes),
        errored_episodes=evidence.errored, episodes_seen=seen, ops=ops, operations=proposal.operations,
        failures=proposal.failures, rejected=proposal.rejected, warnings=proposal.warnings, llm_calls=proposal.calls,
        prompt_chars=proposal.prompt_chars, prompt_tokens=proposal.prompt_tokens,
        completion_tokens=proposal.completion_tokens, bank_before=before, bank_hash=store.content_hash(),
        size=store.size(), wall_s=round(time.perf_counter() - start, 4), families=list(evidence.families),
        chosen=chosen)
    line = (f"{store.method} memory cycle {u} ({updater.name}, {seen}/{report.episodes} episodes read) {report.status}: "
            f"{ops or 'no change'}, {report.size} items, failures {len(report.failures)}, rejected {len(report.rejected)}")
    info = log.info if log is not None else LOG.info
    warn = (getattr(log, "warning", None) or log.info) if log is not None else LOG.warning
    info(line)
    for problem in (report.failures + report.rejected)[:20]:
        warn(f"memory update problem: {problem}")
    return report


def cut_middle(text: str, limit: int) -> str:
    """`text` within `limit` characters, keeping its start and its end (where an episode succeeds)."""
    if len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit} chars cut]\n"
    keep = max(limit - len(marker), 0)
    return text[: keep // 2] + marker + text[len(text) - (keep - keep // 2):]
