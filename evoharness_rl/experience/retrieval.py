"""`recall [query]`: BM25 (bm25s) over a frozen bank snapshot.

One `BankSnapshot` is taken per rollout batch; it holds the active entries and one BM25
index over them, built once. A query sees only the entries visible to the episode's task
family (general entries, its own `task:<family>` skills, mistakes scoped to it or to all
families, search priorities):

- "where to find X" / "where is X" / "locate X" ... routes to search priorities: the entry
  whose subject is X first, then other search priorities matching X;
- any other query ranks all visible entries by BM25 (the indexed text carries category
  words such as "mistake avoid" or "how task procedure", so "mistakes to avoid" and
  "how to do clean task" find what they ask for);
- a query that matches nothing says so.

Ties are broken by the canonical entry order, so the same snapshot always answers a query
the same way. The snapshot is immutable and pickles without its index (rebuilt on load).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from evoharness_rl.bm25 import import_bm25s

bm25s = import_bm25s()

_TOKEN = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    "a an and are as at be by do does for from how i in is it me my of on or some that the their then there "
    "this to was were what when where which who will with you your".split()
)
_CATEGORY_WORDS = {
    "general": "general skill principle",
    "task": "task procedure skill how",
    "mistakes": "mistake mistakes avoid pitfall error wrong",
    "search": "search where find location look",
}
_SEARCH_QUERY = re.compile(
    r"^\s*(?:where\s+(?:to\s+(?:find|look\s+for|search\s+for)|can\s+i\s+find|do\s+i\s+find|might\s+i\s+find|"
    r"is|are|would\s+i\s+find)|find|locate|location\s+of|locations\s+of|search\s+for|look\s+for)\s+"
    r"(?:the\s+|a\s+|an\s+|some\s+|any\s+)?(?P<subject>.+?)[\s?.!]*$",
    re.IGNORECASE,
)


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens without stopwords and bare numbers, lightly stemmed."""
    return [_stem(t) for t in _TOKEN.findall(text.lower()) if t not in _STOPWORDS and not t.isdigit()]


def _stem(token: str) -> str:
    """A light suffix stripper so that query and entry wordings meet ("searches", "searching" ->
    "search"; "mistakes", "mistake" -> "mistak"). Both sides go through it, so stems need
    not be words."""
    if len(token) > 4 and token.endswith("ies"):
        token = token[:-3] + "y"
    elif len(token) > 4 and token.endswith(("sses", "xes", "ches", "shes")):
        token = token[:-2]
    elif len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
        token = token[:-1]
    if len(token) > 5 and token.endswith("ing"):
        token = token[:-3]
    elif len(token) > 4 and token.endswith("ed"):
        token = token[:-2]
    if len(token) > 4 and token.endswith("e"):
        token = token[:-1]
    return token


def search_subject(query: str) -> str | None:
    """The X of 'where to find X'-style queries (None for other queries)."""
    match = _SEARCH_QUERY.match(query)
    if not match:
        return None
    words = [t for t in _TOKEN.findall(match.group("subject").lower()) if t not in _STOPWORDS and not t.isdigit()]
    return " ".join(words) or None


def render_entry(entry: Any) -> str:
    """How an entry reads in a recall result."""
    if entry.category == "mistakes":
        text = f"[{entry.id}] Mistake: {entry.principle}"
        if entry.how_to_avoid:
            text += f" | avoid: {entry.how_to_avoid}"
    else:
        text = f"[{entry.id}] {entry.principle}"
    if entry.trigger:
        text += f" | when: {entry.trigger}"
    return text


@dataclass(frozen=True)
class SnapshotEntry:
    """What retrieval needs of one active entry."""

    id: str
    category: str
    family: str  # "" = visible to every family
    subject: str
    text: str  # rendered for the prompt
    index_text: str  # what BM25 indexes

    @classmethod
    def of(cls, entry: Any) -> "SnapshotEntry":
        kind = "task" if entry.category.startswith("task:") else entry.category
        scope = " ".join(entry.family.replace("_", " ").split())
        index_text = " ".join((render_entry(entry), entry.subject, scope, _CATEGORY_WORDS[kind], entry.how_to_avoid))
        return cls(entry.id, entry.category, entry.family, entry.subject, render_entry(entry), index_text)


