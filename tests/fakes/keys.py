"""A tiny deterministic environment for harness unit tests (the real adapters are tested in tests/envs)."""

from __future__ import annotations

import random

from evoharness_rl.envs.base import Environment, EnvSpec, StepResult, Task, Teacher
from evoharness_rl.harness.belief import Belief

SPEC = EnvSpec(
    name="fake",
    system_prompts={"env_only": "SYS env_only", "always_on": "SYS always_on", "adaptive": "SYS adaptive"},
    turn_template="OBJECTIVE: {objective}\nOBSERVATION: {observation}\nACTIONS: {actions}\nHISTORY:\n{history}\n{harness_views}",
)


class KeyEnv(Environment):
    """Find the key in one of three boxes, then `done`."""

    spec = SPEC

    def __init__(self):
        self.closed = False

    def task_ids(self, split):
        return [f"{split}/{i}" for i in range(3)]

    def reset(self, task_id, seed=0):
        self.key_box = int(task_id.rsplit("/", 1)[1]) % 3
        self.has_key = False
        task = Task(task_id=task_id, family="keys", objective="find the key and say done", split=task_id.split("/")[0])
        return task, StepResult("You see boxes 0, 1, 2.", self._actions())

    def _actions(self):
        return [f"open box {i}" for i in range(3)] + ["done"]

    def step(self, action):
        if action not in self._actions():
            return StepResult("Nothing happens.", self._actions(), invalid=True)
        if action == "done":
            return StepResult("Bye.", [], done=True, won=self.has_key, score=float(self.has_key))
        box = int(action.split()[-1])
        if box == self.key_box:
            self.has_key = True
            return StepResult(f"Box {box} holds a key. You take it.", self._actions())
        return StepResult(f"Box {box} is empty.", self._actions())

    def make_belief(self):
        return KeyBelief()

    def make_teacher(self, enabled_verbs, harness_rate, rng):
        return KeyTeacher(self.key_box, enabled_verbs)

    def close(self):
        self.closed = True


class KeyBelief(Belief):
    def reset(self, task, first):
        self.opened = []

    def update(self, action, result):
        if action.startswith("open"):
            self.opened.append(action.split()[-1])

    def track(self, query):
        return "opened boxes: " + (", ".join(self.opened) or "none")

    def render(self):
        return self.track("")

    def auto_progress(self):
        return [("open boxes", bool(self.opened))]


class KeyTeacher(Teacher):
    def __init__(self, key_box, verbs):
        self.plan = (["<action>commit [find key]</action>"] if "commit" in verbs else []) + [
            f"<think>the key is in box {self.key_box if False else key_box}</think><action>open box {key_box}</action>",
            "<action>done</action>",
        ]
        self.seen = []

    def respond(self):
        return self.plan.pop(0)

    def slips(self):
        return [("box 0 again", "open box 0"), ("the key is surely in box 9", "open box 9")]  # only box 9 is rejected

    def observe(self, kind, action, result):
        self.seen.append((kind, action))


class StaticExperience:
    def __init__(self):
        self.calls = []

    def recall(self, query, family, k):
        self.calls.append((query, family, k))
        return f"hint for {query}", [f"id-{len(self.calls)}"]


def make_key_env():
    return KeyEnv()


__all__ = ["KeyEnv", "KeyBelief", "KeyTeacher", "StaticExperience", "make_key_env", "random"]
