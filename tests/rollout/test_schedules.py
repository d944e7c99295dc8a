"""Pipelined and lock-step schedules give the same episodes (env.schedule; rollout/engine.py).

Scripted policy: identical records. Sampled policy (tiny model, hf backend, temperature 1):
every request is sampled from its own seed, so the two schedules draw the same samples;
the batches differ (pipelined sends whatever is ready), and with them the floating-point
rounding of the logits, so the test asks for the same distribution -- the same samples
for nearly every turn -- and checks that the comparison can tell different seeds apart.
"""

from __future__ import annotations

import pytest
from tests.fakes.steps import TeacherBackend

from evoharness_rl.engines.base import SamplingSettings
from evoharness_rl.rollout.engine import EpisodeJob, RolloutEngine
from evoharness_rl.rollout.episode import EpisodeSettings
from evoharness_rl.rollout.pool import EnvPool

TASKS = ["pick/3", "clean/1", "heat/4", "pick/2", "clean/3", "heat/1", "pick/4", "clean/2"]


def _record(traj) -> dict:
    record = traj.to_dict()
    record.pop("wall_s")  # timing is the only thing allowed to differ
    return record


@pytest.mark.parametrize("context", ["per_turn", "accumulated"])
def test_scripted_records_are_identical(fake_factory, context):
    settings = EpisodeSettings(mode="adaptive", context=context, max_steps=12)
    jobs = [EpisodeJob(t, seed=s, sample=s) for s, t in enumerate(TASKS)]
    records = {}
    with EnvPool(fake_factory(step_delay_s=0.002), num_workers=2, step_timeout_s=30) as pool:
        for schedule in ("lockstep", "pipelined"):
            engine = RolloutEngine(pool, TeacherBackend(), max_live_episodes=3, harness_rate=0.5, slip_rate=0.2,
                                   schedule=schedule)
            trajs = engine.run(jobs, settings)
            assert [t.task_id for t in trajs] == TASKS and all(t.error is None for t in trajs)
            records[schedule] = [_record(t) for t in trajs]
        assert pool.live_keys == set()
    assert sum(sum(r["harness_calls"].values()) for r in records["lockstep"]) > 0  # verbs were exercised
    assert records["pipelined"] == records["lockstep"]


def test_pipelined_keeps_the_backend_busy_with_whatever_is_ready(fake_factory):
    """Requests go out as episodes come back, never more than max_live_episodes at once, one per turn."""
    backend = TeacherBackend()
    with EnvPool(fake_factory(), num_workers=2, step_timeout_s=30) as pool:
        engine = RolloutEngine(pool, backend, max_live_episodes=4, harness_rate=0.0)
        trajs = engine.run([EpisodeJob(t) for t in TASKS], EpisodeSettings(mode="env_only", max_steps=10))
    assert all(t.won for t in trajs)
    assert max(backend.batch_sizes) <= 4
    assert sum(backend.batch_sizes) == sum(t.steps for t in trajs)


@pytest.mark.parametrize("ready,at_env,size,go", [
    (0, 0, 4, False),  # nothing to generate
    (1, 3, 4, False),  # a batch is still forming: three more episodes are at the environment
    (2, 2, 4, True),   # half ready, half stepping: generate this half while the other steps
    (4, 9, 4, True),   # a full micro-batch
    (1, 0, 4, True),   # nothing more is coming: do not wait
])
def test_the_batch_driver_waits_for_a_batch_only_while_more_is_coming(ready, at_env, size, go):
    from evoharness_rl.rollout.engine import _BatchDriver

    driver = _BatchDriver.__new__(_BatchDriver)
    driver.size = size
    assert driver.wants(ready, at_env) is go


def _completions(pool, backend, schedule: str, seed: int) -> list[list[tuple[int, ...]]]:
    sampling = SamplingSettings(temperature=1.0, top_p=1.0, max_new_tokens=12, seed=seed)
    engine = RolloutEngine(pool, backend, backend.tokenizer, sampling, max_prompt_tokens=4096, max_live_episodes=3,
                           schedule=schedule)
    settings = EpisodeSettings(mode="adaptive", context="per_turn", max_steps=3)
    trajs = engine.run([EpisodeJob(t, seed=0, sample=i % 2) for i, t in enumerate(TASKS[:6])], settings)
    assert all(t.error is None for t in trajs)
    return [[tuple(turn.completion_ids) for turn in t.turns] for t in trajs]


def test_sampled_episodes_have_the_same_distribution(fake_factory, hf_backend):
    with EnvPool(fake_factory(step_delay_s=0.002), num_workers=2, step_timeout_s=60) as pool:
        lockstep = _completions(pool, hf_backend, "lockstep", seed=3)
        pipelined = _completions(pool, hf_backend, "pipelined", seed=3)
        other_seed = _completions(pool, hf_backend, "pipelined", seed=4)

    def agreement(a, b) -> float:
        turns = [(x, y) for ea, eb in zip(a, b) for x, y in zip(ea, eb)]
        return sum(x == y for x, y in turns) / len(turns)

    assert agreement(pipelined, lockstep) >= 0.9
    assert agreement(other_seed, lockstep) < 0.5  # the comparison sees a change of seed
