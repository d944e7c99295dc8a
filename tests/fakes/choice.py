"""`choice`: the smallest environment in which a policy can learn something, for the proof that GRPO learns.

Task "choice/<k>" asks for one colour ("press the green button"); the observation shows
three buttons in an order that depends on k, the admissible actions are "press <colour>"
for each. Pressing a button ends the episode: won when it was the asked-for colour.
Anything else is invalid. The family is the asked-for colour. `targets` lists the colours
asked for (task k asks for targets[k % len(targets)]).

`warm_choice_policy` gives the tiny model the response format with a uniformly random
colour (a few supervised steps): it starts at about one success in three, so a rise to
near-certain success is what the GRPO trainer taught it.

Measured (tiny model, 30 prompts x 4 per update, lr 1e-3): with one target the policy
goes from 0.30 to 0.9 within about 10 updates; with three targets (the policy must copy
the colour from the objective) it stays at chance for 20 updates -- learning to attend to
the objective from a reward alone is beyond this budget for a 0.8M model trained from
scratch, so the CI proof uses one target.
"""

from __future__ import annotations

import random
from pathlib import Path

from evoharness_rl.envs.base import Environment, EnvSpec, StepResult, Task, Teacher
from evoharness_rl.harness.belief import Belief

COLOURS = ("red", "green", "blue")
SYSTEM = "Press the button the objective asks for. Answer as <action>press COLOUR</action>."
SPEC = EnvSpec(
    name="choice",
    system_prompts={mode: SYSTEM for mode in ("env_only", "always_on", "adaptive")},
    turn_template="OBJECTIVE: {objective}\nOBSERVATION: {observation}\nACTIONS: {actions}\n{history}{harness_views}",
)


def make_choice_env(env_cfg=None, tasks: int = 30, targets: tuple[str, ...] = ("green",)) -> "ChoiceEnv":
    return ChoiceEnv(tasks, targets)


class ChoiceEnv(Environment):
    spec = SPEC

    def __init__(self, tasks: int = 30, targets: tuple[str, ...] = ("green",)):
        self.tasks = tasks
        self.targets = targets
        self.target = ""
        self.buttons: list[str] = []

    def task_ids(self, split: str) -> list[str]:
        return [f"choice/{k}" for k in range(self.tasks)]

    def task_family(self, task_id: str) -> str:
        return self.targets[int(task_id.split("/")[1]) % len(self.targets)]

    def reset(self, task_id: str, seed: int = 0) -> tuple[Task, StepResult]:
        k = int(task_id.split("/")[1])
        self.target = self.task_family(task_id)
        self.buttons = list(COLOURS)
        random.Random(k).shuffle(self.buttons)
        task = Task(task_id=task_id, family=self.target, objective=f"press the {self.target} button", split="train")
        return task, self._result(f"You see a {self.buttons[0]}, a {self.buttons[1]} and a {self.buttons[2]} button.")

    def step(self, action: str) -> StepResult:
        if action not in self._actions():
            return self._result("Nothing happens.", invalid=True)
        won = action == f"press {self.target}"
        return StepResult("The button clicks.", [], done=True, won=won, score=float(won))

    def _actions(self) -> list[str]:
        return [f"press {colour}" for colour in self.buttons]

    def _result(self, text: str, invalid: bool = False) -> StepResult:
        return StepResult(text, self._actions(), invalid=invalid)

    def make_belief(self) -> Belief:
        return _NoBelief()

    def make_teacher(self, enabled_verbs, harness_rate, rng) -> Teacher:
        return _RandomPresser(self, rng)


class _NoBelief(Belief):
    def reset(self, task, first) -> None: ...

    def update(self, action, result) -> None: ...

    def track(self, query: str) -> str:
        return "nothing tracked"

    def render(self) -> str:
        return ""


class _RandomPresser(Teacher):
    def __init__(self, env: ChoiceEnv, rng: random.Random):
        self.env, self.rng = env, rng

    def respond(self) -> str:
        return f"<action>press {self.rng.choice(COLOURS)}</action>"


def warm_choice_policy(model_dir: Path, out_dir: Path, steps: int = 120, seed: int = 0) -> Path:
    """The response format with a uniformly random colour, taught by a few supervised steps."""
    from tests.fakes.policy import warm_start

    env = ChoiceEnv()
    responses = [f"<action>press {colour}</action>" for colour in COLOURS]
    return warm_start(model_dir, out_dir, env, responses, modes=("env_only",), steps=steps, seed=seed)
