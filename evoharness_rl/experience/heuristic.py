"""Heuristic consolidation: statistics instead of an LLM (the offline default).

Per batch it counts, through the environment's `Grounding`:

    search/<object>     location type -> episodes that saw the object there (observations and notes)
    procedure/<family>  action skeleton -> successful episodes that followed it (key steps only)
    failure/<family>    failure pattern -> episodes that showed it (invalid actions, repeats,
                        revisits, running out of steps)

These counters are added to the bank's `statistics` (sums, so batch order cannot matter),
and entries are derived from the cumulative counts:

- search priorities: the top locations of every object type seen often enough;
- task procedures: the most frequent successful skeleton of each family;
- a general workflow: the longest step sequence shared by the procedures of >= 2 families;
- mistakes: failure patterns seen often enough; scoped to all families once >= 2 show them.

For each derived candidate touched by the batch: Add if the bank has no such entry, Update
if the evidence changed its text, Skip if it agrees. An active entry whose recalled advice
keeps preceding failures (>= `archive_min_recalls` recalling episodes since its last edit,
a failure share >= `archive_fail_share` and `archive_margin` above the failure share of
comparable episodes that did not recall it) is archived.

Observations count as evidence in failed episodes too: what an episode saw is true whether
or not it succeeded. Procedures come from successful episodes only.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from evoharness_rl.experience.bank import Entry, ExperienceBank
from evoharness_rl.experience.consolidation import Evidence, Proposal
from evoharness_rl.experience.grounding import BUDGET, FORMAT, REVISIT, GenericGrounding, Grounding
from evoharness_rl.experience.operations import MAX_SUBJECT_CHARS, Operation, task_category
from evoharness_rl.rollout.trajectory import Trajectory

MAX_PROCEDURE_STEPS = 12  # longer skeletons are not procedures anyone can follow
REFS_PER_OP = 3  # evidence references attached to one operation
GENERIC_ADVICE = {
    "invalid": ("'{x}' was not accepted by the environment", "use an action exactly as listed among the available actions"),
    "repeat": ("repeating '{x}' right after it had no new effect", "if an action did not help, choose a different one"),
    FORMAT: ("a response without a readable action wastes a step", "end every response with exactly one action in the required format"),
    BUDGET: ("running out of steps before finishing the task", "commit a short plan, recall search priorities, and never re-check places already searched"),
    REVISIT: ("issuing the same action three or more times in one episode", "track what was already searched or done and move on to new options"),
}


class HeuristicConsolidator:
    """Consolidation without an LLM (see the module docstring for the rules)."""

    name = "heuristic"

    def __init__(
        self,
        grounding: Grounding | None = None,
        min_support: int = 2,  # episodes needed before a count becomes an entry
        top_locations: int = 3,  # locations listed in a search priority
        archive_min_recalls: int = 4,  # recalling episodes (since the last edit) needed before archiving
        archive_fail_share: float = 0.75,  # failure share among them that triggers archiving ...
        archive_margin: float = 0.25,  # ... when it is this much above comparable episodes without the entry
    ):
        self.grounding = grounding or GenericGrounding()
        self.min_support = min_support
        self.top_locations = top_locations
        self.archive_min_recalls = archive_min_recalls
        self.archive_fail_share = archive_fail_share
        self.archive_margin = archive_margin

    def propose(self, bank: ExperienceBank, evidence: Evidence) -> Proposal:
        delta, support = self.count(evidence)
        stats = _merged(bank.statistics, delta)
        ops = self._search_ops(bank, stats, support)
        ops += self._procedure_ops(bank, stats, support, evidence.families)
        ops += self._general_ops(bank, stats)
        ops += self._mistake_ops(bank, stats, support)
        edited = {op.id for op in ops if op.id}
        ops += self._archive_ops(bank, evidence, stats, edited)
        return Proposal(operations=ops, statistics=delta)

    # -- counting ----------------------------------------------------------------------

    def count(self, evidence: Evidence) -> tuple[dict[str, dict[str, int]], dict[str, list[str]]]:
        """-> (counter deltas, evidence refs behind each "key" and each "key::name")."""
        delta: dict[str, Counter] = {}
        support: dict[str, list[str]] = {}

        def add(key: str, name: str, position: int) -> None:
            delta.setdefault(key, Counter())[name] += 1
            for support_key in (key, f"{key}::{name}"):
                refs = support.setdefault(support_key, [])
                if len(refs) < REFS_PER_OP and evidence.ref(position) not in refs:
                    refs.append(evidence.ref(position))

        for position, traj in enumerate(evidence.episodes):
            for obj, location in sorted(set(self.grounding.search_facts(traj))):
                add(f"search/{obj[:MAX_SUBJECT_CHARS]}", location, position)
            if traj.won:
                skeleton = self.skeleton(traj)
                if skeleton:
                    add(f"procedure/{traj.family}", skeleton, position)
            for pattern in sorted(self.failure_patterns(traj)):
                add(f"failure/{traj.family}", pattern, position)
            add(f"episodes/{traj.family}", "won" if traj.won else "lost", position)
        return {k: dict(sorted(v.items())) for k, v in sorted(delta.items())}, support

    def skeleton(self, traj: Trajectory) -> str:
        """Key steps of an episode's environment actions, consecutive repeats collapsed ("" if too long)."""
        steps: list[str] = []
        for turn in traj.turns:
            if turn.action_kind != "env":
                continue
            step = self.grounding.skeleton(turn.action)
            if self.grounding.key_step(step) and (not steps or steps[-1] != step):
                steps.append(step)
        return " > ".join(steps) if 0 < len(steps) <= MAX_PROCEDURE_STEPS else ""

    def failure_patterns(self, traj: Trajectory) -> set[str]:
        patterns: set[str] = set()
        for turn in traj.turns:
            if turn.action_kind == "invalid":
                patterns.add(f"invalid:{self.grounding.skeleton(turn.action)}" if turn.action else FORMAT)
            elif turn.repeated:
                step = f"{turn.verb} [..]" if turn.verb else self.grounding.skeleton(turn.action)
                patterns.add(f"repeat:{step}")
        env_actions = Counter(t.action for t in traj.turns if t.action_kind == "env")
        if env_actions and max(env_actions.values()) >= 3:
            patterns.add(REVISIT)
        if traj.truncated:
            patterns.add(BUDGET)
        return {p[:MAX_SUBJECT_CHARS] for p in patterns}

    # -- deriving entries --------------------------------------------------------------

    def _search_ops(self, bank: ExperienceBank, stats: dict, support: dict) -> list[Operation]:
        ops = []
        for key in sorted(k for k in support if k.startswith("search/") and "::" not in k):
            counts = stats[key]
            if sum(counts.values()) < self.min_support:
                continue
            subject = key.split("/", 1)[1]
            ranked = sorted(counts, key=lambda loc: (-counts[loc], loc))[: self.top_locations]
            text = self.grounding.describe_search(subject, ranked)
            family = subject if self.grounding.search_per_family else ""
            ops.append(self._reconcile(bank, "search", family, subject, text, "", "", support[key]))
        return ops

    def _procedure_ops(self, bank: ExperienceBank, stats: dict, support: dict, families: Iterable[str]) -> list[Operation]:
        ops = []
        for family in families:
            key = f"procedure/{family}"
            best = _dominant(stats.get(key, {}), self.min_support)
            if key in support and best:
                text = f"Procedure for {family.replace('_', ' ')}: {best}"
                trigger = f"{self.grounding.task_noun} {family}"
                ops.append(self._reconcile(bank, task_category(family), family, "procedure", text, trigger, "", support[key]))
        return ops

    def _general_ops(self, bank: ExperienceBank, stats: dict) -> list[Operation]:
        procedures = {}
        for key in sorted(k for k in stats if k.startswith("procedure/")):
            best = _dominant(stats[key], self.min_support)
            if best:
                procedures[key.split("/", 1)[1]] = best.split(" > ")
        workflow, families = _shared_workflow(procedures)
        if len(workflow) < 2 or len(families) < 2:
            return []
        text = f"Workflow shared by {len(families)} task types: {' > '.join(workflow)}"
        op = self._reconcile(bank, "general", "", "workflow", text, "any task", "", [])
        return [_with_task_types(op, families)]

    def _mistake_ops(self, bank: ExperienceBank, stats: dict, support: dict) -> list[Operation]:
        families_of: dict[str, list[str]] = {}  # pattern -> families where it is frequent enough
        refs_of: dict[str, list[str]] = {}  # pattern -> this batch's episodes showing it
        for key in sorted(k for k in stats if k.startswith("failure/")):
            for pattern, count in sorted(stats[key].items()):
                if count >= self.min_support:
                    families_of.setdefault(pattern, []).append(key.split("/", 1)[1])
                refs_of.setdefault(pattern, []).extend(support.get(f"{key}::{pattern}", []))
        ops: list[Operation] = []
        for pattern in sorted(p for p in families_of if refs_of.get(p)):
            families = families_of[pattern]
            principle, how = self.advice(pattern)
            refs = refs_of[pattern][:REFS_PER_OP]
            if len(families) >= 2:  # a general mistake replaces the per-family ones
                op = self._reconcile(bank, "mistakes", "", pattern, principle, "", how, refs)
                ops.append(_with_task_types(op, families))
                for family in families:
                    local = bank.find("mistakes", pattern, family)
                    if local is not None:
                        ops.append(Operation("archive", id=local.id, reason="generalised to all task types"))
            else:
                ops.append(self._reconcile(bank, "mistakes", families[0], pattern, principle, "", how, refs))
        return ops

    def advice(self, pattern: str) -> tuple[str, str]:
        """(principle, how_to_avoid) for a failure pattern: the grounding's wording, else the generic one."""
        specific = self.grounding.mistake_advice(pattern)
        if specific:
            return specific
        kind, _, detail = pattern.partition(":")
        principle, how = GENERIC_ADVICE.get(pattern) or GENERIC_ADVICE.get(kind) or GENERIC_ADVICE["invalid"]
        return principle.format(x=detail[:60]), how

    def _reconcile(self, bank: ExperienceBank, category: str, family: str, subject: str, principle: str,
                   trigger: str, how: str, refs: list[str]) -> Operation:
        """Add, Update or Skip for one derived candidate, keyed by (category, family, subject)."""
        common = dict(evidence=tuple(refs))
        entry = bank.find(category, subject, family)
        if entry is None:
            archived = bank.find(category, subject, family, status="archived")
            if archived is not None and archived.principle == principle:
                return Operation("skip", reason=f"same advice as archived {archived.id}; evidence unchanged", **common)
            return Operation("add", category=category, family=family, subject=subject, principle=principle,
                             trigger=trigger, how_to_avoid=how, reason="new evidence", **common)
        if (entry.principle, entry.trigger, entry.how_to_avoid) == (principle, trigger, how):
            return Operation("skip", reason=f"evidence agrees with {entry.id}", **common)
        return Operation("update", id=entry.id, principle=principle, trigger=trigger, how_to_avoid=how,
                         reason=f"new evidence changed it (was: {entry.principle[:120]})", **common)

    def _archive_ops(self, bank: ExperienceBank, evidence: Evidence, stats: dict, edited: set[str]) -> list[Operation]:
        ops = []
        for entry in bank.active():
            won, lost = entry.outcomes.get("won", 0), entry.outcomes.get("lost", 0)
            if entry.id in edited or won + lost < self.archive_min_recalls:
                continue
            share = lost / (won + lost)
            base = self._base_failure_share(entry, evidence, stats)
            if share >= max(self.archive_fail_share, base + self.archive_margin):
                ops.append(Operation("archive", id=entry.id, reason=(
                    f"recalled in {won + lost} episodes since its last edit and {lost} failed "
                    f"(comparable episodes without it: {base:.2f} failed)")))
        return ops

    def _base_failure_share(self, entry: Entry, evidence: Evidence, stats: dict) -> float:
        """Failure share of the batch's episodes of the same families that did not recall `entry`
        (or, if every such episode recalled it, of those families over the bank's life)."""
        families = {t.family for t in evidence.episodes if entry.id in t.recalled_ids}
        others = [t for t in evidence.episodes if t.family in families and entry.id not in t.recalled_ids]
        if others:
            return sum(not t.won for t in others) / len(others)
        won = sum(stats.get(f"episodes/{f}", {}).get("won", 0) for f in families)
        lost = sum(stats.get(f"episodes/{f}", {}).get("lost", 0) for f in families)
        return lost / (won + lost) if won + lost else 0.0


