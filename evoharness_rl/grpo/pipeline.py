"""Where update u's batch comes from: rolled out when the update starts, or ahead, while earlier updates train.

Versions: version v is the policy after v updates. With a fixed lag k = grpo.max_staleness,
batch b is sampled by version max(0, b - k):

- k = 0 (the default, synchronous): batch u is rolled out at the start of update u, with the
  weights the update is about to change. Nothing runs in the background.
- k >= 1 (asynchronous): batch b is *launched* as soon as version b - k exists, i.e. at the end of
  update b - k - 1 (batches 0..k at the start, with version 0), and a rollout thread works through
  the launched batches in order while the trainer trains on earlier ones. Update u waits only
  for what batch u still needs (`wait_s`).

Everything a batch depends on is fixed when it is launched, never by timing: its tasks (the
task sampler is drawn in batch order, so the task stream is the synchronous one), its
sampling seeds (from (seed, b, rank), as `seed_update` does for k = 0), the weights it is
sampled with (a frozen copy of version b - k, which the engine loads before the batch: the hf
backend generates with a copy of its own, vLLM keeps its own weights) and the Experience bank
snapshot it reads: the bank after consolidating every batch before b - k (k = 0: every batch
before b, as before). A run with a seed therefore samples the same batches whatever the
machine's speed, up to the float noise of the hf engine's batching (docs/async.md).

In flight at a checkpoint written after update u: the launched batches not yet trained on,
u + 1 .. u + k + 1 (none past the last update). `save` waits for them and stores their
trajectories with the checkpoint (`in_flight_rank<r>.jsonl`, one file per process);
`resume=true` takes them back instead of sampling them again, so an interrupted run continues
with the very batches an uninterrupted one trains on. (The wait drains the pipeline at each
checkpoint: with grpo.save_every = 1 nothing overlaps.)

The rollout side meets the trainer through two calls, `launch(b, weights)` (weights in) and
`take(b)` (trajectories out), the narrow interface a multi-node layout would put across
machines (docs/scale.md).
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

IN_FLIGHT = "in_flight_rank{rank}.jsonl"  # in a checkpoint: each process's batches in flight


@dataclass
class Batch:
    """One launched batch: what it was sampled with, and (once done) its trajectories."""

    index: int  # b: the update that trains on it
    version: int  # the policy version that samples it: max(0, b - k)
    tasks: list  # [(global group index, task id)] of this process
    snapshot: Any = None  # the Experience bank snapshot it reads (None: no bank)
    weights: Any = None  # the frozen policy copy the engine loads first (None: the engine's weights are current)
    probe: Any = None  # (prompt, completion, the trainer's logprobs of it at launch): the engine's sync check
    sync: dict = field(default_factory=dict)  # that check's result (sync/engine_vs_trainer)
    trajectories: Optional[list] = None
    stats: Any = None  # the engine's RolloutStats of this batch
    rollout_s: float = 0.0  # seconds the engine spent on it
    error: Optional[BaseException] = None
    done: threading.Event = field(default_factory=threading.Event)


class Rollouts:
    """Batches in update order; `play(batch)` is the trainer's rollout of one batch (weights loaded first)."""

    def __init__(self, lag: int, play: Callable[[Batch], list], load: Callable[[Any], None], stats: Callable[[], Any]):
        self.lag = lag
        self._play, self._load, self._stats = play, load, stats
        self._batches: dict[int, Batch] = {}
        self._lock = threading.RLock()  # held while the engine runs a batch, or by `exclusive`
        self._queue: "queue.Queue[Optional[Batch]]" = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        if lag > 0:
            self._thread = threading.Thread(target=self._work, name="grpo-rollouts", daemon=True)
            self._thread.start()

    # -- the trainer's side

    def launch(self, batch: Batch) -> None:
        """Hand a batch to the rollout side (k = 0: it is rolled out when taken)."""
        self._batches[batch.index] = batch
        if self._thread is not None:
            self._queue.put(batch)

    def launched(self) -> list[int]:
        return sorted(self._batches)

    def take(self, index: int) -> tuple[Batch, float]:
        """(batch `index`, seconds the trainer waited for it); rolls it out now when nothing runs ahead."""
        batch = self._batches.pop(index)
        start = time.monotonic()
        if self._thread is None and not batch.done.is_set():
            self._run(batch)
        batch.done.wait()
        if batch.error is not None:
            raise batch.error
        return batch, time.monotonic() - start

    @contextlib.contextmanager
    def exclusive(self, weights: Any = None):
        """The engine for the trainer's own use (validation, the edit check, a `self` consolidator): waits for the
        batch being rolled out, loads `weights` (the current policy), and keeps the rollout thread off it meanwhile.
        The next batch loads its own weights again."""
        with self._lock:
            if weights is not None:
                self._load(weights)
            yield

    def finish(self) -> list[Batch]:
        """Wait for every launched batch (a checkpoint stores them); they stay to be taken."""
        for batch in self._batches.values():
            batch.done.wait()
            if batch.error is not None:
                raise batch.error
        return [self._batches[i] for i in sorted(self._batches)]

    def close(self) -> None:
        """Stop the rollout thread after its batch (not waited for: an interrupted run ends now; the thread is a
        daemon, and the engine it uses is closed next)."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=1.0)
            self._thread = None

    # -- the rollout side

    def _work(self) -> None:
        while True:
            batch = self._queue.get()
            if batch is None:
                return
            self._run(batch)

    def _run(self, batch: Batch) -> None:
        if batch.done.is_set():  # restored from a checkpoint
            return
        try:
            with self._lock:
                start = time.monotonic()
                if batch.weights is not None:
                    self._load(batch.weights)
                batch.trajectories = self._play(batch)
                batch.stats = copy.copy(self._stats())
                batch.rollout_s = time.monotonic() - start
        except BaseException as err:  # noqa: BLE001 - raised again in the trainer's thread by `take`
            batch.error = err
        finally:
            batch.weights = None  # the frozen copy is not needed any more
            batch.done.set()


def frozen_copy(model: Any) -> Any:
    """A copy of `model`'s weights that later optimizer steps do not touch (the version a batch is sampled with)."""
    inner = getattr(model, "module", model)
    twin = copy.deepcopy(inner)
    twin.requires_grad_(False)
    return twin


def write_in_flight(folder: Path, rank: int, batches: list[Batch]) -> None:
    """This process's finished in-flight batches, into a checkpoint folder: one JSON line each."""
    import json

    from evoharness_rl.fileio import atomic_write_text

    lines = [json.dumps({"index": b.index, "version": b.version, "tasks": b.tasks, "rollout_s": b.rollout_s,
                         "stats": vars(b.stats) if b.stats is not None else {},
                         "trajectories": [t.to_dict() for t in b.trajectories]}) for b in batches]
    atomic_write_text(Path(folder) / IN_FLIGHT.format(rank=rank), "".join(line + "\n" for line in lines))


def read_in_flight(folder: Path, rank: int, stats_type: Callable[..., Any]) -> list[Batch]:
    """The batches `write_in_flight` stored, done (nothing to roll out again)."""
    import json

    from evoharness_rl.rollout.trajectory import Trajectory

    path = Path(folder) / IN_FLIGHT.format(rank=rank)
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        batch = Batch(index=data["index"], version=data["version"], tasks=[tuple(t) for t in data["tasks"]],
                      trajectories=[Trajectory.from_dict(t) for t in data["trajectories"]],
                      stats=stats_type(**data["stats"]), rollout_s=data["rollout_s"])
        batch.done.set()
        out.append(batch)
    return out

