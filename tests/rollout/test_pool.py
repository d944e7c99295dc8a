"""EnvPool: parallel workers, many episodes per worker, crash/timeout isolation, experience shipping.

The failure tests run on both pools (`new_pool`: env.pool=process and env.pool=ray on a local Ray instance)."""

from __future__ import annotations

import gc
import time

import pytest

from evoharness_rl.rollout.pool import WORKER_GC_THRESHOLD, EnvPool, EnvReset, EnvStep, Finish, Reset, Step, Teacher
from tests.fakes.steps import LOADING_S


class CountingExperience:
    """Picklable ExperienceReader that says which snapshot it is."""

    def __init__(self, name: str):
        self.name = name

    def recall(self, query, family, k):
        return f"snapshot {self.name} says: do the steps in order", [f"{self.name}-1"]


def _play(pool, keys, rate=0.0):
    """Drive every episode to the end with the teacher; returns {key: trajectory or error}."""
    out = {}
    live = list(keys)
    while live:
        replies = pool.call([Teacher(k, rate) for k in live])
        step_replies = pool.call([Step(k, r.value) if r.ok else Finish(k) for k, r in zip(live, replies)])
        nxt = []
        for k, r in zip(live, step_replies):
            if not r.ok:
                out[k] = r.error
            elif r.value.done:
                out[k] = r.value.trajectory
            else:
                nxt.append(k)
        live = nxt
    return out


def test_many_episodes_per_worker_run_to_the_end(fake_factory, settings):
    with EnvPool(fake_factory(), num_workers=2, step_timeout_s=30) as pool:
        tasks = ["pick/1", "pick/2", "clean/3", "heat/4", "pick/3", "clean/2"]
        replies = pool.call([Reset(f"e{i}", t, 0, settings) for i, t in enumerate(tasks)])
        assert all(r.ok for r in replies), [r.error for r in replies]
        assert replies[0].value.trajectory.family == "pick" and replies[0].value.trajectory.env == "fake"
        assert replies[0].value.messages[0]["role"] == "system"
        assert "do 1 steps" in replies[0].value.messages[1]["content"]
        # episodes are spread over both workers
        assert len(pool._workers[0].keys) == 3 and len(pool._workers[1].keys) == 3
        out = _play(pool, [f"e{i}" for i in range(len(tasks))])
        for i, task in enumerate(tasks):
            traj = out[f"e{i}"]
            assert traj.won and traj.task_id == task and traj.steps == int(task.split("/")[1])
            assert traj.turns == []  # turns stay with the caller
        assert pool.live_keys == set()


def test_overlapping_submissions_complete_on_their_own(fake_factory):
    """A submission is handed back as soon as its own commands are answered, while a slower one still runs."""
    with EnvPool(fake_factory(step_delay_s=0.3), num_workers=2, step_timeout_s=30) as pool:
        pool.call([EnvReset(f"r{i}", "pick/9") for i in range(4)])  # r0, r2 on worker 0; r1, r3 on worker 1
        assert pool._home == {"r0": 0, "r1": 1, "r2": 0, "r3": 1}
        slow = pool.submit([EnvStep("r0", "step 1"), EnvStep("r2", "step 1")], tag="slow")  # 0.6 s on worker 0
        fast = pool.submit([EnvStep("r1", "step 1")], tag="fast")  # 0.3 s on worker 1
        first = pool.answered(timeout=None)
        assert [p.tag for p in first] == ["fast"] and not slow.done and pool.busy
        assert fast.replies[0].ok
        assert all(r.ok for r in pool.collect(slow)) and not pool.busy
        assert pool.answered(timeout=0) == []  # collected submissions are not handed out again
        pool.call([Finish(f"r{i}") for i in range(4)])


def test_env_instances_are_reused_across_episodes(fake_factory, settings):
    with EnvPool(fake_factory(), num_workers=1, step_timeout_s=30) as pool:
        first = pool.call([EnvReset("probe", "pick/1")])[0].value[1].info["instance"]
        assert pool.call([EnvStep("probe", "step 1")])[0].value.won
        pool.call([Finish("probe")])
        pool.call([Reset("a", "pick/1", 0, settings), Reset("b", "pick/1", 0, settings)])
        _play(pool, ["a", "b"])  # "a" took the idle instance, "b" needed a second one
        again = [r.value[1].info["instance"] for r in pool.call([EnvReset("p1", "pick/1"), EnvReset("p2", "pick/1")])]
        assert first in again and max(again) == first + 1  # no third instance was built


@pytest.mark.parametrize("bad", ["crash/1", "segv/1"])
def test_crashing_worker_fails_only_its_episodes(fake_factory, settings, bad, new_pool, pool_kind):
    with new_pool(fake_factory(bad_tasks=(bad,)), num_workers=2, step_timeout_s=30) as pool:
        tasks = [bad, "pick/2", "clean/2", "heat/2"]
        pool.call([Reset(f"e{i}", t, 0, settings) for i, t in enumerate(tasks)])
        home = pool._home["e0"]
        neighbours = {k for k in pool._workers[home].keys if k != "e0"}
        old_pid = pool.worker_pids()[home]
        out = _play(pool, [f"e{i}" for i in range(len(tasks))])
        assert isinstance(out["e0"], str) and "crashed" in out["e0"] and "step" in out["e0"]
        if bad.startswith("segv") and pool_kind == "process":  # Ray reports an exit, not the signal
            assert "SIGSEGV" in out["e0"]
        for key in neighbours:  # episodes hosted by the same worker are lost with it
            assert isinstance(out[key], str) and "crashed" in out[key]
        survivors = {f"e{i}" for i in range(len(tasks))} - neighbours - {"e0"}
        assert survivors and all(out[k].won for k in survivors)
        assert pool.restarts == 1 and pool.worker_pids()[home] != old_pid
        # the replacement worker serves new episodes
        pool.call([Reset("again", "pick/2", 0, settings)])
        assert _play(pool, ["again"])["again"].won


