"""ExpeL (Zhao et al., 2024) as an inference-time baseline: `experience.method=expel`.

The memory has two parts:

- **insights**: natural-language rules with an importance count (`votes`). New insights
  start at 2; `upvote` and `edit` add 1, `downvote` takes 1; an insight at 0 is removed.
  Beyond `experience.capacity`, the least voted (then oldest) are pruned.
- **the experience pool**: successful trajectories, one per task (the shortest), compactly
  rendered; filed without any decision (op `store`).

Insights are induced, as in ExpeL, by comparing a failed attempt with a successful one
(the same task, else the same task family, from the window or the pool) and by reading
groups of up to four successes of one family. Each comparison is one call whose answer is
a list of add / edit / upvote / downvote operations, applied at once so the next call sees
them. At episode start the prompt holds the most voted insights (`experience.max_insights`)
and the `experience.memory_k` pooled successes most similar to the task (BM25 over their
objectives and families), each cut to `experience.max_example_chars`.

Without an LLM (`experience.consolidator=heuristic`) the same operations come from rules:
a family's successes give "a procedure that worked" (its most common action skeleton;
upvoted when unchanged, edited when it changed); a failure gives, per failure pattern the
paired success does not have, an insight to avoid it (upvoted when already there); an
insight shown to failed episodes and to no successful one in the window is downvoted.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional

from evoharness_rl.experience.consolidation import Evidence, Proposal, one_line
from evoharness_rl.experience.llm import call_json
from evoharness_rl.experience.memory import MemorySnapshot, MethodUpdater, MemoryStore, SimilarityIndex, cut_middle
from evoharness_rl.experience.prompts import cut, render_episode
from evoharness_rl.rollout.trajectory import Trajectory

INITIAL_VOTES = 2  # ExpeL's starting importance of a new insight
GROUP_SIZE = 4  # successes read together to find what they share
MAX_OPS_PER_CALL = 8  # operations read from one answer; the rest are rejected
OBS_CHARS = 200  # one observation in a pooled trajectory
OPS = ("add", "edit", "upvote", "downvote")

PAIR_PROMPT = """You are an advanced reasoning agent that maintains the rules {agent_description} follows. You are given a SUCCESSFUL and a FAILED attempt at the same kind of {task_noun}, and the EXISTING RULES. By contrasting the failed attempt with the successful one, find why it failed, and edit the rules so that they are GENERAL, HIGH-LEVEL insights that avoid this failure on different tasks in the future.

SUCCESSFUL ATTEMPT:
{success}

FAILED ATTEMPT:
{failure}

EXISTING RULES (id, votes, text):
{rules}

{operations}"""

GROUP_PROMPT = """You are an advanced reasoning agent that maintains the rules {agent_description} follows. You are given several SUCCESSFUL attempts at {task_noun}s and the EXISTING RULES. Find the patterns these successes share and edit the rules so that they are GENERAL, HIGH-LEVEL insights that help on different tasks in the future.

SUCCESSFUL ATTEMPTS:
{successes}

EXISTING RULES (id, votes, text):
{rules}

{operations}"""

OPERATIONS = """Operations (at most {max_ops}; each rule at most {max_chars} characters; no object ids or other specifics of one task):
- {{"op": "add", "text": "..."}}: a new rule that no existing rule covers
- {{"op": "edit", "id": "I3", "text": "..."}}: an existing rule that is incomplete or imprecise, rewritten
- {{"op": "upvote", "id": "I3"}}: an existing rule these attempts confirm
- {{"op": "downvote", "id": "I3"}}: an existing rule these attempts contradict or show useless

