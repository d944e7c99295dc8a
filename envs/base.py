"""The environment contract every adapter implements.

An adapter wraps one benchmark (ALFWorld, WebShop, ...) behind five calls:

    env = make_env(cfg)                       # build from the env config
    task_ids = env.task_ids(split)            # fixed, documented order
    family = env.task_family(task_id)         # the task's family without playing it
    task, result = env.reset(task_id, seed)   # -> Task, StepResult
    result = env.step(action)                 # env actions only (strings)
    env.close()

plus three grounding hooks used by the BPE harness:

    belief = env.make_belief()   # a Belief tracker for this env (see harness/belief.py)
    teacher = env.make_teacher(verbs, rate, rng)  # scripted expert that may use BPE verbs
    env.spec                     # prompts, action format, budgets (EnvSpec)

Rules every adapter keeps (checked by tests/envs/test_conformance.py):
- `reset` with the same task id and seed gives the same observation and actions;
- `task_family(task_id)` equals the family `reset(task_id)` reports;
- an invalid or unknown action never raises: it returns a StepResult with
  `invalid=True` and feedback text in `observation`;
- `admissible_actions` are non-empty strings without newlines (may be empty for open
  action spaces);
- `close` releases processes/browsers and is idempotent.
"""

from __future__ import annotations

import abc
import random
from dataclasses import dataclass, field
from typing import Any

from evoharness_rl.harness.belief import Belief


@dataclass
class Task:
    """One task instance: what the agent must do."""

    task_id: str  # stable id, unique within the env (e.g. "valid_seen/pick_and_place_simple-Mug-.../trial_0")
    family: str  # task family / type (ALFWorld task_type, WebShop product category, ...)
    objective: str  # the instruction shown to the policy
    split: str = ""  # split the task came from
    info: dict[str, Any] = field(default_factory=dict)  # adapter-specific extras (JSON-serialisable)


@dataclass
class StepResult:
    """What the environment shows after reset or after one environment action."""

    observation: str  # text shown to the policy (feedback text for invalid actions)
    admissible_actions: list[str]  # actions the env accepts now ([] for open action spaces)
    done: bool = False  # episode over (success, purchase, stop, ...)
    won: bool = False  # task solved
    score: float = 0.0  # task score in [0, 1] (WebShop reward; 1.0/0.0 for ALFWorld)
    invalid: bool = False  # the action was not accepted by the environment
    info: dict[str, Any] = field(default_factory=dict)  # adapter extras (JSON-serialisable)


@dataclass(frozen=True)
class TokenizerText:
    """What an environment adds to `init-model`'s tokenizer training text."""

    system_prompt: str  # shown with every synthetic turn
    turn_template: str  # the per-turn user template (as EnvSpec.turn_template)
    system_prompts: tuple[str, ...]  # added once more on their own (the harness modes' system prompts)
    turn: Any = None  # rng -> (objective, observation, admissible actions, responses): one synthetic turn; None: the
    # system prompts alone

    @classmethod
    def of_spec(cls, spec: "EnvSpec") -> "TokenizerText":
        """The system prompts of `spec` alone (an environment with no synthetic turns to offer)."""
        return cls(spec.system_prompts["adaptive"], spec.turn_template, tuple(spec.system_prompts.values()))


@dataclass(frozen=True)
class EnvSpec:
    """Static, per-environment facts the harness and prompt builder need."""

    name: str  # "alfworld", "webshop", ...
    system_prompts: dict[str, str]  # harness mode ("env_only"|"always_on"|"adaptive") -> system prompt
    turn_template: str  # per-turn user template with {objective} {observation} {actions} {history} {harness_views}
    action_format: str = "tags"  # "tags": <think>..</think><action>..</action>; "fenced": ```action```
    actions_label: str = "ADMISSIBLE COMMANDS"  # heading for the admissible action list
    task_noun: str = "task type"  # used by consolidation prompts ("task type", "product category")
    agent_description: str = "an agent"  # used by consolidation prompts
    prompt_version: str = "1"  # bump when prompts change: SFT data built with another version is rejected
    default_context: str = "per_turn"  # the context style the paper uses for this env
    family_columns: dict[str, str] = field(default_factory=dict)  # family -> report column title, in the paper's order

    def versioned(self, prompt_style: str = "paper") -> str:
        """The prompt version of episodes played with `prompt_style` (paper | compact)."""
        return self.prompt_version if prompt_style == "paper" else f"{self.prompt_version}+{prompt_style}"


class Environment(abc.ABC):
    """Base class of every environment adapter."""

    spec: EnvSpec

    @abc.abstractmethod
    def task_ids(self, split: str) -> list[str]:
        """Task ids of `split` in a fixed order (sorted unless the benchmark defines one)."""

    def task_family(self, task_id: str) -> str:
        """The family of `task_id` (equal to `reset(task_id)[0].family`); adapters override it with a cheap lookup."""
        return self.reset(task_id)[0].family

    @abc.abstractmethod
    def reset(self, task_id: str, seed: int = 0) -> tuple[Task, StepResult]:
        """Start the episode for `task_id`; deterministic given (task_id, seed)."""

    @abc.abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply one environment action. Never raises on bad actions (invalid=True instead)."""

    @abc.abstractmethod
    def make_belief(self) -> Belief:
        """A fresh Belief tracker grounded in this environment's observations."""

    @abc.abstractmethod
    def make_teacher(self, enabled_verbs: tuple[str, ...], harness_rate: float, rng: random.Random) -> "Teacher":
        """A scripted expert for the current episode (call after reset).

        `enabled_verbs` are the BPE verbs it may use (empty: environment actions only);
        `harness_rate` in [0, 1] scales how often it uses them, so SFT data is not one
        fixed pattern; `rng` makes its choices reproducible.
        """

    def close(self) -> None:
        """Release resources; safe to call twice."""


class Teacher(abc.ABC):
    """A scripted expert for one episode.

    It writes full responses in the env's action format (e.g.
    "<think>..</think><action>go to shelf 1</action>") and may interleave BPE
    actions (track/commit/recall/note) when the harness mode is `adaptive`.
    """

    @abc.abstractmethod
    def respond(self) -> str:
        """The next response (raw text, exactly as a model would write it)."""

    def slips(self) -> list[tuple[str, str]]:
        """Plausible mistakes in the current state, as (think, env action) pairs.

        Noise-injected collection (`policy.teacher_slip_rate`) plays one of them that the
        environment does not list as admissible, so the state is unchanged and the
        teacher carries on: the SFT data then shows how to recover after a rejected
        action (the slip itself is an invalid turn, which SFT never trains on).
        Default: none.
        """
        return []

    def observe(self, action_kind: str, action: str, result: str) -> None:
        """Told what happened after its last response (kind: env|harness|invalid)."""
