"""Environment worker pool: N workers, each hosting many live episodes at once.

`EnvPool` runs the workers as processes on this machine (env.pool=process); `RayEnvPool`
(ray_pool.py, env.pool=ray) runs them as Ray actors on a cluster's nodes. Both share
`BasePool` (routing, failures, Experience versions) and so the contract below;
`rollout.engine.make_pool(env_factory, cfg.env)` builds the configured one.

    with EnvPool(env_factory(cfg.env), num_workers=2, step_timeout_s=60) as pool:
        pool.set_experience(snapshot)              # pickled once, shipped once to each worker
        replies = pool.call([Reset("a", task_id, seed, settings), Reset("b", ...)])
        replies = pool.call([Step("a", response), Teacher("a", 0.5), Step("b", ...)])

`call` sends every worker its share of the commands in one message, so the workers
run in parallel; a worker answers each command as soon as it is done. Replies come back
in the order of the commands. A worker process runs resets (and whatever follows one
for the same episode) on a lane of their own, so a slow game load never holds up another
episode's harness verb or invalid action; environment calls still never overlap
(`_worker_main`). `submit` sends without
waiting, and submissions may overlap: `answered` hands back each one as soon as its own
commands are answered (the pipelined rollout engine sends every episode's step as its
own submission, so no episode waits for another's).

Episodes live in the worker chosen at `Reset` (the one with the fewest episodes) until
`Finish` or the end of the episode. A worker keeps its environment instances and reuses
them for later episodes (an ALFWorld game load is the expensive part, not the env object).

Failures never stop the run:
- a command that raises in the worker fails that episode only (its env is discarded);
- a worker that dies (segfault, `os._exit`) or stays silent for `step_timeout_s`
  seconds is killed and replaced; every episode it hosted is lost and every later
  command for them gets an error reply. These are infrastructure errors: the rollout
  engine records them in `Trajectory.error`, never as policy failures.

The Experience snapshot is frozen for a rollout batch: `set_experience` pickles it
once and each worker receives it with its next batch of commands (and again after a
replacement), never with every step.
"""

from __future__ import annotations

import abc

import concurrent.futures
import contextlib
import functools
import gc
import itertools
import multiprocessing as mp
import os
import pickle
import queue
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Optional

from evoharness_rl.envs.base import Environment, StepResult, Task
from evoharness_rl.rollout.episode import Episode, EpisodeSettings
from evoharness_rl.rollout.trajectory import Trajectory, Turn

START_METHOD = "forkserver"  # workers fork from a clean server process: no torch threads or CUDA state inherited
WORKER_HASH_SEED = "0"  # PYTHONHASHSEED of the workers: string-set iteration order is the same in every run
JOIN_TIMEOUT_S = 5.0  # grace period for a worker to exit on close before it is killed
WORKER_GC_THRESHOLD = (50_000, 20, 10)  # the workers' cyclic-GC thresholds (`prepare_worker_process`)


# ----------------------------------------------------------------------------- commands


@dataclass
class Reset:
    """Start an episode `key` on `task_id` (the worker picks or builds an env instance)."""

    key: str
    task_id: str
    seed: int
    settings: EpisodeSettings
    experience_version: int = 0  # which snapshot the episode reads (0: no Experience)
    op = "reset"


@dataclass
class Step:
    """Apply one policy response to episode `key`."""

    key: str
    response: str
    op = "step"


@dataclass
class Teacher:
    """The scripted expert's next response for episode `key` (None once the episode is over)."""

    key: str
    harness_rate: float
    slip_rate: float = 0.0
    op = "teacher"


@dataclass
class Finish:
    """End episode `key` now (if still running) and return its record."""

    key: str
    capped: bool = False  # it reached the engine's trajectory token cap: a policy failure, not an error
    op = "finish"


@dataclass
class EnvReset:
    """Raw environment reset, no harness (benchmarks and adapter checks)."""

    key: str
    task_id: str
    seed: int = 0
    op = "env_reset"


@dataclass
class EnvStep:
    """Raw environment step, no harness (benchmarks and adapter checks)."""

    key: str
    action: str
    op = "env_step"


