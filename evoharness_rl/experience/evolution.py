"""Where consolidation plugs in: the consolidator factory and the two evaluation protocols.

Training (GRPO), at each batch boundary:

    snapshot = bank.snapshot()                       # frozen for the whole rollout batch
    trajectories = rollouts(..., experience=snapshot)
    report = consolidate(bank, trajectories, consolidator, update_index=u)
    bank.save(path)

Evaluation (`experience.evolve`):

- `frozen`: every episode reads the checkpoint's bank; notes are discarded; nothing is
  consolidated (EvoHarness-RL checkpoints).
- `online`: the bank starts from `experience.bank` (or empty) and is consolidated after
  every window of `experience.window` completed episodes; episodes of a window only see
  edits made from earlier windows (EvoHarness-Base).

    evolution = make_evolution(cfg.experience, bank, consolidator)
    for window in evolution.windows(task_ids):
        trajectories = run(window, experience=evolution.snapshot())
        evolution.observe(trajectories)

Both expose `fingerprint()` for the evaluation fingerprint (it includes the bank hash).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypeVar

from evoharness_rl.experience.bank import ExperienceBank
from evoharness_rl.experience.consolidation import Consolidator, ConsolidationReport, NoConsolidation, consolidate
from evoharness_rl.experience.grounding import load_grounding
from evoharness_rl.experience.heuristic import HeuristicConsolidator
from evoharness_rl.experience.history import save_cycle
from evoharness_rl.experience.llm import LLMConsolidator, openai_generate_text
from evoharness_rl.experience.baselines import is_baseline, make_updater
from evoharness_rl.experience.memory import MemoryUpdater, NoUpdate
from evoharness_rl.experience.operations import OpLimits
from evoharness_rl.experience.retrieval import BankSnapshot
from evoharness_rl.rollout.trajectory import Trajectory

T = TypeVar("T")


def make_consolidator(experience_cfg: Any, env_name: str, policy_generate: Callable[[list[dict]], str] | None = None
                      ) -> Consolidator | MemoryUpdater:
    """The consolidator `experience.consolidator` names; for a memory baseline (`experience.method` expel or
    reasoningbank), that method's update step, by rules (heuristic) or by its prompts (openai, self).

    `policy_generate(messages) -> text` runs the current policy (required for `self`);
    `openai` builds a client from experience.base_url / model_name / api_key_env.
    """
    kind = experience_cfg.consolidator
    grounding = load_grounding(env_name)
    baseline = is_baseline(getattr(experience_cfg, "method", "evoharness"))  # a memory baseline's update step
    if kind == "none":
        return NoUpdate() if baseline else NoConsolidation()
    if kind == "heuristic":
        return make_updater(experience_cfg, grounding, None, "heuristic") if baseline else HeuristicConsolidator(grounding)
    if kind == "openai":
        generate = openai_generate_text(
            experience_cfg.model_name, experience_cfg.base_url, experience_cfg.api_key_env,
            experience_cfg.max_new_tokens, experience_cfg.max_retries, experience_cfg.request_timeout_s)
        name = f"openai:{experience_cfg.model_name}"
    elif kind == "self":
        if policy_generate is None:
            raise ValueError("experience.consolidator=self needs the policy's generation backend "
                             "(available in grpo/eval runs; offline `consolidate` can use consolidator=openai with a vLLM server)")
        generate, name = policy_generate, "self"
    else:
        raise ValueError(f"experience.consolidator={kind!r} is not valid; allowed: none, heuristic, openai, self")
    if baseline:
        return make_updater(experience_cfg, grounding, generate, name)
    return LLMConsolidator(generate, grounding.agent_description, grounding.task_noun, experience_cfg.fused,
                           experience_cfg.max_field_chars, experience_cfg.max_prompt_chars, name, grounding.describe_search)


class FrozenEvolution:
    """Evaluation with a fixed bank: one snapshot for every episode, notes discarded."""

    mode = "frozen"

    def __init__(self, bank: ExperienceBank):
        self.bank = bank
        self._snapshot = bank.snapshot()
        self.reports: list[ConsolidationReport] = []

    def windows(self, items: Sequence[T]) -> Iterator[list[T]]:
        yield list(items)

    def snapshot(self) -> BankSnapshot:
        return self._snapshot

    def observe(self, trajectories: list[Trajectory]) -> list[ConsolidationReport]:
        return []  # a frozen bank learns nothing from evaluation episodes

    def fingerprint(self) -> dict[str, Any]:
        return {"experience": "frozen", "bank_hash": self._snapshot.content_hash}


class OnlineEvolution:
    """Inference-time evolution: consolidate after every `window` completed episodes."""

    mode = "online"

    def __init__(self, bank: ExperienceBank, consolidator: Consolidator, window: int,
                 limits: OpLimits | None = None, save_path: str | Path | None = None, log: Any = None):
        if window < 1:
            raise ValueError(f"window={window} must be >= 1 (episodes per consolidation)")
        self.bank, self.consolidator, self.window = bank, consolidator, window
        self.limits, self.save_path, self.log = limits, save_path, log
        self.initial_hash = bank.content_hash()
        self._snapshot = bank.snapshot()
        self._buffer: list[Trajectory] = []
        self.reports: list[ConsolidationReport] = []

    def windows(self, items: Sequence[T]) -> Iterator[list[T]]:
        """`items` in consecutive windows of `window` (the evaluation's fixed task order)."""
        for start in range(0, len(items), self.window):
            yield list(items[start : start + self.window])

    def snapshot(self) -> BankSnapshot:
        """The snapshot episodes starting now must use (changes only between windows)."""
        return self._snapshot

    def observe(self, trajectories: list[Trajectory]) -> list[ConsolidationReport]:
        """Buffer completed episodes; consolidate each full window (in arrival order of windows)."""
        self._buffer.extend(trajectories)
        new = []
        while len(self._buffer) >= self.window:
            batch, self._buffer = self._buffer[: self.window], self._buffer[self.window :]
            new.append(self._consolidate(batch))
        return new

    def flush(self) -> list[ConsolidationReport]:
        """Consolidate a last, partial window (e.g. to save the final bank)."""
        if not self._buffer:
            return []
        batch, self._buffer = self._buffer, []
        return [self._consolidate(batch)]

    def _consolidate(self, batch: list[Trajectory]) -> ConsolidationReport:
        report = consolidate(self.bank, batch, self.consolidator, limits=self.limits, log=self.log)
        self.reports.append(report)
        if self.save_path is not None:
            save_cycle(self.bank, report, self.save_path)  # and history.jsonl beside it
        self._snapshot = self.bank.snapshot()
        return report

    def fingerprint(self) -> dict[str, Any]:
        return {"experience": "online", "initial_bank_hash": self.initial_hash, "window": self.window,
                "consolidator": self.consolidator.name}


def make_evolution(experience_cfg: Any, bank: ExperienceBank, consolidator: Consolidator | None = None,
                   save_path: str | Path | None = None, log: Any = None) -> FrozenEvolution | OnlineEvolution:
    """The evaluation protocol `experience.evolve` selects."""
    if experience_cfg.evolve == "frozen":
        return FrozenEvolution(bank)
    if experience_cfg.evolve == "online":
        if consolidator is None:
            raise ValueError("experience.evolve=online needs a consolidator (make_consolidator(...))")
        limits = OpLimits(max_field_chars=experience_cfg.max_field_chars)
        return OnlineEvolution(bank, consolidator, experience_cfg.window, limits, save_path, log)
    raise ValueError(f"experience.evolve={experience_cfg.evolve!r} is not valid; allowed: frozen, online")
