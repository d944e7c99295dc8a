"""A small counting environment, a warm-started tiny policy and tiny GRPO configs for tests.

A plain module (not conftest.py): pool workers and the kill-and-resume subprocess import
it by name. Task "<family>/<n>" is solved by the env actions "step 1", ..., "step n" in
order; anything else is invalid. The tiny model is first taught the response format
(a few SFT steps on a mixture of env and harness actions), so that sampled episodes
differ in outcome, harness use and invalid actions: GRPO groups then have reward variance.
"""

from __future__ import annotations

import time
from pathlib import Path

from evoharness_rl.envs.base import Environment, StepResult, Task, Teacher
from evoharness_rl.harness.belief import Belief
from tests.fakes import harness_spec

SYSTEM = "You count steps. Answer as <think>...</think><action>ACTION</action>."
SPEC = harness_spec(
    "count", SYSTEM,
    "OBJECTIVE: {objective}\nOBSERVATION: {observation}\nACTIONS: {actions}\nHISTORY:\n{history}\n{harness_views}",
)
FAMILIES = ("a", "b")
RESPONSES = (
    ["<action>step 1</action>"] * 4
    + ["<action>step 2</action>"] * 3
    + ["<action>look</action>", "<action>commit [count]</action>", "<action>track [steps]</action>",
       "<action>recall [count]</action>", "<action>note [count]</action>"]
)


def make_count_env(tasks_per_family: int = 3, marker_dir: str | None = None) -> "CountEnv":
    return CountEnv(tasks_per_family, marker_dir)


def build_count_env(env_cfg=None) -> "CountEnv":
    """The registry's builder signature (`register_env("count", "tests.fakes.count:build_count_env")`)."""
    return CountEnv()


class CountEnv(Environment):
    spec = SPEC

    def __init__(self, tasks_per_family: int = 3, marker_dir: str | None = None):
        self.tasks_per_family = tasks_per_family
        self.marker_dir = marker_dir  # if set, every reset leaves a file there (tests see a rollout start)
        self.progress = self.needed = 0

    def task_ids(self, split: str) -> list[str]:
        return [f"{fam}/{1 + i % 2}-{i}" for fam in FAMILIES for i in range(self.tasks_per_family)]

    def reset(self, task_id: str, seed: int = 0) -> tuple[Task, StepResult]:
        if self.marker_dir:
            Path(self.marker_dir, f"reset-{time.time_ns()}").touch()
        family, rest = task_id.split("/")
        self.progress, self.needed = 0, int(rest.split("-")[0])
        task = Task(task_id=task_id, family=family, objective=f"do {self.needed} steps", split="train")
        return task, self._result("You are at the start.")

    def step(self, action: str) -> StepResult:
        if action == "look":
            return self._result(f"You did {self.progress} of {self.needed} steps.")
        if action != f"step {self.progress + 1}":
            return self._result("Nothing happens.", invalid=True)
        self.progress += 1
        won = self.progress >= self.needed
        return self._result(f"You did step {self.progress}.", done=won, won=won)

    def _result(self, text: str, done: bool = False, won: bool = False, invalid: bool = False) -> StepResult:
        actions = [] if done else [f"step {self.progress + 1}", "look"]
        return StepResult(text, actions, done=done, won=won, score=float(won), invalid=invalid)

    def make_belief(self) -> Belief:
        return CountBelief()

    def make_teacher(self, enabled_verbs, harness_rate, rng) -> Teacher:
        return CountTeacher(self)


class CountBelief(Belief):
    def reset(self, task, first) -> None:
        self.seen = [first.observation]

    def update(self, action, result) -> None:
        self.seen.append(result.observation)

    def track(self, query: str) -> str:
        return f"last: {self.seen[-1]}"

    def render(self) -> str:
        return self.seen[-1]


class CountTeacher(Teacher):
    def __init__(self, env: CountEnv):
        self.env = env

    def respond(self) -> str:
        return f"<think>next</think><action>step {self.env.progress + 1}</action>"


# ------------------------------------------------------------------------------ policy


def warm_start(model_dir: Path, out_dir: Path, steps: int = 50, seed: int = 0) -> Path:
    """A few SFT steps on real episode prompts with a mixture of responses; saved to `out_dir`."""
    from tests.fakes.policy import warm_start as shared_warm_start

    return shared_warm_start(model_dir, out_dir, CountEnv(), RESPONSES, modes=("adaptive", "env_only"), steps=steps,
                             seed=seed)


# ------------------------------------------------------------------------------ configs


def tiny_config(model_dir, out_dir, **grpo):
    """A Config for a 2-3 update CPU GRPO run on the count env."""
    from evoharness_rl.config import Config

    cfg = Config()
    cfg.command, cfg.device, cfg.seed = "grpo", "cpu", 0
    cfg.out_dir = str(out_dir)
    cfg.model.path = str(model_dir)
    cfg.env.max_steps_train, cfg.env.max_steps_eval, cfg.env.num_workers = 4, 4, 1
    cfg.policy.backend, cfg.policy.max_new_tokens, cfg.policy.max_prompt_tokens = "hf", 24, 1024
    cfg.policy.batch_size = 16
    cfg.experience.consolidator = "heuristic"
    cfg.logger.progress = False
    cfg.reward.anneal_updates = 4
    settings = dict(updates=2, prompts_per_update=2, group_size=4, mini_batch_trajectories=4, micro_batch_samples=8,
                    learning_rate=1e-3, eval_every=0, eval_limit=2, save_every=1)
    settings.update(grpo)
    for key, value in settings.items():
        setattr(cfg.grpo, key, value)
    return cfg


def run_count_grpo(model_dir: str, out_dir: str, resume: bool = False, policy: dict | None = None,
                   marker_dir: str | None = None, experience: dict | None = None, tasks_per_family: int = 3,
                   **grpo) -> str:
    """Entry point for subprocess tests: a tiny GRPO run on the count env (`policy`, `experience`: PolicyConfig and
    ExperienceConfig overrides)."""
    import functools

    from evoharness_rl.grpo.trainer import run_grpo

    cfg = tiny_config(model_dir, out_dir, **grpo)
    cfg.resume = resume
    for key, value in (policy or {}).items():
        setattr(cfg.policy, key, value)
    for key, value in (experience or {}).items():
        setattr(cfg.experience, key, value)
    return str(run_grpo(cfg, env_factory=functools.partial(make_count_env, tasks_per_family, marker_dir=marker_dir)))
