"""The batch pipeline of grpo.max_staleness (grpo/pipeline.py) with a fake engine: order, lag, waits, errors."""

from __future__ import annotations

import threading
import time

import pytest

from evoharness_rl.grpo.pipeline import Batch, Rollouts, read_in_flight, write_in_flight
from evoharness_rl.rollout.engine import RolloutStats
from evoharness_rl.rollout.trajectory import Trajectory, Turn


class FakeEngine:
    """Plays a batch as one trajectory per task, naming the weights it holds; records the thread and order."""

    def __init__(self, delay: float = 0.0):
        self.weights, self.delay, self.log = "v0", delay, []
        self.stats = RolloutStats()

    def play(self, batch: Batch) -> list:
        time.sleep(self.delay)
        self.log.append((batch.index, self.weights, threading.current_thread().name))
        self.stats = RolloutStats(episodes=len(batch.tasks))
        return [Trajectory(task_id=f"{task}@{self.weights}", family="f", env="fake") for _, task in batch.tasks]

    def load(self, weights) -> None:
        self.weights = weights

    def rollouts(self, lag: int) -> Rollouts:
        return Rollouts(lag, self.play, self.load, lambda: self.stats)


def _batch(b: int, lag: int, weights=None) -> Batch:
    return Batch(b, max(0, b - lag), [(0, f"t{b}")], weights=weights)


def test_synchronous_batches_are_rolled_out_when_taken_in_the_trainers_thread():
    engine = FakeEngine()
    rollouts = engine.rollouts(0)
    rollouts.launch(_batch(0, 0))
    assert engine.log == []  # nothing runs before the trainer asks
    batch, wait_s = rollouts.take(0)
    assert [t.task_id for t in batch.trajectories] == ["t0@v0"]
    assert engine.log == [(0, "v0", threading.current_thread().name)]
    assert batch.stats.episodes == 1 and wait_s >= batch.rollout_s >= 0
    rollouts.close()


def test_ahead_batches_run_in_order_in_the_background_each_with_its_own_weights():
    engine = FakeEngine(delay=0.05)
    rollouts = engine.rollouts(1)
    for b, version in ((0, "v0"), (1, "v0")):
        rollouts.launch(_batch(b, 1, weights=version))
    first, _ = rollouts.take(0)
    rollouts.launch(_batch(2, 1, weights="v1"))  # after update 0: version 1 exists
    second, _ = rollouts.take(1)
    third, _ = rollouts.take(2)
    assert [t.task_id for b in (first, second, third) for t in b.trajectories] == ["t0@v0", "t1@v0", "t2@v1"]
    assert [(i, w) for i, w, _ in engine.log] == [(0, "v0"), (1, "v0"), (2, "v1")]
    assert {name for _, _, name in engine.log} == {"grpo-rollouts"}
    assert first.weights is None  # a played batch lets its frozen copy go
    rollouts.close()


def test_exclusive_use_waits_for_the_running_batch_and_the_next_loads_its_own_weights():
    engine = FakeEngine(delay=0.2)
    rollouts = engine.rollouts(1)
    rollouts.launch(_batch(0, 1, weights="v0"))
    time.sleep(0.05)  # batch 0 is being played
    with rollouts.exclusive("current"):
        assert [i for i, _, _ in engine.log] == [0]  # it finished before the trainer got the engine
        assert engine.weights == "current"
        rollouts.launch(_batch(1, 1, weights="v1"))
        time.sleep(0.3)
        assert len(engine.log) == 1  # the rollout thread stays off the engine meanwhile
    batch, wait_s = rollouts.take(1)
    assert [t.task_id for t in batch.trajectories] == ["t1@v1"] and wait_s > 0.1
    rollouts.close()


def test_a_failed_batch_raises_in_the_trainer_when_taken():
    def broken(batch):
        raise RuntimeError(f"engine died on batch {batch.index}")

    rollouts = Rollouts(1, broken, lambda w: None, lambda: None)
    rollouts.launch(_batch(0, 1))
    with pytest.raises(RuntimeError, match="engine died on batch 0"):
        rollouts.take(0)
    rollouts.launch(_batch(1, 1))
    with pytest.raises(RuntimeError, match="batch 1"):  # a checkpoint waiting for it hears the same
        rollouts.finish()
    rollouts.close()


def test_in_flight_batches_round_trip_through_a_checkpoint_folder(tmp_path):
    engine = FakeEngine()
    rollouts = engine.rollouts(1)
    for b in (3, 4):
        rollouts.launch(_batch(b, 1, weights=f"v{b - 1}"))
    done = rollouts.finish()
    done[0].trajectories[0].turns = [Turn(0, [], "go", "env", "go", prompt_ids=[1, 2], completion_ids=[3], logprobs=[-0.5])]
    write_in_flight(tmp_path, 1, done)
    assert read_in_flight(tmp_path, 0, RolloutStats) == []  # another process's file
    back = read_in_flight(tmp_path, 1, RolloutStats)
    assert [(b.index, b.version, b.tasks) for b in back] == [(3, 2, [(0, "t3")]), (4, 3, [(0, "t4")])]
    assert back[0].trajectories[0].to_dict() == done[0].trajectories[0].to_dict()  # token ids and logprobs kept
    assert back[1].stats == done[1].stats and all(b.done.is_set() for b in back)
    restored = engine.rollouts(1)
    for batch in back:
        restored.launch(batch)
    before = len(engine.log)
    assert restored.take(3)[0] is back[0] and len(engine.log) == before  # taken back, not played again
    rollouts.close()
    restored.close()
