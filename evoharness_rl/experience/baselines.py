"""The memory baselines' registry: `experience.method` -> its store and its update step.

Kept apart from `memory.py` (the shared bases) so that the bases never import the methods built on them.
"""

from __future__ import annotations

from typing import Any

from evoharness_rl.experience.memory import MemoryStore, MemoryUpdater


def memory_class(method: str) -> type[MemoryStore]:
    """The store of `experience.method` (expel | reasoningbank)."""
    if method == "expel":
        from evoharness_rl.experience.expel import ExpeLMemory

        return ExpeLMemory
    if method == "reasoningbank":
        from evoharness_rl.experience.reasoningbank import ReasoningBankMemory

        return ReasoningBankMemory
    raise ValueError(f"experience.method={method!r} has no memory store; allowed: expel, reasoningbank")


def load_memory(experience_cfg: Any) -> MemoryStore:
    """The memory `experience.bank` points at, else an empty one, of `experience.method`."""
    cls = memory_class(experience_cfg.method)
    store = cls.load(experience_cfg.bank, capacity=experience_cfg.capacity) if experience_cfg.bank \
        else cls(experience_cfg.capacity)
    store.view = {"k": experience_cfg.memory_k, "max_insights": experience_cfg.max_insights,
                  "max_example_chars": experience_cfg.max_example_chars}
    return store


def make_updater(experience_cfg: Any, grounding: Any, generate: Any | None, name: str) -> MemoryUpdater:
    """The update step of `experience.method` (reached through `evolution.make_consolidator`): `generate` None means
    the method's deterministic (no-LLM) rules, else its prompts through that text callable."""
    if experience_cfg.method == "expel":
        from evoharness_rl.experience.expel import ExpeLUpdater

        return ExpeLUpdater(grounding, generate, name, experience_cfg.max_field_chars)
    if experience_cfg.method == "reasoningbank":
        from evoharness_rl.experience.reasoningbank import ReasoningBankUpdater

        return ReasoningBankUpdater(grounding, generate, name, experience_cfg.max_field_chars)
    raise ValueError(f"experience.method={experience_cfg.method!r} has no update step; allowed: expel, reasoningbank")
