"""RolloutEngine over the real EnvPool with the fake env and fake text backends."""

from __future__ import annotations

import pytest
from tests.fakes.steps import ListBackend, TeacherBackend

from evoharness_rl.config import RewardConfig
from evoharness_rl.rollout.engine import EpisodeJob, RolloutEngine
from evoharness_rl.rollout.episode import EpisodeSettings
from evoharness_rl.rollout.pool import EnvPool

TASKS = ["pick/3", "clean/1", "heat/4", "pick/2", "clean/3", "heat/1", "pick/4"]


@pytest.fixture
def pool(fake_factory):
    with EnvPool(fake_factory(bad_tasks=("crash/1",)), num_workers=2, step_timeout_s=30) as p:
        yield p


@pytest.mark.parametrize("context", ["per_turn", "accumulated"])
def test_scripted_episodes_finish_in_job_order(pool, context):
    backend = TeacherBackend()
    engine = RolloutEngine(pool, backend, max_live_episodes=3, harness_rate=0.0)
    settings = EpisodeSettings(mode="adaptive", context=context, max_steps=10)
    trajs = engine.run([EpisodeJob(t, seed=0) for t in TASKS], settings)
    assert [t.task_id for t in trajs] == TASKS
    assert all(t.won and t.error is None and not t.truncated for t in trajs)
    assert [t.steps for t in trajs] == [int(t.split("/")[1]) for t in TASKS]
    assert max(backend.batch_sizes) <= 3  # never more than max_live_episodes in flight
    assert sum(backend.batch_sizes) == sum(t.steps for t in trajs)  # one request per turn
    assert engine.stats.turns == sum(t.steps for t in trajs) and engine.stats.errors == 0
    assert 0 < engine.stats.last_reset_s < engine.stats.wall_s  # the last episode still played its turns after it
    first = trajs[0].turns[0]
    if context == "per_turn":
        assert [m["role"] for m in first.messages] == ["system", "user"]
    else:  # turn 0 carries the whole opening; later turns only what was added
        assert [m["role"] for m in first.messages] == ["system", "user"]
        assert [m["role"] for m in trajs[0].turns[1].messages] == ["assistant", "user"]
    assert pool.live_keys == set()
    assert engine.run([], settings) == []


def test_harness_verbs_cost_steps_and_rewards_are_stored(pool):
    engine = RolloutEngine(pool, TeacherBackend(), harness_rate=0.5, reward_cfg=RewardConfig())
    settings = EpisodeSettings(mode="adaptive", context="per_turn", max_steps=30)
    trajs = engine.run([EpisodeJob("heat/4", seed=s) for s in range(4)], settings, update_index=0)
    for t in trajs:
        calls = sum(t.harness_calls.values())
        assert t.won and t.steps == 4 + calls
        assert set(t.rewards) >= {"r_grpo", "r_div", "r_eff", "lambda_div", "total"}
        assert t.rewards["r_div"] == len(t.verbs_used) / 4
        assert t.rewards["r_eff"] == pytest.approx((30 - t.steps) / 30)
    assert sum(sum(t.harness_calls.values()) for t in trajs) > 0
    # the same seeds give the same episodes
    again = engine.run([EpisodeJob("heat/4", seed=s) for s in range(4)], settings)
    assert [t.harness_calls for t in again] == [t.harness_calls for t in trajs]


def test_budget_truncation_is_not_success(pool):
    engine = RolloutEngine(pool, ListBackend(["<action>look</action>"]))
    settings = EpisodeSettings(mode="env_only", context="per_turn", max_steps=5)
    (traj,) = engine.run([EpisodeJob("pick/2")], settings)
    assert traj.truncated and not traj.won and traj.steps == 5
    assert traj.repeat_count == 4  # "look" repeated on turns 2..5


def test_malformed_responses_are_invalid_not_errors(pool):
    junk = ["", "no tags at all", "<action></action>", "<action>a</action><action>b</action>", "\x00\ufeff" * 50,
            "<action>fly to the moon</action>", "<action>note [x]</action>"]
    engine = RolloutEngine(pool, ListBackend(junk))
    settings = EpisodeSettings(mode="env_only", context="per_turn", max_steps=len(junk))
    trajs = engine.run([EpisodeJob("pick/3"), EpisodeJob("clean/2")], settings)
    for t in trajs:
        assert t.error is None and t.truncated and t.invalid_count == len(junk)
        assert all(turn.invalid_reason for turn in t.turns)


def test_backend_and_worker_failures_error_only_their_episodes(pool):
    backend = TeacherBackend(fail_keys=("1",))  # job 1's generation fails
    engine = RolloutEngine(pool, backend, harness_rate=0.0)
    settings = EpisodeSettings(mode="adaptive", context="per_turn", max_steps=10)
    tasks = ["pick/3", "clean/2", "crash/1", "heat/2", "pick/1", "clean/3"]
    trajs = engine.run([EpisodeJob(t) for t in tasks], settings)
    assert trajs[1].error == "generation failed: server down (503) after 4 retries"
    assert trajs[1].family == "clean" and trajs[1].task_id == "clean/2"
    assert "crashed" in trajs[2].error
    lost = [t for t in trajs if t.error and "crashed" in t.error]
    assert all(not t.won for t in lost)  # errored, never counted as a success
    fine = [t for i, t in enumerate(trajs) if t.error is None]
    assert fine and all(t.won for t in fine)
    assert engine.stats.errors == len(tasks) - len(fine)
    # the pool recovered: the next batch runs normally
    backend.fail_keys = ()
    again = engine.run([EpisodeJob(t) for t in ("pick/2", "heat/3")], settings)
    assert all(t.won for t in again)


def test_on_finish_sees_every_episode_once(pool):
    seen = []
    engine = RolloutEngine(pool, TeacherBackend(), max_live_episodes=2, harness_rate=0.0)
    settings = EpisodeSettings(mode="env_only", context="per_turn", max_steps=10)
    engine.run([EpisodeJob(t) for t in TASKS], settings, on_finish=lambda i, t: seen.append((i, t.task_id)))
    assert sorted(seen) == list(enumerate(TASKS))


def test_token_backend_without_tokenizer_is_rejected(pool):
    backend = TeacherBackend()
    backend.uses_tokens = True
    with pytest.raises(ValueError, match="needs a tokenizer"):
        RolloutEngine(pool, backend)
