"""The BPE workspace one episode sees: Belief, Progress, Experience and the four verbs.

    track  [query]    -> Belief.track(query)             read-only slice of episode state
    commit [subgoal]  -> Progress.commit(subgoal)        updates the plan, returns it
    recall [query]    -> Experience snapshot top-k       read-only, cross-episode
    note   [insight]  -> appended to this episode's notes (never to the bank)

Every verb costs one step of the shared budget (the episode loop counts it).
The workspace is environment-agnostic: the Belief tracker and the Experience snapshot
are handed in.

Modes (`HarnessMode`):
- `env_only`: no harness at all (ReAct baseline); verbs are invalid.
- `always_on`: EvoHarness-Base; the views are rendered into every turn, verbs invalid.
- `adaptive`: the verbs are actions; views show only what the policy asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from evoharness_rl.harness.belief import Belief
from evoharness_rl.harness.protocol import HARNESS_VERBS, ParsedAction


class HarnessMode(str, Enum):
    ENV_ONLY = "env_only"
    ALWAYS_ON = "always_on"
    ADAPTIVE = "adaptive"


class ExperienceReader(Protocol):
    """What the workspace needs from an Experience bank snapshot (frozen for the batch)."""

    def recall(self, query: str, family: str, k: int) -> tuple[str, list[str]]:
        """-> (rendered entries for the prompt, ids of the entries returned)."""
        ...


class EmptyExperience:
    """The Experience of an empty bank (also used when Experience is switched off)."""

    def recall(self, query: str, family: str, k: int) -> tuple[str, list[str]]:
        return f"No stored experience matches '{query}'.", []


@dataclass
class Progress:
    """A bounded subgoal record. Committing a new subgoal closes the current one."""

    capacity: int = 8  # most subgoals kept; the oldest completed ones drop first
    subgoals: list[list] = field(default_factory=list)  # [[text, done], ...]

    def commit(self, subgoal: str) -> str:
        text = subgoal.strip()
        for item in self.subgoals:
            if item[0].lower() == text.lower():
                # Re-committing an existing subgoal makes it current again (not a duplicate).
                self.subgoals.remove(item)
                break
        for item in self.subgoals:
            item[1] = True
        self.subgoals.append([text, False])
        while len(self.subgoals) > self.capacity:
            done = [i for i, item in enumerate(self.subgoals) if item[1]]
            self.subgoals.pop(done[0] if done else 0)
        return self.render()

    def render(self, items: list[tuple[str, bool]] | None = None) -> str:
        items = items if items is not None else [(t, d) for t, d in self.subgoals]
        if not items:
            return "(no subgoals committed)"
        return "\n".join(f"[{'x' if done else ' '}] {text}" for text, done in items)


@dataclass
class HarnessSwitches:
    """Which BPE modules exist (ablations remove a module's verb from prompt and protocol)."""

    belief: bool = True
    progress: bool = True
    experience: bool = True

    def verbs(self) -> tuple[str, ...]:
        on = {"track": self.belief, "commit": self.progress, "recall": self.experience, "note": self.experience}
        return tuple(v for v in HARNESS_VERBS if on[v])


class Workspace:
    """The harness state of one episode."""

    def __init__(
        self,
        mode: HarnessMode,
        belief: Belief,
        experience: ExperienceReader | None = None,
        switches: HarnessSwitches | None = None,
        family: str = "",
        objective: str = "",
        recall_k: int = 3,
        progress_capacity: int = 8,
    ):
        self.mode = HarnessMode(mode)
        self.belief = belief
        self.switches = switches or HarnessSwitches()
        self.experience = experience if (experience is not None and self.switches.experience) else EmptyExperience()
        self.family = family
        self.objective = objective
        self.recall_k = recall_k
        self.progress = Progress(capacity=progress_capacity)
        self.notes: list[str] = []  # worker-local evidence buffer for consolidation
        self.recalled_ids: list[str] = []  # every entry id shown to the policy (usage counts)
        self.last_recall: str = ""  # the latest recall result (adaptive) / auto-recall (always_on)
        self.last_track: str = ""  # the latest track result, shown on the next turn only
        self._auto_recall: str | None = None

    @property
    def enabled_verbs(self) -> tuple[str, ...]:
        return self.switches.verbs() if self.mode is HarnessMode.ADAPTIVE else ()

    def execute(self, action: ParsedAction) -> str:
        """Run one harness verb (already validated by the protocol) and return its result text."""
        verb, arg = action.verb, action.action
        if verb == "track":
            self.last_track = f"TRACK [{arg}]:\n{self.belief.track(arg)}"
            return self.last_track
        if verb == "commit":
            return "PLAN:\n" + self.progress.commit(arg)
        if verb == "recall":
            text, ids = self.experience.recall(arg, self.family, self.recall_k)
            self.recalled_ids.extend(ids)
            self.last_recall = f"RECALLED [{arg}]:\n{text}"
            return self.last_recall
        if verb == "note":
            self.notes.append(arg)
            return f"Noted for future episodes: {arg}"
        raise ValueError(f"unknown harness verb {verb!r}; expected one of {HARNESS_VERBS}")

    def after_env_step(self) -> None:
        """A track result describes the moment it was asked; it expires after an env action."""
        self.last_track = ""

    def state(self) -> tuple[str, str]:
        """(Belief, Progress) as they stand now, for the record of a turn ("" for a module that is off)."""
        belief = self.belief.render() if self.switches.belief else ""
        auto = self.belief.auto_progress() if self.mode is HarnessMode.ALWAYS_ON else None
        progress = self.progress.render(auto) if self.switches.progress else ""
        return belief, progress

    def render_views(self) -> str:
        """The harness views appended to this turn's prompt."""
        if self.mode is HarnessMode.ENV_ONLY:
            return ""
        parts: list[str] = []
        if self.mode is HarnessMode.ALWAYS_ON:
            if self.switches.belief:
                parts.append("BELIEF:\n" + self.belief.render())
            if self.switches.progress:
                parts.append("PROGRESS:\n" + self.progress.render(self.belief.auto_progress()))
            if self.switches.experience:
                if self._auto_recall is None:
                    text, ids = self.experience.recall(self.objective, self.family, self.recall_k)
                    self.recalled_ids.extend(ids)
                    self._auto_recall = text
                parts.append("EXPERIENCE:\n" + self._auto_recall)
            return "\n\n".join(parts)
        if self.progress.subgoals:
            parts.append("PLAN:\n" + self.progress.render())
        if self.last_recall:
            parts.append(self.last_recall)
        if self.last_track:
            parts.append(self.last_track)
        return "\n\n".join(parts)