@dataclass
class _SetExperience:
    key: str
    version: int
    blob: bytes
    op = "experience"


Command = Any  # one of the dataclasses above


@dataclass
class EpisodeUpdate:
    """What the engine needs after a reset or a step."""

    messages: list[dict[str, str]]  # next prompt: the whole prompt (per_turn) / the messages added since the
    # last response (accumulated)
    done: bool = False
    turn: Optional[Turn] = None  # set on step: the completed turn (no token ids; the engine adds them)
    trajectory: Optional[Trajectory] = None  # on reset: the empty record (task, family, settings); when done: the
    # final record with `turns` left empty (the engine holds the turns and their token ids)


@dataclass
class Reply:
    key: str
    value: Any = None
    error: Optional[str] = None  # why the command failed; the episode is gone from the worker

    @property
    def ok(self) -> bool:
        return self.error is None


# ------------------------------------------------------------------------------ worker


class _EnvCalls:
    """Runs calls on one thread of its own, one at a time, in the order they come, and waits for each.

    A worker's environment calls all go through it (`_Served`): they never overlap, and they
    all run on the same thread, which thread-bound libraries need (Playwright's sync API,
    which the WebArena browser uses, works only on the thread that started it).
    """

    def __init__(self) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="evoharness-env-calls")

    def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self._executor.submit(fn, *args).result()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class _Served:
    """An environment built, reset, stepped and closed through `_EnvCalls` (everything else is the env's own)."""

    def __init__(self, env_factory: Callable[[], Environment], calls: _EnvCalls):
        self._calls = calls
        self._env = calls(env_factory)

    def reset(self, task_id: str, seed: int = 0) -> tuple[Task, StepResult]:
        return self._calls(self._env.reset, task_id, seed)

    def step(self, action: str) -> StepResult:
        return self._calls(self._env.step, action)

    def close(self) -> None:
        self._calls(self._env.close)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


