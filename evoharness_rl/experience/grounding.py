"""What the heuristic consolidator needs to know about an environment's text.

The heuristic (no-LLM) consolidator is environment-agnostic; everything that depends on
how an environment phrases its actions and observations goes through a `Grounding`:

    grounding.search_facts(traj)      -> [(object_type, location_type), ...] seen in the episode
    grounding.skeleton(action)        -> the action with instance ids abstracted ("take OBJ from RECEP")
    grounding.key_step(skeleton)      -> is this step part of a procedure (not navigation)?
    grounding.describe_search(subject, ranked_locations) -> the text of a search priority
    grounding.mistake_advice(pattern) -> (principle, how_to_avoid) for a failure pattern, or None

Implementations live beside their environment (`envs/<env>/grounding.py`, function
`make_grounding()`, registered as `EnvEntry.grounding`); `GenericGrounding` serves
environments without one.
"""

from __future__ import annotations

import re
from typing import Protocol

from evoharness_rl.envs import env_names, env_part
from evoharness_rl.rollout.trajectory import Trajectory

# Failure patterns every grounding may be asked about (see heuristic.failure_patterns).
BUDGET = "budget"  # the episode ran out of steps
REVISIT = "revisit"  # the same environment action issued three or more times in one episode
FORMAT = "invalid:format"  # a response with no readable action


class Grounding(Protocol):
    name: str  # environment name
    agent_description: str  # who the consolidation prompts speak about ("an embodied household agent")
    task_noun: str  # what a task family is called ("task type", "product category")
    search_per_family: bool  # search facts are keyed by task family (subject == family): scope entries to it

    def search_facts(self, traj: Trajectory) -> list[tuple[str, str]]:
        """(object type, location type) pairs the episode observed (each pair once per episode)."""
        ...

    def skeleton(self, action: str) -> str:
        """`action` with instance-specific parts abstracted; equal skeletons are the same step."""
        ...

    def key_step(self, skeleton: str) -> bool:
        """Whether a step belongs in a procedure (navigation and look-around steps do not)."""
        ...

    def describe_search(self, subject: str, ranked: list[str]) -> str:
        """The text of a search priority: where to look for `subject`, best first."""
        ...

    def mistake_advice(self, pattern: str) -> tuple[str, str] | None:
        """(principle, how_to_avoid) for a failure pattern, or None for the generic wording."""
        ...




class GenericGrounding:
    """Any text environment: numbers abstracted, no search facts, generic wording."""

    name = "generic"
    agent_description = "an agent"
    task_noun = "task type"
    search_per_family = False

    def search_facts(self, traj: Trajectory) -> list[tuple[str, str]]:
        return []

    def skeleton(self, action: str) -> str:
        return re.sub(r"\d+", "N", " ".join(action.lower().split()))

    def key_step(self, skeleton: str) -> bool:
        return bool(skeleton)

    def describe_search(self, subject: str, ranked: list[str]) -> str:
        return f"{subject}: look first at {ranked[0]}" + (f"; then {', '.join(ranked[1:])}" if ranked[1:] else "")

    def mistake_advice(self, pattern: str) -> tuple[str, str] | None:
        return None


def load_grounding(env_name: str) -> Grounding:
    """The grounding registered for `env_name` (`EnvEntry.grounding`), else generic."""
    make = env_part(env_name, "grounding") if env_name in env_names() else None
    return make() if make is not None else GenericGrounding()
