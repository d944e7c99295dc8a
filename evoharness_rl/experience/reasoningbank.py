"""ReasoningBank (Ouyang et al., 2025) as an inference-time baseline: `experience.method=reasoningbank`.

The memory is a list of items, each a **title**, a one-sentence **description** and the
reusable reasoning **content**, with where it came from (task, family, outcome, cycle).
After every window, each episode is distilled on its own (one call per episode, as in
ReasoningBank): a success into strategies that worked, a failure into the lessons and
pitfalls that would have prevented it; at most three items per episode. The new items are
consolidated into the bank by addition (ReasoningBank's simple consolidation): an item
repeating a stored title and content is skipped, and beyond `experience.capacity` the
oldest items are pruned. At episode start the `experience.memory_k` items most similar to
the task (BM25 over the source task, title and description) go into the prompt.

ReasoningBank judges success with an LLM-as-judge; here, as for EvoHarness's
consolidator, the outcome is the environment's, so both learn from the same signal.

Without an LLM (`experience.consolidator=heuristic`): a success gives one item with its
action skeleton as the procedure; a failure one item per failure pattern (at most two)
with the mistake and how to avoid it.
"""

from __future__ import annotations

from typing import Any

from evoharness_rl.experience.consolidation import Evidence, Proposal, one_line
from evoharness_rl.experience.llm import call_json
from evoharness_rl.experience.memory import MemorySnapshot, MethodUpdater, MemoryStore, SimilarityIndex
from evoharness_rl.experience.prompts import render_episode
from evoharness_rl.rollout.trajectory import Trajectory

MAX_ITEMS_PER_EPISODE = 3
FIELDS = ("title", "description", "content")

SUCCESS_PROMPT = """You are an expert in the tasks of {agent_description}. You are given a task and the trajectory in which the agent SUCCESSFULLY accomplished it. First think about why the trajectory succeeded, then extract useful insights as memory items that help with future, similar tasks.

Notes: extract at most {max_items} memory items; do not repeat similar or overlapping items; do not mention specific objects, ids, queries or strings of this task, but the generalizable strategy.

TRAJECTORY:
{episode}

{format}"""

FAILURE_PROMPT = """You are an expert in the tasks of {agent_description}. You are given a task and the trajectory in which the agent attempted it and FAILED. First reflect on why the trajectory failed, then extract the lessons learned, or the strategies that would prevent the failure, as memory items that help with future, similar tasks.

Notes: extract at most {max_items} memory items; do not repeat similar or overlapping items; do not mention specific objects, ids, queries or strings of this task, but the generalizable lesson.

TRAJECTORY:
{episode}

{format}"""

FORMAT = """FINAL JSON FORMAT (title: a concise identifier of the strategy; description: one sentence summary; content: 1-3 sentences of reasoning steps or insights; each field at most {max_chars} characters):
{{"memory_items": [{{"title": "...", "description": "...", "content": "..."}}]}}"""


class ReasoningBankMemory(MemoryStore):
    """Memory items distilled from successes and failures."""

    method = "reasoningbank"
    LISTS = ("items",)

    def add(self, raw: dict[str, Any], traj: Trajectory, ref: str, source: str, cycle: int,
            max_chars: int) -> dict[str, Any]:
        """Consolidate one extracted item: applied (added), skipped (already stored) or rejected (a field missing)."""
        item = {key: one_line(raw[key], max_chars) for key in FIELDS if isinstance(raw.get(key), str) and raw[key].strip()}
        missing = [key for key in FIELDS if key not in item]
        if missing:
            return {"op": "add", "result": "rejected", "error": f"memory item without {', '.join(missing)}",
                    "evidence": [ref]}
        if any(i["title"].lower() == item["title"].lower() and i["content"] == item["content"] for i in self.items):
            return {"op": "skip", "result": "skipped", "title": item["title"], "evidence": [ref]}
        item = {"id": self.new_id("M"), **item, "outcome": "success" if traj.won else "failure",
                "family": traj.family, "task": traj.objective, "cycle": cycle, "source": source, "evidence": ref}
        self.items.append(item)
        return {"op": "add", "result": "applied", "id": item["id"], "title": item["title"], "evidence": [ref]}

    def prune(self) -> list[dict[str, Any]]:
        out = []
        while len(self.items) > self.capacity:
            out.append({"op": "prune", "result": "pruned", "id": self.items.pop(0)["id"]})
        return out

    def snapshot(self) -> "ReasoningBankSnapshot":
        return ReasoningBankSnapshot(self.items, self.view.get("k", 3), self.content_hash(), self.update_index)