# ----------------------------------------------------------------------------- helpers


def _merged(old: dict[str, dict[str, int]], delta: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    out = {k: dict(v) for k, v in old.items()}
    for key, counts in delta.items():
        target = out.setdefault(key, {})
        for name, value in counts.items():
            target[name] = target.get(name, 0) + value
    return out


def _dominant(counts: dict[str, int], min_support: int) -> str:
    """The most frequent key (ties: alphabetical) if it has enough support, else ""."""
    if not counts:
        return ""
    best = min(counts, key=lambda k: (-counts[k], k))
    return best if counts[best] >= min_support else ""


def _lcs(a: list[str], b: list[str]) -> list[str]:
    """Longest common subsequence (dynamic programming; sequences are short)."""
    table = [[[] for _ in range(len(b) + 1)] for _ in range(len(a) + 1)]
    for i in range(len(a) - 1, -1, -1):
        for j in range(len(b) - 1, -1, -1):
            if a[i] == b[j]:
                table[i][j] = [a[i]] + table[i + 1][j + 1]
            else:
                table[i][j] = max(table[i + 1][j], table[i][j + 1], key=len)
    return table[0][0]


def _is_subsequence(small: list[str], big: list[str]) -> bool:
    it = iter(big)
    return all(step in it for step in small)


def _shared_workflow(procedures: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    """The longest step sequence two families' procedures share, and every family containing it."""
    best: list[str] = []
    names = sorted(procedures)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            common = _lcs(procedures[a], procedures[b])
            if (len(common), " > ".join(best)) > (len(best), " > ".join(common)):
                best = common
    return best, [f for f in names if best and _is_subsequence(best, procedures[f])]


def _with_task_types(op: Operation, families: list[str]) -> Operation:
    from dataclasses import replace

    return replace(op, task_types=tuple(sorted(families))) if op.op == "add" else op