def test_silent_worker_is_killed_after_step_timeout(fake_factory, settings, new_pool):
    with new_pool(fake_factory(bad_tasks=("hang/1",)), num_workers=2, step_timeout_s=1.5) as pool:
        pool.call([Reset("stuck", "hang/1", 0, settings), Reset("fine", "pick/2", 0, settings)])
        start = time.monotonic()
        out = _play(pool, ["stuck", "fine"])
        assert time.monotonic() - start < 60  # the hang lasts an hour; a Ray replacement actor takes seconds to start
        assert "no answer within env.step_timeout_s=1.5s" in out["stuck"]
        assert out["fine"].won
        assert pool.restarts == 1


def test_a_reset_does_not_hold_up_other_episodes_harness_and_invalid_turns(fake_factory, settings):
    """One worker: while it loads a game for "new", "old"'s invalid action and harness verb are answered;
    its env action waits for the load (environment calls never overlap)."""
    with EnvPool(fake_factory(), num_workers=1, step_timeout_s=30) as pool:
        pool.call([Reset("old", "pick/3", 0, settings)])
        start = time.monotonic()
        loading = pool.submit([Reset("new", "loading/1", 0, settings)])
        time.sleep(0.5)  # the load is under way
        quick = pool.submit([Step("old", "no tags at all"), Step("old", "<action>track [where am I]</action>")])
        env_step = pool.submit([Step("old", "<action>step 1</action>")])
        invalid, harness = pool.collect(quick)
        assert time.monotonic() - start < LOADING_S / 2 and not loading.done
        assert invalid.value.turn.action_kind == "invalid" and harness.value.turn.action_kind == "harness"
        assert pool.collect(env_step)[0].value.turn.action_kind == "env"
        assert time.monotonic() - start >= LOADING_S  # the env step waited for the game load
        assert pool.collect(loading)[0].ok
        out = _play(pool, ["old", "new"])
        assert out["old"].won and out["new"].won


def test_exception_in_env_fails_only_that_episode(fake_factory, settings):
    with EnvPool(fake_factory(bad_tasks=("raise/1",)), num_workers=1, step_timeout_s=30) as pool:
        pool.call([Reset("bad", "raise/1", 0, settings), Reset("good", "pick/2", 0, settings)])
        out = _play(pool, ["bad", "good"])
        assert "RuntimeError: fake env failure" in out["bad"]
        assert out["good"].won and pool.restarts == 0


def test_experience_snapshot_is_shipped_once_per_batch(fake_factory, settings):
    with EnvPool(fake_factory(), num_workers=2, step_timeout_s=30) as pool:
        version = pool.set_experience(CountingExperience("A"))
        pool.call([Reset(f"a{i}", "pick/2", 0, settings, version) for i in range(4)])
        sent = [w.experience_version for w in pool._workers]
        assert sent == [version, version]
        replies = pool.call([Step("a0", "<action>recall [order]</action>")])
        assert "snapshot A says" in replies[0].value.turn.observation
        # a new snapshot reaches episodes reset after it; running ones keep theirs
        version_b = pool.set_experience(CountingExperience("B"))
        pool.call([Reset("b0", "pick/2", 0, settings, version_b)])
        replies = pool.call([Step("b0", "<action>recall [x]</action>"), Step("a1", "<action>recall [x]</action>")])
        assert "snapshot B" in replies[0].value.turn.observation
        assert "snapshot A" in replies[1].value.turn.observation


def test_unknown_key_and_closed_pool_fail_loudly(fake_factory):
    pool = EnvPool(fake_factory(), num_workers=1, step_timeout_s=30)
    with pytest.raises(KeyError, match="never reset"):
        pool.call([Step("nobody", "x")])
    pool.close()
    pool.close()  # idempotent
    with pytest.raises(RuntimeError, match="after close"):
        pool.call([])


def test_unpicklable_factory_is_rejected():
    with pytest.raises(TypeError, match="picklable"):
        EnvPool(lambda: None, num_workers=1)


def test_workers_have_a_fixed_hash_seed(fake_factory, new_pool):
    """Adapters that iterate over string sets must play the same episode in every run."""
    import subprocess
    import sys

    expected = subprocess.run([sys.executable, "-c", "print(hash('evoharness'))"], capture_output=True, text=True,
                              env={"PYTHONHASHSEED": "0"}, check=True).stdout.strip()
    with new_pool(fake_factory(), num_workers=2, step_timeout_s=30) as pool:
        replies = pool.call([EnvReset("a", "pick/1"), EnvReset("b", "pick/1")])
    assert {str(r.value[1].info["hash"]) for r in replies} == {expected}


def test_workers_collect_garbage_less_often(fake_factory, new_pool):
    """A game load allocates so many objects that default GC thresholds cost 12-15% of it (prepare_worker_process)."""
    with new_pool(fake_factory(), num_workers=2, step_timeout_s=30) as pool:
        replies = pool.call([EnvReset("a", "pick/1"), EnvReset("b", "pick/1")])
    assert {tuple(r.value[1].info["gc"]) for r in replies} == {WORKER_GC_THRESHOLD}
    assert WORKER_GC_THRESHOLD[0] > gc.get_threshold()[0]  # the test process keeps Python's defaults

