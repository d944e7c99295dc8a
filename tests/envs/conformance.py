"""The environment contract of envs/base.py, as one reusable check.

    check_conformance(make_env, split)

`make_env` builds a fresh adapter; `split` names a split with at least one task. The
check covers: task ids (non-empty strings, same order every call), task_family, reset determinism
under a seed (same env and a fresh one), Task and StepResult fields, well-formed
admissible actions, invalid actions answered with `invalid=True` instead of an
exception (the env stays usable), JSON-serialisable info, and an idempotent close.
"""

from __future__ import annotations

import json
from typing import Callable

from evoharness_rl.envs.base import Environment, EnvSpec, StepResult, Task

BAD_ACTIONS = (
    "",
    "   ",
    "definitely not an action 12345",
    "go to\nsomewhere else",
    "\u00fc\u4e2d\U0001f600" * 20,
    "x" * 5_000,
    "<action>nested</action>",
)


def _check_result(result: StepResult, where: str) -> None:
    assert isinstance(result, StepResult), f"{where}: expected a StepResult, got {type(result).__name__}"
    assert isinstance(result.observation, str), f"{where}: observation must be a string"
    assert isinstance(result.admissible_actions, list), f"{where}: admissible_actions must be a list"
    for action in result.admissible_actions:
        assert isinstance(action, str) and action.strip(), f"{where}: empty admissible action {action!r}"
        assert "\n" not in action, f"{where}: admissible action with a newline: {action!r}"
    assert 0.0 <= float(result.score) <= 1.0, f"{where}: score {result.score} outside [0, 1]"
    assert not (result.won and not result.done), f"{where}: won but not done"
    json.dumps(result.info)


def check_conformance(make_env: Callable[[], Environment], split: str) -> None:
    env = make_env()
    try:
        assert isinstance(env.spec, EnvSpec)
        for mode in ("env_only", "always_on", "adaptive"):
            assert env.spec.system_prompts.get(mode), f"spec has no system prompt for mode {mode}"
        ids = env.task_ids(split)
        assert ids and all(isinstance(i, str) and i for i in ids), f"task_ids({split!r}) must be non-empty strings"
        assert env.task_ids(split) == ids, "task_ids must return the same order every call"

        task, first = env.reset(ids[0], seed=0)
        assert isinstance(task, Task) and task.task_id == ids[0]
        assert task.family and task.objective, "Task needs a family and an objective"
        assert env.task_family(ids[0]) == task.family, "task_family must equal the family reset reports"
        json.dumps(task.info)
        _check_result(first, "reset")
        assert not first.done, "an episode must not be over right after reset"

        _, again = env.reset(ids[0], seed=0)
        assert (again.observation, again.admissible_actions) == (first.observation, first.admissible_actions), \
            "reset with the same task id and seed must give the same observation and actions"
        other = make_env()
        try:
            _, fresh = other.reset(ids[0], seed=0)
            assert (fresh.observation, fresh.admissible_actions) == (first.observation, first.admissible_actions), \
                "a fresh environment must reset to the same observation and actions"
        finally:
            other.close()

        for bad in BAD_ACTIONS:
            result = env.step(bad)
            _check_result(result, f"step({bad[:30]!r})")
            assert result.invalid, f"step({bad[:30]!r}) must be invalid"
            assert not result.won
        if first.admissible_actions:
            env.reset(ids[0], seed=0)
            result = env.step(first.admissible_actions[0])
            _check_result(result, "step(admissible)")
            assert not result.invalid, f"admissible action {first.admissible_actions[0]!r} was marked invalid"
    finally:
        env.close()
    env.close()  # idempotent


class PooledEnv(Environment):
    """An Environment whose reset and step run in a pool worker (EnvReset / EnvStep), for
    `check_conformance` through env.pool=process and env.pool=ray: what crosses the pool
    (Task, StepResult, invalid actions, determinism in another process or node) must
    keep the contract. The static lookups (spec, task ids, families) come from a local instance."""

    _keys = 0

    def __init__(self, pool, make_env: Callable[[], Environment]):
        PooledEnv._keys += 1
        self.pool, self.key, self.local = pool, f"conformance-{PooledEnv._keys}", make_env()
        self.spec = self.local.spec
        self.closed = False

    def _call(self, command):
        (reply,) = self.pool.call([command])
        if not reply.ok:
            raise RuntimeError(reply.error)
        return reply.value

    def task_ids(self, split: str) -> list[str]:
        return self.local.task_ids(split)

    def task_family(self, task_id: str) -> str:
        return self.local.task_family(task_id)

    def reset(self, task_id: str, seed: int = 0) -> tuple[Task, StepResult]:
        from evoharness_rl.rollout.pool import EnvReset

        return self._call(EnvReset(self.key, task_id, seed))

    def step(self, action: str) -> StepResult:
        from evoharness_rl.rollout.pool import EnvStep

        return self._call(EnvStep(self.key, action))

    def make_belief(self):
        return self.local.make_belief()

    def make_teacher(self, enabled_verbs, harness_rate, rng):
        raise NotImplementedError("the teacher runs in the worker (pool command Teacher)")

    def close(self) -> None:
        if not self.closed:
            from evoharness_rl.rollout.pool import Finish

            self.closed = True
            if self.key in self.pool.live_keys:
                self._call(Finish(self.key))
            self.local.close()
