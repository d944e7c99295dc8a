"""The diagnostic tasks' scripted teacher: an oracle that calls the harness at random.

It always knows the answer (the code, the switch still off, the door that opens), so whether it
succeeds never depends on its harness calls. Before each of its moves it calls its task's verb
with probability `harness_rate`, independently of where it is (at most as many calls as the
budget has steps to spare, a uniformly random subset when more were drawn): at the decision point
and elsewhere alike. When a call's view holds the answer, the answer agrees with it, so its traces
show how to copy from a view; they do not show when a call pays. That is for RL to find.
"""

from __future__ import annotations

import random
import re

from evoharness_rl.envs.base import Teacher

_STILL_OFF = re.compile(r"^Still off: (.+?)\. Switch \w+ is now on")
# A search query (experience/retrieval.py's "where is X" form), so recall ranks only the vault's search priority and
# not the bank's mistakes: asked "which door opens", BM25 put "Mistake: repeating 'open oak door' ..." (a general
# entry GRPO's own repeats taught the bank) above the vault's door at recall_k=1, and GRPO dropped recall.
RECALL_QUERY = "where is the door that opens"


class RandomCallTeacher(Teacher):
    def __init__(self, env, enabled_verbs: tuple[str, ...], harness_rate: float, rng: random.Random):
        self.env = env
        self.kind = env.task.info["task"]
        self.verb = env.task.info["verb"] if env.task.info["verb"] in enabled_verbs else None
        moves = env.game.budget - env.game.spare
        drawn = [i for i in range(moves) if rng.random() < harness_rate]
        self.calls_before = set(rng.sample(drawn, min(len(drawn), env.game.spare)))  # move indices preceded by a call
        self.move = 0  # moves made so far
        self.called = False  # this move's call is made
        self.last_obs = ""

    def respond(self) -> str:
        if self.verb and self.move in self.calls_before and not self.called:
            self.called = True
            return f"<action>{self.verb} [{self._argument()}]</action>"
        return f"<action>{self.env.game.answer()}</action>"

    def _argument(self) -> str:
        if self.kind == "memory":
            return "code"
        if self.kind == "experience":
            return RECALL_QUERY
        match = _STILL_OFF.search(self.last_obs)
        return f"turn on {match.group(1)}" if match else "turn on each switch once"

    def observe(self, action_kind: str, action: str, result: str) -> None:
        if action_kind == "env":
            self.move += 1
            self.called = False
            self.last_obs = result
