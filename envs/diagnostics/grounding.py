"""What the heuristic consolidator learns from diagnostic episodes: which door opened in each vault.

A vault's opening door is the experience task's hidden rule. Every episode that saw a door swing
open is evidence for its vault (the task family), failed or not; the search priority built from
them reads "vault-north: the oak door opens", and `recall [where is the door that opens]` (a search
query, which ranks search priorities only) finds it. No procedures: the tasks' moves are not worth a
skill entry.
"""

from __future__ import annotations

import re

from evoharness_rl.experience.grounding import GenericGrounding
from evoharness_rl.rollout.trajectory import Trajectory

_OPENED = re.compile(r"The (\w+) door swings open")


class DiagnosticsGrounding(GenericGrounding):
    name = "diagnostics"
    agent_description = "an agent in a small text world"
    task_noun = "task"
    search_per_family = True

    def search_facts(self, traj: Trajectory) -> list[tuple[str, str]]:
        return [(traj.family, f"the {m.group(1)} door") for turn in traj.turns
                if turn.action_kind == "env" and (m := _OPENED.search(turn.observation or ""))]

    def key_step(self, skeleton: str) -> bool:
        return False

    def describe_search(self, subject: str, ranked: list[str]) -> str:
        return f"{subject}: {ranked[0]} opens"


def make_grounding() -> DiagnosticsGrounding:
    return DiagnosticsGrounding()
