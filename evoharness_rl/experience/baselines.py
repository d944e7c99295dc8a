"""The memory methods' registry (`experience.method` -> its store and update step) and the one bank loader.

    register_memory("mymem", store=MyMemory, updater=MyUpdater)   # a MemoryStore subclass, its update step
    memory_names()                          # what config validation accepts for experience.method
    bank = load_bank(cfg.experience)        # the run's bank or memory: experience.bank, or an empty one
    updater = make_updater(cfg.experience, grounding, generate, "heuristic")   # a baseline's update step

`evoharness` is the BPE Experience bank (`bank.py`), read by the policy through `recall` and consolidated by
`evolution.make_consolidator`. A memory baseline (ExpeL, ReasoningBank, or one registered from outside) is a
`memory.MemoryStore` put into the ReAct agent's prompt at episode start, learning through its own update step.
The built-in baselines are imported when first used; this module is kept apart from `memory.py` (the shared
bases) so that the bases never import the methods built on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

from evoharness_rl.errors import UserError
from evoharness_rl.experience.bank import ExperienceBank
from evoharness_rl.experience.memory import MemoryUpdater

Store = Union[type, Callable[[], type]]  # the class, or a zero-argument function returning it (a lazy import)
UpdaterBuilder = Callable[[Any, Optional[Callable], str, int], MemoryUpdater]  # (grounding, generate, name, max_chars)


@dataclass(frozen=True)
class MemoryMethod:
    """One memory method's parts."""

    store: Store  # the class holding the memory: `cls(capacity)` (empty) and `cls.load(path, capacity=...)`
    updater: Optional[UpdaterBuilder] = None  # a baseline's update step; None: the BPE bank, consolidated by
    # `evolution.make_consolidator`'s consolidators


def _expel_memory() -> type:
    from evoharness_rl.experience.expel import ExpeLMemory

    return ExpeLMemory


def _expel_updater(grounding: Any, generate: Optional[Callable], name: str, max_chars: int) -> MemoryUpdater:
    from evoharness_rl.experience.expel import ExpeLUpdater

    return ExpeLUpdater(grounding, generate, name, max_chars)


def _reasoningbank_memory() -> type:
    from evoharness_rl.experience.reasoningbank import ReasoningBankMemory

    return ReasoningBankMemory


def _reasoningbank_updater(grounding: Any, generate: Optional[Callable], name: str, max_chars: int) -> MemoryUpdater:
    from evoharness_rl.experience.reasoningbank import ReasoningBankUpdater

    return ReasoningBankUpdater(grounding, generate, name, max_chars)


_REGISTRY: dict[str, MemoryMethod] = {
    "evoharness": MemoryMethod(ExperienceBank),
    "expel": MemoryMethod(_expel_memory, _expel_updater),
    "reasoningbank": MemoryMethod(_reasoningbank_memory, _reasoningbank_updater),
}


def register_memory(name: str, store: Store, updater: UpdaterBuilder) -> None:
    """Make `experience.method=<name>` an eval-time memory baseline: `store` a `MemoryStore` subclass (or a function
    returning it), `updater(grounding, generate, name, max_field_chars)` its update step (a `MethodUpdater` subclass
    fits)."""
    if updater is None:
        raise ValueError(f"memory method {name!r} needs an update step: updater(grounding, generate, name, max_chars)")
    _REGISTRY[name] = MemoryMethod(store, updater)


def memory_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def is_baseline(method: str) -> bool:
    """A memory baseline (its memory goes into the prompt; `eval` only), not the BPE Experience bank."""
    return _entry(method).updater is not None


def _entry(method: str) -> MemoryMethod:
    if method not in _REGISTRY:
        raise UserError(f"experience.method={method!r} is not a registered memory method; allowed: "
                        f"{', '.join(_REGISTRY)}")
    return _REGISTRY[method]


def memory_class(method: str) -> type:
    """The class holding `experience.method`'s memory (ExperienceBank for evoharness)."""
    store = _entry(method).store
    return store if isinstance(store, type) else store()


def load_bank(experience_cfg: Any, path: Optional[str | Path] = None, empty: bool = True, env: Optional[str] = None):
    """The run's Experience bank, or a memory baseline's store, of `experience.method`: loaded from `path` (default
    `experience.bank`) with `experience.capacity`; without a file, an empty one, or None where `empty` is False (a
    frozen evaluation without a bank: recall answers that nothing is stored). A baseline's store always exists
    (empty when no file is named) and renders with the experience.memory_k / max_insights / max_example_chars
    settings. A damaged or foreign file fails in one line naming it, and so does an Experience bank of another
    environment than `env` (a bank is tagged with the environment that first uses it)."""
    method = getattr(experience_cfg, "method", "evoharness")
    cls = memory_class(method)
    path = path or experience_cfg.bank
    baseline = is_baseline(method)
    if path:
        bank = cls.load(path, capacity=experience_cfg.capacity)
    elif empty or baseline:
        bank = cls(experience_cfg.capacity)
    else:
        return None
    if baseline:
        bank.view = {"k": experience_cfg.memory_k, "max_insights": experience_cfg.max_insights,
                     "max_example_chars": experience_cfg.max_example_chars}
    elif env is not None:
        bank.claim_env(env, f"experience.bank={path}" if path else None)
    return bank


def make_updater(experience_cfg: Any, grounding: Any, generate: Any | None, name: str) -> MemoryUpdater:
    """The update step of a memory baseline (reached through `evolution.make_consolidator`): `generate` None means
    the method's deterministic (no-LLM) rules, else its prompts through that text callable."""
    entry = _entry(experience_cfg.method)
    if entry.updater is None:
        raise ValueError(f"experience.method={experience_cfg.method} has no update step of its own; "
                         "evolution.make_consolidator builds the Experience bank's consolidators")
    return entry.updater(grounding, generate, name, experience_cfg.max_field_chars)