class BankSnapshot:
    """A frozen, read-only view of the active bank for one rollout batch (an `ExperienceReader`)."""

    def __init__(self, entries: Iterable[SnapshotEntry], content_hash: str, cycle: int = 0):
        object.__setattr__(self, "_frozen", False)
        self.entries: tuple[SnapshotEntry, ...] = tuple(entries)
        self.content_hash = content_hash  # hash of the bank this snapshot was taken from (trajectories' bank_version)
        self.cycle = cycle  # consolidation cycles that bank had been through (trajectories' bank_cycle)
        self._build()
        object.__setattr__(self, "_frozen", True)

    @classmethod
    def from_entries(cls, entries: Iterable[Any], content_hash: str, cycle: int = 0) -> "BankSnapshot":
        return cls((SnapshotEntry.of(e) for e in entries), content_hash, cycle)

    def _build(self) -> None:
        self._is_search = np.array([e.category == "search" for e in self.entries], dtype=bool)
        self._subjects = {(" ".join(tokenize(e.subject)), i) for i, e in enumerate(self.entries) if e.category == "search"}
        self._masks: dict[str, np.ndarray] = {}  # family -> visible entries (filled on first use)
        self._index = None
        corpus = [tokenize(e.index_text) or ["_empty_"] for e in self.entries]
        if corpus:
            self._index = bm25s.BM25()
            self._index.index(corpus, show_progress=False)

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise AttributeError(f"BankSnapshot is read-only (tried to set {name!r}); edit the ExperienceBank instead")
        object.__setattr__(self, name, value)

    def __getstate__(self) -> dict[str, Any]:
        return {"entries": self.entries, "content_hash": self.content_hash, "cycle": self.cycle}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "_frozen", False)
        self.entries, self.content_hash, self.cycle = state["entries"], state["content_hash"], state.get("cycle", 0)
        self._build()
        object.__setattr__(self, "_frozen", True)

    def __len__(self) -> int:
        return len(self.entries)

    # -- ExperienceReader ------------------------------------------------------------------

    def recall(self, query: str, family: str, k: int) -> tuple[str, list[str]]:
        """-> (rendered entries, their ids), best first; a 'nothing matches' line and [] otherwise."""
        subject = search_subject(query)
        if subject is not None:
            hits = self._search(subject, family, k)
            if not hits:
                return f"No search priority stored for '{subject}'.", []
        else:
            hits = self._rank(tokenize(query), self._visible(family), k)
            if not hits:
                return f"No stored experience matches '{query.strip()}'.", []
        return "\n".join(self.entries[i].text for i in hits), [self.entries[i].id for i in hits]

    def _visible(self, family: str) -> np.ndarray:
        mask = self._masks.get(family)
        if mask is None:
            mask = np.array([e.family in ("", family) for e in self.entries], dtype=bool)
            self._masks[family] = mask
        return mask

    def _search(self, subject: str, family: str, k: int) -> list[int]:
        mask = self._visible(family) & self._is_search
        key = tokenize(subject)
        exact = sorted(i for s, i in self._subjects if s == " ".join(key) and mask[i])
        rest = [i for i in self._rank(key, mask, k) if i not in exact]
        return (exact + rest)[: max(k, 1)]

    def _rank(self, tokens: list[str], mask: np.ndarray, k: int) -> list[int]:
        if self._index is None or not tokens or not mask.any():
            return []
        scores = self._index.get_scores(tokens) * mask
        positive = np.flatnonzero(scores > 0)
        # Highest score first; equal scores keep the canonical entry order (stable sort).
        best = positive[np.argsort(-scores[positive], kind="stable")]
        return [int(i) for i in best[: max(k, 1)]]
