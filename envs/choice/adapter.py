"""The `choice` environment (package docstring): three buttons, press the one the objective names."""

from __future__ import annotations

import random

from evoharness_rl.envs.base import Environment, EnvSpec, StepResult, Task, Teacher
from evoharness_rl.harness.belief import Belief

COLOURS = ("red", "green", "blue")
SYSTEM = "Press the button the objective asks for. Answer as <action>press COLOUR</action>."
SPEC = EnvSpec(
    name="choice",
    system_prompts={mode: SYSTEM for mode in ("env_only", "always_on", "adaptive")},
    turn_template="OBJECTIVE: {objective}\nOBSERVATION: {observation}\nACTIONS: {actions}\n{history}{harness_views}",
    task_noun="colour",
    family_columns={colour: colour.capitalize() for colour in COLOURS},
)


class ChoiceEnv(Environment):
    spec = SPEC

    def __init__(self, tasks: int = 30, targets: tuple[str, ...] = COLOURS):
        self.tasks = tasks  # tasks per split
        self.targets = targets  # colours asked for, task k asks for targets[k % len(targets)]
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
        return _Presser(self)


class _NoBelief(Belief):
    """Nothing to track: the one observation is the whole state."""

    def reset(self, task, first) -> None: ...

    def update(self, action, result) -> None: ...

    def track(self, query: str) -> str:
        return "nothing tracked"

    def render(self) -> str:
        return ""


class _Presser(Teacher):
    """The scripted expert: presses the asked-for button."""

    def __init__(self, env: ChoiceEnv):
        self.env = env

    def respond(self) -> str:
        return f"<action>press {self.env.target}</action>"