FINAL JSON FORMAT:
{{"operations": [{{"op": "add", "text": "..."}}, {{"op": "upvote", "id": "I1"}}]}}"""


# ---------------------------------------------------------------------------------- memory


class ExpeLMemory(MemoryStore):
    """Insights with votes, and the pool of successful trajectories."""

    method = "expel"
    LISTS = ("insights", "successes")

    def apply(self, op: dict[str, Any], source: str, cycle: int, max_chars: int) -> dict[str, Any]:
        """Apply one add / edit / upvote / downvote; -> its outcome (result applied | removed | rejected)."""
        name = op.get("op")
        outcome: dict[str, Any] = {"op": name, "source": source}
        if name not in OPS:
            return {**outcome, "result": "rejected", "error": f"unknown operation {str(name)[:20]!r}; expected one of "
                                                              f"{', '.join(OPS)}"}
        text = one_line(op["text"], max_chars) if isinstance(op.get("text"), str) else ""
        if name == "add":
            if not text:
                return {**outcome, "result": "rejected", "error": "add needs a non-empty text"}
            insight = {"id": self.new_id("I"), "text": text, "votes": INITIAL_VOTES, "created": cycle,
                       "updated": cycle, "source": source}
            self.insights.append(insight)
            return {**outcome, "result": "applied", "id": insight["id"], "text": text}
        target = next((i for i in self.insights if i["id"] == op.get("id")), None)
        if target is None:
            return {**outcome, "result": "rejected", "error": f"{name} of unknown insight id {str(op.get('id'))[:30]!r}"}
        outcome["id"] = target["id"]
        if name == "edit":
            if not text:
                return {**outcome, "result": "rejected", "error": f"edit of {target['id']} needs a non-empty text"}
            target.update(text=text, votes=target["votes"] + 1, updated=cycle)
            return {**outcome, "result": "applied", "text": text}
        target["votes"] += 1 if name == "upvote" else -1
        target["updated"] = cycle
        if target["votes"] <= 0:
            self.insights.remove(target)
            return {**outcome, "result": "removed"}
        return {**outcome, "result": "applied", "votes": target["votes"]}

    def store(self, traj: Trajectory, ref: str) -> Optional[dict[str, Any]]:
        """File a successful episode in the pool (one per task: the shortest); -> the outcome, None if not kept."""
        old = next((s for s in self.successes if s["task_id"] == traj.task_id), None)
        if old is not None and old["steps"] <= traj.steps:
            return None
        item = {"id": old["id"] if old else self.new_id("T"), "task_id": traj.task_id, "family": traj.family,
                "objective": traj.objective, "steps": traj.steps, "text": render_success(traj), "evidence": ref}
        if old is not None:
            self.successes[self.successes.index(old)] = item
        else:
            self.successes.append(item)
        return {"op": "store", "result": "applied", "id": item["id"], "evidence": ref}

    def prune(self) -> list[dict[str, Any]]:
        """Insights beyond capacity, least voted first (then oldest)."""
        out = []
        while len(self.insights) > self.capacity:
            victim = min(self.insights, key=lambda i: (i["votes"], int(i["id"][1:])))
            self.insights.remove(victim)
            out.append({"op": "prune", "result": "pruned", "id": victim["id"]})
        return out

    def ranked_insights(self) -> list[dict[str, Any]]:
        return sorted(self.insights, key=lambda i: (-i["votes"], int(i["id"][1:])))

    def snapshot(self) -> "ExpeLSnapshot":
        view = self.view
        return ExpeLSnapshot(self.ranked_insights()[: view.get("max_insights", 20)], self.successes,
                             view.get("k", 3), view.get("max_example_chars", 2500), self.content_hash(),
                             self.update_index)


def render_success(traj: Trajectory) -> str:
    """A pooled success: the task and every environment step (> action, then what it returned)."""
    lines = [f"Task: {traj.objective}"]
    for turn in traj.turns:
        if turn.action_kind == "env":
            lines += [f"> {turn.action}", cut(" ".join(turn.observation.split()), OBS_CHARS)]
    return "\n".join(lines)


class ExpeLSnapshot(MemorySnapshot):
    """The insights (already ranked and capped) and the pool, with its similarity index."""

    def __init__(self, insights: list[dict], successes: list[dict], k: int, max_example_chars: int,
                 content_hash: str, cycle: int):
        super().__init__(content_hash, cycle)
        self.insights = tuple((i["id"], i["text"]) for i in insights)
        self.successes = tuple((s["id"], s["text"]) for s in successes)
        self.k, self.max_example_chars = k, max_example_chars
        self.index = SimilarityIndex(f"{s['family'].replace('_', ' ')} {s['objective']}" for s in successes)

    def prompt_context(self, objective: str, family: str) -> tuple[str, list[str]]:
        parts, ids = [], []
        if self.insights:
            parts.append("INSIGHTS FROM PAST TASKS (most useful first):\n"
                         + "\n".join(f"{n}. {text}" for n, (_, text) in enumerate(self.insights, 1)))
            ids += [i for i, _ in self.insights]
        hits = self.index.top(f"{family.replace('_', ' ')} {objective}", self.k)
        if hits:
            examples = [f"EXAMPLE {n}:\n{cut_middle(self.successes[h][1], self.max_example_chars)}"
                        for n, h in enumerate(hits, 1)]
            parts.append("SUCCESSFUL EXAMPLES OF SIMILAR TASKS:\n" + "\n\n".join(examples))
            ids += [self.successes[h][0] for h in hits]
        return "\n\n".join(parts), ids


# --------------------------------------------------------------------------------- update


class ExpeLUpdater(MethodUpdater):
    """ExpeL's insight extraction: by an LLM (`generate`) or, with `generate=None`, by deterministic rules."""

    def update(self, store: ExpeLMemory, evidence: Evidence, proposal: Proposal) -> None:
        cycle = evidence.update_index
        episodes = list(enumerate(evidence.episodes))
        pool_before = {s["task_id"]: s for s in store.successes}  # comparisons may use earlier windows' successes
        for position, traj in episodes:
            if traj.won and (outcome := store.store(traj, evidence.ref(position))):
                proposal.operations.append(outcome)
        wins = [(p, t) for p, t in episodes if t.won]
        seen: set[int] = set()
        for position, failed in ((p, t) for p, t in episodes if not t.won):
            partner = self._partner(failed, wins, pool_before)
            if partner is None:
                proposal.warnings.append(f"{evidence.ref(position)}: no success of its task or family to compare with")
                continue
            seen |= {position} | ({partner[0]} if isinstance(partner[0], int) else set())
            ops = self._pair_ops(store, failed, partner[1], f"comparison {evidence.ref(position)}", proposal)
            self._apply(store, ops, cycle, [evidence.ref(position)], proposal)
        for family in sorted({t.family for _, t in wins}):
            members = [(p, t) for p, t in wins if t.family == family]
            for lo in range(0, len(members), GROUP_SIZE):
                group = members[lo: lo + GROUP_SIZE]
                seen |= {p for p, _ in group}
                ops = self._group_ops(store, [t for _, t in group], f"successes [{family}] {lo // GROUP_SIZE + 1}",
                                      proposal)
                self._apply(store, ops, cycle, [evidence.ref(p) for p, _ in group], proposal)
        if self.generate is None:
            self._downvotes(store, episodes, cycle, proposal, evidence)
        proposal.operations += store.prune()
        proposal.episodes_seen = len(seen) if self.generate is not None else len(episodes)

    @staticmethod
    def _partner(failed: Trajectory, wins: list[tuple[int, Trajectory]], pool: dict[str, dict]):
        """(position or pool id, success): the same task first, then the same family; window before pool."""
        for same in (lambda t_id, fam: t_id == failed.task_id, lambda t_id, fam: fam == failed.family):
            for position, traj in wins:
                if same(traj.task_id, traj.family):
                    return position, traj
            for item in pool.values():
                if same(item["task_id"], item["family"]):
                    return item["id"], item
        return None

    def _apply(self, store: ExpeLMemory, ops: list[dict], cycle: int, refs: list[str], proposal: Proposal) -> None:
        for i, op in enumerate(ops):
            if i >= MAX_OPS_PER_CALL:
                proposal.rejected.append(f"{len(ops) - MAX_OPS_PER_CALL} operations beyond {MAX_OPS_PER_CALL} "
                                         "in one answer ignored")
                break
            if not isinstance(op, dict):
                proposal.rejected.append(f"operation {i}: expected an object, got {type(op).__name__}")
                continue
            outcome = store.apply(op, self.name, cycle, self.max_chars)
            outcome["evidence"] = refs
            proposal.operations.append(outcome)
            if outcome["result"] == "rejected":
                proposal.rejected.append(f"operation {i}: {outcome['error']}")

    # -- with an LLM ------------------------------------------------------------------------

    def _pair_ops(self, store: ExpeLMemory, failed: Trajectory, success: Any, stage: str,
                  proposal: Proposal) -> list[dict]:
        if self.generate is None:
            return self._rule_pair_ops(store, failed, success)
        shown = render_episode(success, "success") if isinstance(success, Trajectory) else success["text"]
        user = PAIR_PROMPT.format(**self._common(store), success=shown, failure=render_episode(failed, "failure"))
        return self._operations(call_json(self.generate, stage, user, proposal), stage, proposal)

    def _group_ops(self, store: ExpeLMemory, group: list[Trajectory], stage: str, proposal: Proposal) -> list[dict]:
        if self.generate is None:
            return self._rule_group_ops(store, group)
        shown = "\n\n".join(render_episode(t, f"success {n}") for n, t in enumerate(group, 1))
        user = GROUP_PROMPT.format(**self._common(store), successes=shown)
        return self._operations(call_json(self.generate, stage, user, proposal), stage, proposal)

    def _common(self, store: ExpeLMemory) -> dict[str, str]:
        rules = "\n".join(f"{i['id']} ({i['votes']}): {i['text']}" for i in store.ranked_insights()) or "(none yet)"
        return {"agent_description": self.grounding.agent_description, "task_noun": self.grounding.task_noun,
                "rules": rules, "operations": OPERATIONS.format(max_ops=MAX_OPS_PER_CALL, max_chars=self.max_chars)}

    @staticmethod
    def _operations(value: Any, stage: str, proposal: Proposal) -> list[dict]:
        if value is None:
            return []  # call_json recorded why
        if isinstance(value, list):
            value = {"operations": value}
        ops = value.get("operations") if isinstance(value, dict) else None
        if not isinstance(ops, list):
            got = f"keys {sorted(value)[:6]}" if isinstance(value, dict) else type(value).__name__
            proposal.failures.append(f"{stage}: expected {{\"operations\": [...]}}, got {got}")
            return []
        return ops

    # -- without an LLM ---------------------------------------------------------------------

    def _rule_pair_ops(self, store: ExpeLMemory, failed: Trajectory, success: Any) -> list[dict]:
        succeeded = self.rules.failure_patterns(success) if isinstance(success, Trajectory) else set()
        ops = []
        for pattern in sorted(self.rules.failure_patterns(failed) - succeeded)[:2]:
            principle, how = self.rules.advice(pattern)
            text = one_line(f"In {_family(failed.family)} tasks, avoid {principle}: {how}.", self.max_chars)
            same = next((i for i in store.insights if i["text"] == text), None)
            ops.append({"op": "upvote", "id": same["id"]} if same else {"op": "add", "text": text})
        return ops

    def _rule_group_ops(self, store: ExpeLMemory, group: list[Trajectory]) -> list[dict]:
        skeletons = Counter(s for s in (self.rules.skeleton(t) for t in group) if s)
        if not skeletons:
            return []
        head = f"For {_family(group[0].family)} tasks, a procedure that worked:"
        text = f"{head} {skeletons.most_common(1)[0][0]}."
        same = next((i for i in store.insights if i["text"] == one_line(text, self.max_chars)), None)
        if same is not None:
            return [{"op": "upvote", "id": same["id"]}]
        older = next((i for i in store.insights if i["text"].startswith(head)), None)
        return [{"op": "edit", "id": older["id"], "text": text} if older else {"op": "add", "text": text}]

    def _downvotes(self, store: ExpeLMemory, episodes: list[tuple[int, Trajectory]], cycle: int, proposal: Proposal,
                   evidence: Evidence) -> None:
        """An insight every episode that was shown it failed (and some did) loses a vote."""
        helped = {i for _, t in episodes if t.won for i in t.recalled_ids}
        shown = Counter(i for _, t in episodes if not t.won for i in set(t.recalled_ids) if i.startswith("I"))
        for insight_id in sorted(set(shown) - helped):
            if any(i["id"] == insight_id for i in store.insights):
                refs = [evidence.ref(p) for p, t in episodes if insight_id in t.recalled_ids][:3]
                self._apply(store, [{"op": "downvote", "id": insight_id}], cycle, refs, proposal)


def _family(family: str) -> str:
    return family.replace("_", " ")