class _WorkerState:
    """Everything one worker process holds: live episodes and idle env instances.

    With `env_calls`, every environment it builds is `_Served` by it, and the scripted
    teacher (which may read the env's live state, e.g. a browser page) runs there too, so
    commands may run on two threads (`_worker_main`) while the environments see one.
    """

    def __init__(self, env_factory: Callable[[], Environment], env_calls: Optional[_EnvCalls] = None):
        self.env_factory = env_factory
        self.env_calls = env_calls
        self.idle_envs: list[Environment] = []
        self.episodes: dict[str, Episode] = {}
        self.raw_envs: dict[str, Environment] = {}
        self.rngs: dict[str, random.Random] = {}
        self.experience: tuple[int, Any] = (0, None)

    def handle(self, cmd: Command) -> Reply:
        try:
            return Reply(cmd.key, getattr(self, "_" + cmd.op)(cmd))
        except Exception as err:  # noqa: BLE001 - any env failure fails only this episode
            self._discard(cmd.key)
            where = f"{cmd.op} failed in environment worker {os.getpid()}"
            return Reply(cmd.key, error=f"{where}: {type(err).__name__}: {err}")

    # commands

    def _experience(self, cmd: _SetExperience) -> None:
        self.experience = (cmd.version, pickle.loads(cmd.blob))

    def _reset(self, cmd: Reset) -> EpisodeUpdate:
        if cmd.key in self.episodes:
            raise KeyError(f"episode key {cmd.key!r} is already running")
        experience = None
        if cmd.experience_version:
            version, experience = self.experience
            if version != cmd.experience_version:
                raise RuntimeError(f"experience snapshot {cmd.experience_version} not received (worker has {version})")
        episode = Episode(self._env(), cmd.settings, experience)
        self.episodes[cmd.key] = episode
        episode.reset(cmd.task_id, cmd.seed)
        self.rngs[cmd.key] = random.Random(f"teacher:{cmd.task_id}:{cmd.seed}")
        header = Trajectory.from_dict(episode.record.to_dict())
        return EpisodeUpdate(messages=episode.prompt(), trajectory=header)

    def _step(self, cmd: Step) -> EpisodeUpdate:
        episode = self._episode(cmd.key)
        turn = episode.step(cmd.response)
        if episode.done:
            return EpisodeUpdate(messages=[], done=True, turn=turn, trajectory=self._release(cmd.key))
        context = episode.settings.context
        messages = episode.new_messages() if context == "accumulated" else episode.prompt()
        return EpisodeUpdate(messages=messages, turn=turn)

    def _teacher(self, cmd: Teacher) -> Optional[str]:
        episode = self.episodes.get(cmd.key)
        if episode is None:  # finished by the step before it in the same batch
            return None
        respond = functools.partial(episode.teacher_response, cmd.harness_rate, self.rngs[cmd.key], cmd.slip_rate)
        return respond() if self.env_calls is None else self.env_calls(respond)

    def _finish(self, cmd: Finish) -> Optional[Trajectory]:
        if cmd.key in self.raw_envs:
            self.idle_envs.append(self.raw_envs.pop(cmd.key))
            return None
        if cmd.key not in self.episodes:
            return None
        if cmd.capped:
            self.episodes[cmd.key].cap()
        return self._release(cmd.key)

    def _env_reset(self, cmd: EnvReset) -> tuple[Task, StepResult]:
        env = self.raw_envs.get(cmd.key) or self._env()
        self.raw_envs[cmd.key] = env
        return env.reset(cmd.task_id, cmd.seed)

    def _env_step(self, cmd: EnvStep) -> StepResult:
        if cmd.key not in self.raw_envs:
            raise KeyError(f"no raw environment {cmd.key!r}; send EnvReset first")
        return self.raw_envs[cmd.key].step(cmd.action)

    # helpers

    def _env(self) -> Environment:
        if self.idle_envs:
            return self.idle_envs.pop()
        return self.env_factory() if self.env_calls is None else _Served(self.env_factory, self.env_calls)

    def _episode(self, key: str) -> Episode:
        if key not in self.episodes:
            raise KeyError(f"no running episode {key!r} in this worker")
        return self.episodes[key]

    def _release(self, key: str) -> Trajectory:
        episode = self.episodes.pop(key)
        self.rngs.pop(key, None)
        if not episode.done:
            episode.fail("finished before the episode ended")
        record = episode.record
        record.turns = []  # the engine keeps the turns (with their token ids)
        self.idle_envs.append(episode.env)
        return record

    def _discard(self, key: str) -> None:
        """After an exception the env's state is unknown: close it instead of reusing it."""
        env = self.raw_envs.pop(key, None)
        episode = self.episodes.pop(key, None)
        self.rngs.pop(key, None)
        env = env or (episode.env if episode is not None else None)
        if env is not None:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - already failing; the episode error carries the cause
                pass

    def close(self) -> None:
        envs = self.idle_envs + list(self.raw_envs.values()) + [e.env for e in self.episodes.values()]
        for env in envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - best effort on shutdown
                pass


SLOW_OPS = ("reset", "env_reset", "experience")  # what a worker runs on its reset lane (`_worker_main`)


def prepare_worker_process() -> None:
    """What every environment worker sets up for itself first (worker processes and Ray actors alike).

    The cyclic garbage collector runs far less often. A game load allocates hundreds of
    thousands of objects (an ALFWorld load parses its PDDL and grammar), and at Python's
    default thresholds (700, 10, 10) a worker ran about 70 collections per load, some of
    them full passes over every game it holds: the more games a worker holds and the larger
    they are, the more of a load that took (`scripts/bench_envs.py --envs alfworld` times
    loads both ways: 4 large games 22% faster, 16 small ones 11%, 8 small ones 4-9%).
    Cycles are still collected, after 50,000 net allocations instead of 700.
    """
    gc.set_threshold(*WORKER_GC_THRESHOLD)