class ReasoningBankSnapshot(MemorySnapshot):
    def __init__(self, items: list[dict], k: int, content_hash: str, cycle: int):
        super().__init__(content_hash, cycle)
        self.items = tuple((i["id"], i["title"], i["description"], i["content"]) for i in items)
        self.k = k
        self.index = SimilarityIndex(f"{i['task']} {i['family'].replace('_', ' ')} {i['title']} {i['description']}"
                                     for i in items)

    def prompt_context(self, objective: str, family: str) -> tuple[str, list[str]]:
        hits = self.index.top(f"{objective} {family.replace('_', ' ')}", self.k)
        if not hits:
            return "", []
        blocks = []
        for n, h in enumerate(hits, 1):
            _, title, description, content = self.items[h]
            blocks.append(f"# Memory item {n}\n## Title: {title}\n## Description: {description}\n## Content: {content}")
        return ("MEMORY ITEMS FROM PAST TASKS (use them if they help):\n" + "\n\n".join(blocks),
                [self.items[h][0] for h in hits])


class ReasoningBankUpdater(MethodUpdater):
    """Extraction by an LLM (`generate`) or, with `generate=None`, by deterministic rules."""

    def update(self, store: ReasoningBankMemory, evidence: Evidence, proposal: Proposal) -> None:
        seen = 0
        for position, traj in enumerate(evidence.episodes):
            ref = evidence.ref(position)
            failures = len(proposal.failures)
            raws = self._extract(traj, ref, proposal) if self.generate is not None else self._rule_items(traj)
            seen += len(proposal.failures) == failures or self.generate is None
            for i, raw in enumerate(raws):
                if i >= MAX_ITEMS_PER_EPISODE:
                    proposal.rejected.append(f"{ref}: {len(raws) - MAX_ITEMS_PER_EPISODE} items beyond "
                                             f"{MAX_ITEMS_PER_EPISODE} ignored")
                    break
                if not isinstance(raw, dict):
                    outcome = {"op": "add", "result": "rejected", "error": f"memory item is a {type(raw).__name__}",
                               "evidence": [ref]}
                else:
                    outcome = store.add(raw, traj, ref, self.name, evidence.update_index, self.max_chars)
                outcome["source"] = self.name
                proposal.operations.append(outcome)
                if outcome["result"] == "rejected":
                    proposal.rejected.append(f"{ref} item {i}: {outcome['error']}")
        proposal.operations += store.prune()
        proposal.episodes_seen = seen

    def _extract(self, traj: Trajectory, ref: str, proposal: Proposal) -> list:
        template = SUCCESS_PROMPT if traj.won else FAILURE_PROMPT
        user = template.format(agent_description=self.grounding.agent_description, max_items=MAX_ITEMS_PER_EPISODE,
                               episode=render_episode(traj, ref), format=FORMAT.format(max_chars=self.max_chars))
        stage = f"extraction {ref}"
        value = call_json(self.generate, stage, user, proposal)
        if value is None:
            return []
        if isinstance(value, dict):
            value = value.get("memory_items", value.get("items"))
        if not isinstance(value, list):
            proposal.failures.append(f"{stage}: expected {{\"memory_items\": [...]}}, got {type(value).__name__}")
            return []
        return value

    def _rule_items(self, traj: Trajectory) -> list[dict[str, str]]:
        family = traj.family.replace("_", " ")
        if traj.won:
            skeleton = self.rules.skeleton(traj)
            if not skeleton:
                return []
            return [{"title": f"Steps that completed a {family} task",
                     "description": f"A procedure that worked for tasks like: {traj.objective}",
                     "content": f"Key steps, in order: {skeleton}."}]
        items = []
        for pattern in sorted(self.rules.failure_patterns(traj))[:2]:
            principle, how = self.rules.advice(pattern)
            items.append({"title": f"Pitfall in {family} tasks: {principle}",
                          "description": f"A failed attempt at tasks like: {traj.objective}",
                          "content": f"The attempt failed after {principle}. Instead: {how}."})
        return items
