"""A tiny, fast fake environment (+ Belief + Teacher) for rollout and eval unit tests.

It lives in a plain module (not conftest.py) because pool workers are separate
processes: they unpickle `functools.partial(make_fake_env, ...)` by importing this
module by name. The real adapters (ALFWorld, WebShop) are tested through the same
code in the integration tests.

A task "<family>/<n>" is solved by the env actions "step 1", ..., "step n" in order.
Task families starting with "crash", "segv", "hang" or "raise" misbehave on their
first step (os._exit, SIGSEGV, sleep forever, exception) to test worker failures; a
"loading" task takes LOADING_S seconds to reset, like a game load.
"""

from __future__ import annotations

import gc
import os
import random
import itertools
import signal
import time

from evoharness_rl.envs.base import Environment, StepResult, Task, Teacher
from evoharness_rl.harness.belief import Belief
from tests.fakes import harness_spec

SYSTEM = "You solve fake tasks. Answer as <think>...</think><action>ACTION</action>."
SPEC = harness_spec(
    "fake", SYSTEM,
    "OBJECTIVE: {objective}\nOBSERVATION: {observation}\nADMISSIBLE COMMANDS: {actions}\nPREVIOUS ACTIONS:\n{history}\n"
    "{harness_views}",
)
FAMILIES = ("pick", "clean", "heat")
LOADING_S = 3.0  # reset time of a "loading/<n>" task
_INSTANCES = itertools.count(1)  # per process: tells tests whether env instances are reused


def make_fake_env(tasks_per_family: int = 4, step_delay_s: float = 0.0, bad_tasks: tuple[str, ...] = ()) -> "FakeEnv":
    return FakeEnv(tasks_per_family, step_delay_s, bad_tasks)


class FakeEnv(Environment):
    spec = SPEC

    def __init__(self, tasks_per_family: int = 4, step_delay_s: float = 0.0, bad_tasks: tuple[str, ...] = ()):
        self.tasks_per_family = tasks_per_family
        self.step_delay_s = step_delay_s
        self.bad_tasks = bad_tasks
        self.task: Task | None = None
        self.progress = 0
        self.needed = 0
        self.closed = False
        self.instance = next(_INSTANCES)

    def task_ids(self, split: str) -> list[str]:
        ids = [f"{fam}/{i + 1}" for i in range(self.tasks_per_family) for fam in FAMILIES]
        return ids + list(self.bad_tasks)

    def reset(self, task_id: str, seed: int = 0) -> tuple[Task, StepResult]:
        family, n = task_id.split("/")
        if family == "loading":
            time.sleep(LOADING_S)
        self.task = Task(task_id=task_id, family=family, objective=f"do {n} steps", split="valid")
        self.progress, self.needed = 0, int(n)
        return self.task, self._result("You are at the start.")

    def step(self, action: str) -> StepResult:
        self._misbehave()
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        if action == "look":
            return self._result(f"You have done {self.progress} of {self.needed} steps.")
        if action != f"step {self.progress + 1}":
            return self._result("Nothing happens.", invalid=True)
        self.progress += 1
        won = self.progress >= self.needed
        return self._result(f"You did step {self.progress}.", done=won, won=won)

    def _misbehave(self) -> None:
        family = self.task.family if self.task else ""
        if family.startswith("crash"):
            os._exit(3)
        if family.startswith("segv"):
            os.kill(os.getpid(), signal.SIGSEGV)
        if family.startswith("hang"):
            time.sleep(3600)
        if family.startswith("raise"):
            raise RuntimeError("fake env failure")

    def _result(self, text: str, done: bool = False, won: bool = False, invalid: bool = False) -> StepResult:
        actions = [f"step {self.progress + 1}", "look"] if not done else []
        # hash: which PYTHONHASHSEED the worker has; gc: its garbage-collector thresholds
        info = {"instance": self.instance, "hash": hash("evoharness"), "gc": gc.get_threshold()}
        return StepResult(text, actions, done=done, won=won, score=float(won), invalid=invalid, info=info)

    def make_belief(self) -> Belief:
        return FakeBelief()

    def make_teacher(self, enabled_verbs: tuple[str, ...], harness_rate: float, rng: random.Random) -> Teacher:
        return FakeTeacher(self, enabled_verbs, harness_rate, rng)

    def close(self) -> None:
        self.closed = True


class FakeBelief(Belief):
    def reset(self, task, first) -> None:
        self.seen: list[str] = [first.observation]

    def update(self, action, result) -> None:
        self.seen.append(f"{action} -> {result.observation}")

    def track(self, query: str) -> str:
        return f"{len(self.seen)} observations; last: {self.seen[-1]}"

    def render(self) -> str:
        return self.seen[-1]


class FakeTeacher(Teacher):
    """Solves the task; uses the enabled harness verbs now and then (rate-scaled, seeded)."""

    def __init__(self, env: FakeEnv, verbs: tuple[str, ...], rate: float, rng: random.Random):
        self.env, self.verbs, self.rate, self.rng = env, verbs, rate, rng

    def respond(self) -> str:
        if self.verbs and self.rng.random() < self.rate:
            verb = self.rng.choice(self.verbs)
            arg = {"track": "steps", "commit": f"do step {self.env.progress + 1}"}.get(verb, "fake tasks")
            return f"<think>use the harness</think><action>{verb} [{arg}]</action>"
        return f"<think>next</think><action>step {self.env.progress + 1}</action>"


# ----------------------------------------------------------------------- fake backends

from evoharness_rl.engines.base import Completion, GenerationBackend  # noqa: E402


class TeacherBackend(GenerationBackend):
    """Text backend that answers with the scripted teacher's response (like engines.scripted)."""

    uses_tokens = False
    needs_teacher = True

    def __init__(self, fail_keys: tuple[str, ...] = ()):
        self.fail_keys = fail_keys
        self.batch_sizes: list[int] = []

    def generate(self, requests, sampling):
        self.batch_sizes.append(len(requests))
        out = []
        for r in requests:
            if r.key.split(":")[1] in self.fail_keys:
                out.append(Completion(text="", finish_reason="error", error="server down (503) after 4 retries"))
            else:
                out.append(Completion(text=r.teacher()))
        return out


class ListBackend(GenerationBackend):
    """Text backend replaying the same list of responses from the start in every episode."""

    uses_tokens = False

    def __init__(self, responses: list[str]):
        self.responses = responses
        self.position: dict[str, int] = {}

    def generate(self, requests, sampling):
        out = []
        for r in requests:
            i = self.position.get(r.key, 0)
            self.position[r.key] = i + 1
            out.append(Completion(text=self.responses[i % len(self.responses)]))
        return out