def _worker_main(conn: Connection, env_factory: Callable[[], Environment]) -> None:
    """Worker process: receive batches of numbered commands, answer each one as soon as it is done.

    Two lanes. Resets (an ALFWorld game load takes a good part of a second) run one after
    another on a helper thread, in the order they came, and so does every later command
    for an episode whose reset is still there, and each Experience snapshot (so a reset
    reads the snapshot sent before it). Every other command runs at once on this thread:
    a running episode's harness verb, invalid action or finish never waits for another
    episode's reset. Environment calls never overlap and all run on one thread
    (`_EnvCalls`: engines are not assumed thread-safe, and some are bound to a thread), so
    an env step still waits for a game load in progress. Each reply carries its command's
    sequence number: the lanes answer out of order.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes us
    prepare_worker_process()
    env_calls = _EnvCalls()
    state = _WorkerState(env_factory, env_calls)
    sending, counting = threading.Lock(), threading.Lock()
    laned: dict[str, int] = {}  # episode key -> its commands on the reset lane, not yet answered
    lane: queue.SimpleQueue = queue.SimpleQueue()

    def answer(seq: int, reply: Reply) -> None:
        with sending:
            try:
                conn.send((seq, reply))
            except (OSError, EOFError, BrokenPipeError):
                pass  # the parent is gone; the main loop sees it too and stops

    def reset_lane() -> None:
        while (item := lane.get()) is not None:
            seq, cmd = item
            reply = state.handle(cmd)
            with counting:  # the command is done: later ones for its episode may run on the main thread
                laned[cmd.key] -= 1
                if not laned[cmd.key]:
                    del laned[cmd.key]
            answer(seq, reply)

    helper = threading.Thread(target=reset_lane, name="evoharness-env-resets", daemon=True)
    helper.start()
    try:
        while True:
            try:
                batch = conn.recv()
            except (EOFError, OSError):
                break
            if batch is None:
                break
            for seq, cmd in batch:
                with counting:
                    slow = cmd.op in SLOW_OPS or cmd.key in laned
                    if slow:
                        laned[cmd.key] = laned.get(cmd.key, 0) + 1
                if slow:
                    lane.put((seq, cmd))
                else:
                    answer(seq, state.handle(cmd))
    finally:
        lane.put(None)
        helper.join(JOIN_TIMEOUT_S)
        state.close()
        env_calls.shutdown()


# ------------------------------------------------------------------------------ parent


@contextlib.contextmanager
def _fixed_hash_seed():
    """Start the fork server (if this starts it) with a fixed PYTHONHASHSEED.

    Workers fork from the server and inherit its hash seed. Without a fixed seed, an
    adapter or teacher that iterates over a set of strings behaves differently in every
    run, and the same (task, seed) episode stops being reproducible -- which breaks
    paired comparisons and resumed evaluations.
    """
    saved = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = saved if saved is not None else WORKER_HASH_SEED
    try:
        yield
    finally:
        if saved is None:
            del os.environ["PYTHONHASHSEED"]


@dataclass(eq=False)
class Pending:
    """A submission: its replies fill in as the workers answer (`left` of them still to come)."""

    replies: list[Optional[Reply]]
    left: int
    tag: Any = None  # the caller's label, handed back with the replies by `answered`

    @property
    def done(self) -> bool:
        return self.left == 0


@dataclass
class _Worker:
    """What the pool knows of one worker, whatever carries its messages."""

    index: int
    keys: set[str] = field(default_factory=set)  # episodes living in this worker
    experience_version: int = 0  # latest snapshot this worker has been sent


DEAD = None  # what `_wait` reports for a worker that died instead of answering


def _oldest(queue: dict) -> Command:
    """The command a worker has owed longest (what a silent or dead worker was most likely running)."""
    return next(iter(queue.values()))[2]


class BasePool(abc.ABC):
    """Routing and failure bookkeeping of an environment pool; subclasses carry the messages.

    A transport implements `_start` (a new worker), `_transmit` (send a list of commands),
    `_wait` (replies that arrived, in each worker's order, or DEAD), `_death` (how a dead
    worker died), `_kill`, `_shutdown` and `worker_pids`. Everything else -- episode homes,
    lost episodes, Experience versions, timeouts, replacing workers -- lives here, so every
    pool keeps the same contract (tests/rollout/test_pool.py runs on each of them).
    """

    kind = "base"  # env.pool value

    def __init__(self, env_factory: Callable[[], Environment], num_workers: int = 2, step_timeout_s: float = 60.0):
        if num_workers < 1:
            raise ValueError(f"num_workers={num_workers} must be >= 1")
        if step_timeout_s <= 0:
            raise ValueError(f"step_timeout_s={step_timeout_s} must be > 0")
        try:
            pickle.dumps(env_factory)
        except Exception as err:  # noqa: BLE001
            raise TypeError(
                f"env_factory must be picklable to reach worker processes ({err}); "
                "use a module-level function or evoharness_rl.envs.env_factory(env_cfg)"
            ) from err
        self.env_factory = env_factory
        self.num_workers = num_workers
        self.step_timeout_s = step_timeout_s
        self._workers: list[Any] = []
        self._home: dict[str, int] = {}  # episode key -> worker index
        self._lost: dict[str, str] = {}  # episode key -> why its worker was lost
        self._experience: tuple[int, bytes] = (0, b"")
        self.restarts = 0  # workers replaced after a crash or timeout
        # per worker, what it was sent and has not answered yet, by sequence number in the order it was sent:
        # (submission or None, position, command). A worker may answer out of that order (`_worker_main`).
        self._inflight: dict[int, dict[int, tuple[Optional[Pending], int, Command]]] = {}
        self._sequence = itertools.count()
        self._heard: dict[int, float] = {}  # worker index -> when it last answered (or was sent work while idle)
        self._complete: list[Pending] = []  # answered submissions not yet handed out by `answered` or `collect`
        self._closed = False

    # -- public -------------------------------------------------------------------------

    def set_experience(self, snapshot: Any) -> int:
        """Freeze `snapshot` for the episodes reset from now on; returns its version handle (0 for None)."""
        if snapshot is None:
            return 0
        version = self._experience[0] + 1
        self._experience = (version, pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL))
        return version

    def call(self, commands: list[Command]) -> list[Reply]:
        """Run `commands` (all workers in parallel); one reply per command, same order."""
        return self.collect(self.submit(commands))

    def submit(self, commands: list[Command], tag: Any = None) -> Pending:
        """Send `commands` to their workers and return at once.

        Submissions may overlap: each worker answers what it was sent in order, and a
        submission is complete as soon as its own commands are answered, whatever is still
        running for later ones. Wait for one with `collect`, or take each as it completes
        with `answered` (the pipelined rollout engine does, from its environment thread).
        """
        if self._closed:
            raise RuntimeError(f"{type(self).__name__}.submit after close()")
        pending = Pending([None] * len(commands), len(commands), tag)
        batches: dict[int, list[tuple[int, Command]]] = {}
        for position, cmd in enumerate(commands):
            worker = self._route(cmd)
            if worker is None:
                reason = self._lost.get(cmd.key, f"unknown episode {cmd.key!r}")
                self._resolve(pending, position, Reply(cmd.key, error=reason))
            else:
                batches.setdefault(worker, []).append((position, cmd))
        for index, batch in batches.items():
            self._send(index, pending, batch)
        if not commands:
            self._complete.append(pending)
        return pending

    def collect(self, pending: Pending) -> list[Reply]:
        """Wait for the replies of `pending` (killing and replacing silent or dead workers)."""
        while not pending.done:
            self._pump(None)
        if pending in self._complete:
            self._complete.remove(pending)
        return pending.replies  # type: ignore[return-value]

    def answered(self, timeout: Optional[float]) -> list[Pending]:
        """Submissions completed since the last call, in the order they completed; waits up to `timeout`
        seconds (None: until one completes) when there are none yet and work is in flight."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._complete and self.busy:
            self._pump(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if deadline is not None and time.monotonic() >= deadline:
                break
        done, self._complete = self._complete, []
        return done

    @property
    def busy(self) -> bool:
        """Some worker has commands it has not answered yet."""
        return any(self._inflight.values())

    def abandon(self, keys: list[str]) -> None:
        """Wait out every submission in flight and end the episodes `keys` (after a caller error)."""
        if self._closed:
            return
        while self.busy:
            self._pump(None)
        self._complete = []
        keys = [k for k in keys if k in self._home]
        if keys:
            self.call([Finish(k) for k in keys])

    @property
    def live_keys(self) -> set[str]:
        return set(self._home)

    @abc.abstractmethod
    def worker_pids(self) -> list[int]:
        """The operating-system process ids of the live workers (tests count them)."""

    def close(self) -> None:
        """Stop all workers (they close their environments); safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._shutdown()

    def __enter__(self) -> "BasePool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- routing and bookkeeping -----------------------------------------------------------

    def _route(self, cmd: Command) -> Optional[int]:
        if isinstance(cmd, (Reset, EnvReset)) and cmd.key not in self._home:
            if isinstance(cmd, Reset) and cmd.experience_version not in (0, self._experience[0]):
                raise ValueError(f"Reset uses experience version {cmd.experience_version}; "
                                 f"the current one is {self._experience[0]} (see set_experience)")
            index = min(range(self.num_workers), key=lambda i: len(self._workers[i].keys))
            self._home[cmd.key] = index
            self._workers[index].keys.add(cmd.key)
            self._lost.pop(cmd.key, None)
            return index
        if cmd.key in self._home:
            return self._home[cmd.key]
        if cmd.key in self._lost:
            return None
        raise KeyError(f"{type(cmd).__name__} for episode {cmd.key!r}, which was never reset in this pool")

    def _send(self, index: int, pending: Pending, batch: list[tuple[int, Command]]) -> None:
        worker = self._workers[index]
        queue = self._inflight.setdefault(index, {})
        if not queue:
            self._heard[index] = time.monotonic()  # the silence timeout counts from now
        entries: list[tuple[Optional[Pending], int, Command]] = list(
            (pending, position, cmd) for position, cmd in batch)
        version, blob = self._experience
        if version and worker.experience_version != version and any(isinstance(c, Reset) for _, _, c in entries):
            entries.insert(0, (None, -1, _SetExperience("", version, blob)))
            worker.experience_version = version
        numbered = []
        for entry in entries:
            seq = next(self._sequence)
            queue[seq] = entry
            numbered.append((seq, entry[2]))
        self._transmit(index, numbered)

    def _resolve(self, pending: Pending, position: int, reply: Reply) -> None:
        pending.replies[position] = reply
        pending.left -= 1
        if pending.done:
            self._complete.append(pending)

    def _pump(self, timeout: Optional[float]) -> None:
        """Take the replies that arrive within `timeout` seconds (None: until one does, or a worker times out);
        fail the workers that died or stayed silent for `step_timeout_s`."""
        busy = [i for i, queue in self._inflight.items() if queue]
        if not busy:
            return
        until_silent = min(self._heard[i] for i in busy) + self.step_timeout_s - time.monotonic()
        wait_s = max(0.0, until_silent if timeout is None else min(timeout, until_silent))
        for index, answer in self._wait(busy, wait_s):
            queue = self._inflight.get(index)
            if not queue:  # its worker was already failed in this round
                continue
            if answer is DEAD:
                self._fail_worker(index, self._crash_reason(index, queue))
                continue
            seq, reply = answer
            if seq not in queue:  # sent to a worker that was failed and replaced since
                continue
            pending, position, cmd = queue.pop(seq)
            self._heard[index] = time.monotonic()
            if pending is not None:
                self._forget_if_over(cmd, reply)
                self._resolve(pending, position, reply)
        now = time.monotonic()
        for index in busy:
            queue = self._inflight.get(index)
            if queue and now - self._heard[index] > self.step_timeout_s:
                cmd = _oldest(queue)
                self._fail_worker(index, (
                    f"environment worker {index} gave no answer within env.step_timeout_s={self.step_timeout_s:g}s "
                    f"while running {cmd.op} for episode {cmd.key!r}; it was killed and replaced"))

    def _forget_if_over(self, cmd: Command, reply: Reply) -> None:
        over = not reply.ok or isinstance(cmd, Finish)
        over = over or (isinstance(cmd, Step) and reply.value is not None and reply.value.done)
        if over and cmd.key in self._home:
            self._workers[self._home.pop(cmd.key)].keys.discard(cmd.key)

    def _crash_reason(self, index: int, queue: dict) -> str:
        doing = ""
        if queue:
            cmd = _oldest(queue)
            doing = f" while running {cmd.op} for episode {cmd.key!r}"
        return f"environment worker {index} crashed ({self._death(index)}){doing}; it was replaced"

    def _fail_worker(self, index: int, reason: str) -> None:
        """Kill and replace worker `index`; its episodes are lost with `reason`, and so is what it still owed."""
        worker = self._workers[index]
        self._kill(index)
        for key in worker.keys:
            self._lost[key] = reason
            self._home.pop(key, None)
        owed = self._inflight.pop(index, {})
        self._workers[index] = self._start(index)
        self.restarts += 1
        for pending, position, cmd in owed.values():
            if pending is not None:
                self._resolve(pending, position, Reply(cmd.key, error=reason))

    # -- transport (subclasses) ------------------------------------------------------------

    @abc.abstractmethod
    def _start(self, index: int) -> _Worker:
        """A new worker in slot `index`."""

    @abc.abstractmethod
    def _transmit(self, index: int, commands: list[tuple[int, Command]]) -> None:
        """Send `commands` ((sequence number, command) pairs) to worker `index`; a dead worker is noticed by
        `_wait`, not here."""

    @abc.abstractmethod
    def _wait(self, indices: list[int], timeout: float) -> list[tuple[int, Any]]:
        """(worker index, (sequence number, Reply) or DEAD) for what arrived from `indices` within `timeout`
        seconds, in the order each worker sent it."""

    @abc.abstractmethod
    def _death(self, index: int) -> str:
        """How worker `index` died (after `_wait` reported it DEAD)."""

    @abc.abstractmethod
    def _kill(self, index: int) -> None:
        """Stop worker `index` now, whatever it is doing."""

    @abc.abstractmethod
    def _shutdown(self) -> None:
        """Stop every worker after `close` sent them their last command."""


@dataclass
class _ProcessWorker(_Worker):
    process: Any = None
    conn: Optional[Connection] = None


class EnvPool(BasePool):
    """N environment worker processes on this machine, hosting many episodes each (env.pool=process)."""

    kind = "process"

    def __init__(self, env_factory: Callable[[], Environment], num_workers: int = 2, step_timeout_s: float = 60.0):
        super().__init__(env_factory, num_workers, step_timeout_s)
        self._ctx = mp.get_context(START_METHOD)
        if START_METHOD == "forkserver":
            self._ctx.set_forkserver_preload(["evoharness_rl.rollout.pool"])
        with _fixed_hash_seed():
            self._workers = [self._start(i) for i in range(num_workers)]

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    def _start(self, index: int) -> _ProcessWorker:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main, args=(child, self.env_factory), name=f"evoharness-env-{index}", daemon=True
        )
        process.start()
        child.close()
        return _ProcessWorker(index, process=process, conn=parent)

    def _transmit(self, index: int, commands: list[tuple[int, Command]]) -> None:
        try:
            self._workers[index].conn.send(commands)
        except (OSError, EOFError, BrokenPipeError):
            pass  # the worker is dead; _wait sees EOF

    def _wait(self, indices: list[int], timeout: float) -> list[tuple[int, Any]]:
        conns = {self._workers[i].conn: i for i in indices}
        arrived = []
        for conn in wait(list(conns), timeout=timeout):
            try:
                arrived.append((conns[conn], conn.recv()))
            except (EOFError, OSError):
                arrived.append((conns[conn], DEAD))
        return arrived

    def _death(self, index: int) -> str:
        process = self._workers[index].process
        process.join(1.0)
        code = process.exitcode
        if code is not None and code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def _kill(self, index: int) -> None:
        worker = self._workers[index]
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join()
        worker.conn.close()

    def _shutdown(self) -> None:
        for worker in self._workers:
            try:
                worker.conn.send(None)
            except (OSError, EOFError, BrokenPipeError):
                pass
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for worker in self._workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.conn.close()
