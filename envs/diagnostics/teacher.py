"""The diagnostic tasks' scripted teacher: an oracle that calls the harness at random.

It always knows the answer (the code, the switches already on, the door that opens), so whether
it succeeds never depends on its harness calls. At every turn with a step to spare it calls its
task's verb with probability `harness_rate`, at the decision point and elsewhere alike (never two
calls in a row). When a call's view holds the answer, it answers as the view says, so its traces
show how to copy from a view; they do not show when a call pays. That is for RL to find.
"""

from __future__ import annotations

import random
import re

from evoharness_rl.envs.base import Teacher

_ON = re.compile(r"Switch (\w+) is now on")


class RandomCallTeacher(Teacher):
    def __init__(self, env, enabled_verbs: tuple[str, ...], harness_rate: float, rng: random.Random):
        self.env, self.rate, self.rng = env, harness_rate, rng
        kind = env.task.info["task"]
        self.verb = env.task.info["verb"] if env.task.info["verb"] in enabled_verbs else None
        self.kind = kind
        self.spare = env.game.spare
        self.called = False  # the previous response was a harness call
        self.last_obs = ""

    def respond(self) -> str:
        if self.verb and self.spare > 0 and not self.called and self.rng.random() < self.rate:
            self.spare -= 1
            self.called = True
            return f"<action>{self.verb} [{self._argument()}]</action>"
        self.called = False
        return f"<action>{self.env.game.answer()}</action>"

    def _argument(self) -> str:
        if self.kind == "memory":
            return "code"
        if self.kind == "experience":
            return "which door opens"
        match = _ON.search(self.last_obs)
        return f"{match.group(1)} is on" if match else "turn on each switch once"

    def observe(self, action_kind: str, action: str, result: str) -> None:
        if action_kind == "env":
            self.last_obs = result
