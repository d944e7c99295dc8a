"""The rollout engine: many episodes in flight, generation overlapped with environment steps, exact tokens.

    engine = build_engine(cfg)                                   # pool + backend from a Config
    trajs = engine.run(jobs, episode_settings(cfg, train=True), experience=snapshot)

Two schedules (`env.schedule`), the same records:

`pipelined` (default): an episode's next generation request goes to the backend as soon
as its observation is back, while the environment workers step the episodes whose
responses were generated before. The main thread generates; a helper thread owns the
pool, sends each episode's reset or step to its worker as soon as it is asked for, and
hands back each one's reply as soon as it is in (no episode waits for another's
step). The backend takes the episodes that are ready: token-level
continuous batching where it has a request queue (`StreamingBackend`: hf's own decode
loop and the offline vLLM engine), otherwise one `generate` call per micro-batch of at
most `backend.batch_size` ready requests (vllm_server and the text backends).

`lockstep` (kept for the equivalence test and benchmarks): each turn


    1. every live episode's prompt goes to the backend in ONE `generate` call
       (token backends get prompt ids; text backends get chat messages; the scripted
       teacher's responses were fetched from the workers with the previous step);
    2. the responses go back to the environment workers, all workers in parallel
       (`EnvPool`), which parse them, step the env or run the harness verb, and
       return the completed turn and the next prompt;
    3. finished episodes free their slot; queued jobs are reset in those slots while
       the next `generate` runs (an ALFWorld reset can take seconds).

Results do not depend on timing: every record is kept per episode (never per arrival
order), each request carries its own sampling seed derived from the run seed, task,
sample and turn (`_request_seed`), and token backends sample each request from that seed
alone, so the schedule and the batch an episode landed in do not change its sample
(up to the floating-point differences of different batch shapes).

Tokens (token backends: hf, vllm, vllm_server) are never re-tokenised from text:
- `per_turn`: the prompt ids of a turn are `encode_prompt(messages)`;
- `accumulated`: the prompt ids of turn t are the conversation so far -- the previous
  prompt ids, then the completion ids exactly as generated, then
  `encode_continuation` of the new environment messages. `Trajectory.sequence_ids`
  keeps that sequence, with `loss_mask` 1 exactly on the generated tokens and
  `sequence_logprobs` their sampling logprobs (0.0 elsewhere).
Prompt limits (token backends). `max_prompt_tokens` is a per-turn limit on the prompt
tokens a turn adds: `per_turn`, the turn's whole prompt; `accumulated`, the first prompt
and then each turn's continuation (the environment's new message). A longer one is cut
by `engines.truncate_prompt` (keep its head -- the system message, or the continuation's
turn header -- and its most recent tokens) *before* it enters the sequence, and the turn is
flagged `prompt_truncated`. An accumulated conversation is therefore never cut afterwards:
every turn's prompt is exactly the sequence so far, so the trainer, which scores the whole
`sequence_ids`, scores each completion in the context it was sampled in. Its length is
bounded instead by `max_trajectory_tokens` (the paper's per-trajectory limit): when the
tokens after the first prompt plus a full `max_new_tokens` completion would pass it, the
episode ends before generating -- a failure (never a success), `Trajectory.token_capped`,
counted in `RolloutStats.token_caps`. Text backends see no tokens and are not capped.

Failures are infrastructure errors, recorded in `Trajectory.error`, never policy
failures: a backend `Completion.error` (after the backend's own retries), a worker
crash or step timeout (see `pool.py`).
"""

from __future__ import annotations

import functools
import itertools
import logging
import queue as queues
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from evoharness_rl import reward
from evoharness_rl.engines.base import (Completion, GenerationBackend, GenerationRequest, SamplingSettings,
                                        StreamingBackend, derive_seed)
from evoharness_rl.harness.workspace import ExperienceReader, HarnessSwitches
from evoharness_rl.rollout.episode import EpisodeSettings
from evoharness_rl.rollout.pool import BasePool, EnvPool, Finish, Pending, Reply, Reset, Step, Teacher
from evoharness_rl.rollout.trajectory import Trajectory, Turn
from evoharness_rl.runlog import ProgressBar

log = logging.getLogger(__name__)
_RUN_IDS = itertools.count()  # episode keys stay unique across runs (replay/scripted backends keep per-key state)
SCHEDULES = ("pipelined", "lockstep")


@dataclass
class EpisodeJob:
    """One episode to play."""

    task_id: str
    seed: int = 0  # env reset seed (and the scripted teacher's choices)
    group: int = 0  # GRPO group (the task's index in the update); carried through for the caller
    sample: int = 0  # which of the task's episodes this is (GRPO: member of the group); seeds its sampling
    greedy: bool = False  # decode every turn greedily whatever the run's temperature (grpo.greedy_samples)


@dataclass
class RolloutStats:
    """Counters of the latest `run` (for logs and benchmarks)."""

    episodes: int = 0
    turns: int = 0
    generated_tokens: int = 0
    prompt_truncations: int = 0
    token_caps: int = 0  # episodes ended by max_trajectory_tokens
    errors: int = 0
    generate_s: float = 0.0  # time inside backend.generate
    env_s: float = 0.0  # time waiting for the environment workers (resets overlapping generation are not counted)
    wall_s: float = 0.0
    last_reset_s: float = 0.0  # from the start of the run to the last reset answered (what follows is the tail)


@dataclass
class _Live:
    """Engine-side state of one episode in flight."""

    index: int  # position in `jobs`
    key: str
    job: EpisodeJob
    header: Trajectory  # the empty record from reset (task, family, settings)
    messages: list[dict[str, str]]  # next prompt (per_turn) / messages added since the last response (accumulated)
    started: float
    turns: list[Turn] = field(default_factory=list)
    teacher_response: Optional[str] = None  # scripted: the teacher's next response, fetched with the last step
    request: Optional[GenerationRequest] = None  # this turn's request (its prompt ids go into the Turn)
    keep_head: Optional[int] = None  # prompt tokens of the system message (kept by truncation)
    conversation: list[dict[str, str]] = field(default_factory=list)  # accumulated: the messages encoded so far
    sequence_ids: list[int] = field(default_factory=list)  # accumulated: the whole conversation's ids
    first_prompt: int = 0  # accumulated: tokens of the first prompt (the trajectory cap counts what follows)
    sequence_logprobs: list[float] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)


class RolloutEngine:
    """Plays batches of episodes over an `EnvPool` with one `GenerationBackend`."""

    def __init__(
        self,
        pool: BasePool,
        backend: GenerationBackend,
        tokenizer: Any = None,
        sampling: Optional[SamplingSettings] = None,
        max_prompt_tokens: int = 12288,
        max_live_episodes: int = 64,
        harness_rate: float = 0.5,
        reward_cfg: Any = None,
        slip_rate: float = 0.0,
        max_trajectory_tokens: int = 8192,
        schedule: str = "pipelined",
    ):
        if max_live_episodes < 1:
            raise ValueError(f"max_live_episodes={max_live_episodes} must be >= 1")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule={schedule!r}; expected one of {SCHEDULES}")
        if backend.uses_tokens and tokenizer is None:
            raise ValueError(f"{type(backend).__name__} generates from token ids and needs a tokenizer; got None")
        self.pool = pool
        self.backend = backend
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingSettings()
        self.max_prompt_tokens = max_prompt_tokens
        self.max_trajectory_tokens = max_trajectory_tokens
        self.max_live_episodes = max_live_episodes
        self.harness_rate = harness_rate  # scripted teacher: how often it uses BPE verbs
        self.slip_rate = slip_rate  # scripted teacher: share of turns replaced by a rejected plausible mistake
        self.reward_cfg = reward_cfg  # config.RewardConfig: score each episode once as it ends (record.rewards)
        self.schedule = schedule  # pipelined | lockstep (module docstring)
        self.stats = RolloutStats()
        self._capped: list[_Live] = []  # episodes of this turn at the trajectory cap (`_generate` -> `_step`)
        self._template_checked = False  # accumulated context: the chat template's prefix stability was checked

    # -- public ---------------------------------------------------------------------------

    def run(
        self,
        jobs: list[EpisodeJob],
        settings: EpisodeSettings,
        experience: Optional[ExperienceReader] = None,
        on_finish: Optional[Callable[[int, Trajectory], None]] = None,
        update_index: int = 0,
    ) -> list[Trajectory]:
        """Play every job; returns the trajectories in the order of `jobs`.

        `experience` is one frozen snapshot for the whole batch; `on_finish(i, traj)` is
        called as soon as job i is over (eval writes its record there); `update_index`
        is the GRPO update u used by the reward's diversity schedule.
        """
        if settings.context == "accumulated":
            self._check_template()
        self._start = time.monotonic()
        self.stats = RolloutStats(episodes=len(jobs))
        self._settings, self._on_finish, self._update_index = settings, on_finish, update_index
        self._results: list[Optional[Trajectory]] = [None] * len(jobs)
        self._bar = ProgressBar(len(jobs), "episodes")
        version = self.pool.set_experience(experience)
        run_id = next(_RUN_IDS)
        queue = deque((i, f"{run_id}:{i}", job) for i, job in enumerate(jobs))
        live: dict[str, _Live] = {}
        try:
            if self.schedule == "pipelined":
                self._run_pipelined(queue, live, version)
            else:
                self._run_lockstep(queue, live, version)
        finally:
            self._abandon(live)
            self._bar.close()
            self.stats.wall_s = time.monotonic() - self._start
        return self._results  # type: ignore[return-value]

    def _check_template(self) -> None:
        """Accumulated context with a token backend: warn once (one line) when the chat template is not
        prefix-stable across turns (`engines.tokens.prefix_stability_problem`)."""
        if self._template_checked or not self.backend.uses_tokens:
            return
        from evoharness_rl.engines.tokens import prefix_stability_problem

        self._template_checked = True
        problem = prefix_stability_problem(self.tokenizer)
        if problem:
            log.warning(problem)

    def close(self) -> None:
        self.pool.close()
        self.backend.release()

    def __enter__(self) -> "RolloutEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- schedules ---------------------------------------------------------------------------

    def _run_lockstep(self, queue: deque, live: dict[str, _Live], version: int) -> None:
        resets = self._submit_resets(queue, live, version)
        while live or resets is not None:
            completions = self._generate(list(live.values()))
            if resets is not None:
                self._admit(resets, live)
            self._step(completions, live)
            resets = self._submit_resets(queue, live, version)

    def _run_pipelined(self, queue: deque, live: dict[str, _Live], version: int) -> None:
        """Generate for the ready episodes while the env thread steps the others (module docstring)."""
        streaming = isinstance(self.backend, StreamingBackend) and self.backend.streams
        driver = _StreamDriver(self) if streaming else _BatchDriver(self)
        envs = _EnvThread(self.pool, resets_in_flight=self.pool.num_workers)
        ready: deque[_Live] = deque()  # observation back, waiting for the backend
        resetting = 0  # slots taken by resets not answered yet (in flight or held back by the env thread)
        at_env = 0  # items (resets, steps) the workers have not answered yet
        try:
            while True:
                free = self.max_live_episodes - len(live) - resetting
                # One item per episode, so each starts as soon as its own reset is back. The env thread keeps as many
                # resets in flight as there are workers (a worker answers quick turns beside its reset: pool.py) and
                # sends the next one the moment one is answered, so no worker idles while this thread generates.
                while queue and free > 0:
                    batch = [queue.popleft()]
                    envs.put(("reset", batch), self._reset_commands(batch, version), reset=True)
                    resetting += 1
                    at_env += 1
                    free -= 1
                if not (live or resetting):
                    break
                idle = not driver.wants(len(ready), at_env) and not driver.busy
                t0 = time.monotonic()
                answered = envs.take(block=idle)
                if idle:
                    self.stats.env_s += time.monotonic() - t0
                at_env -= len(answered)
                for (kind, payload), replies in answered:
                    if kind == "reset":
                        resetting -= len(payload)
                        turns = self._admit_replies(payload, replies, live)
                    elif kind == "capped":
                        self._end_capped(payload, live, replies[0])
                        continue
                    else:
                        ep, completion = payload
                        turns = [ep] if self._fold(ep, completion, live, replies, 0) else []
                    for ep in turns:  # a next turn: its request, or the end at the trajectory cap
                        if self._prepare(ep):
                            ready.append(ep)
                        else:
                            envs.put(("capped", ep), [Finish(ep.key, capped=True)])
                            at_env += 1
                if not (driver.wants(len(ready), at_env) or driver.busy):
                    continue  # a batch is still forming: wait for the environment
                for ep, completion in driver.advance(ready):
                    at_env += 1
                    if completion.error is not None:
                        envs.put(("step", (ep, completion)), [Finish(ep.key)])
                    else:
                        envs.put(("step", (ep, completion)), self._step_commands(ep.key, completion))
        finally:
            envs.stop()

    # -- admission ---------------------------------------------------------------------------

    def _submit_resets(self, queue: deque, live: dict[str, _Live], version: int) -> Optional[tuple]:
        """Reset queued jobs into free slots; the replies are collected after the next generate."""
        free = self.max_live_episodes - len(live)
        if not queue or free <= 0:
            return None
        batch = [queue.popleft() for _ in range(min(free, len(queue)))]
        return batch, self.pool.submit(self._reset_commands(batch, version))

    def _reset_commands(self, batch: list, version: int) -> list[Any]:
        commands: list[Any] = []
        for _, key, job in batch:
            commands.append(Reset(key, job.task_id, job.seed, self._settings, version))
            if self._needs_teacher:
                commands.append(Teacher(key, self.harness_rate, self.slip_rate))
        return commands

    def _admit(self, resets: tuple, live: dict[str, _Live]) -> None:
        batch, pending = resets
        self._admit_replies(batch, self._collect(pending), live)

    def _admit_replies(self, batch: list, replies: list[Reply], live: dict[str, _Live]) -> list[_Live]:
        """Start the episodes whose reset succeeded (returned, in `batch` order); record the failed ones."""
        started = []
        self.stats.last_reset_s = time.monotonic() - self._start
        stride = 2 if self._needs_teacher else 1
        for n, (index, key, job) in enumerate(batch):
            reply = next((r for r in replies[n * stride:(n + 1) * stride] if not r.ok), replies[n * stride])
            if not reply.ok:  # the reset, or (scripted) the teacher's first response
                record = Trajectory(task_id=job.task_id, family="", env="", seed=job.seed, error=reply.error)
                self._done(index, record)
                continue
            update = reply.value
            state = _Live(index, key, job, update.trajectory, update.messages, time.monotonic())
            if self._needs_teacher:
                state.teacher_response = replies[n * stride + 1].value
            live[key] = state
            started.append(state)
        return started

    # -- one turn -----------------------------------------------------------------------------

    def _generate(self, episodes: list[_Live]) -> dict[str, Completion]:
        """One backend call with the prompts of `episodes` (lockstep: every live episode); those at the
        trajectory cap are set aside in `self._capped` (`_step` ends them)."""
        self._capped = [ep for ep in episodes if not self._prepare(ep)]
        episodes = [ep for ep in episodes if ep.request is not None]
        if not episodes:
            return {}
        return {ep.key: c for ep, c in zip(episodes, self._generate_batch(episodes))}

    def _prepare(self, ep: _Live) -> bool:
        """Build this turn's request into `ep.request` (building extends an accumulated sequence, so it
        happens once per turn); False, with no request, when the episode is at the trajectory cap."""
        ep.request = self._request(ep)
        if self._at_cap(ep):
            ep.request = None
            return False
        return True

    def _generate_batch(self, episodes: list[_Live]) -> list[Completion]:
        """One `generate` call with the requests `_prepare` built for `episodes`."""
        requests = [ep.request for ep in episodes]
        t0 = time.monotonic()
        completions = self.backend.generate(requests, self.sampling)
        self.stats.generate_s += time.monotonic() - t0
        if len(completions) != len(requests):
            raise RuntimeError(
                f"{type(self.backend).__name__}.generate returned {len(completions)} completions "
                f"for {len(requests)} requests; a backend must answer every request, in order"
            )
        return completions

    def _request(self, ep: _Live) -> GenerationRequest:
        teacher = None
        if ep.teacher_response is not None:
            teacher = functools.partial(_constant, ep.teacher_response)
        request = GenerationRequest(messages=ep.messages, key=ep.key, teacher=teacher, seed=self._request_seed(ep),
                                    greedy=ep.job.greedy)
        if self.backend.uses_tokens:
            request.prompt_ids, request.prompt_truncated = self._prompt_ids(ep)
        return request

    def _request_seed(self, ep: _Live) -> Optional[int]:
        """Sampling seed of this turn: from the run's seed, the task, the sample and the turn (never repeats)."""
        if self.sampling.seed is None:
            return None
        job = ep.job
        return derive_seed(self.sampling.seed, job.group, job.sample, job.seed, len(ep.turns))

    def _step(self, completions: dict[str, Completion], live: dict[str, _Live]) -> None:
        """Send every response to its worker (one submission); fold the replies into the episodes."""
        commands: list[Any] = [Finish(ep.key, capped=True) for ep in self._capped]
        positions: dict[str, int] = {}
        for key, completion in completions.items():
            positions[key] = len(commands)
            if completion.error is not None:
                commands.append(Finish(key))  # drop the episode from its worker
            else:
                commands.extend(self._step_commands(key, completion))
        replies = self._collect(self.pool.submit(commands)) if commands else []
        for ep, reply in zip(self._capped, replies):
            self._end_capped(ep, live, reply)
        self._capped = []
        for key, completion in completions.items():
            self._fold(live[key], completion, live, replies, positions[key])

    def _step_commands(self, key: str, completion: Completion) -> list[Any]:
        """What the worker runs for one response: the step, then (scripted) the teacher's next response."""
        if self._needs_teacher:
            return [Step(key, completion.text), Teacher(key, self.harness_rate, self.slip_rate)]
        return [Step(key, completion.text)]

    def _fold(self, ep: _Live, completion: Completion, live: dict[str, _Live], replies: list[Reply], at: int
              ) -> bool:
        """Fold one response and its worker replies (from `at`) into `ep`; True while the episode goes on."""
        if completion.error is not None:
            self._fail(ep, live, f"generation failed: {completion.error}")
            return False
        for reply in replies[at:at + (2 if self._needs_teacher else 1)]:  # the step, and the teacher's next response
            if not reply.ok:  # a worker can die between the two: the step answered, the teacher not
                self._fail(ep, live, reply.error)
                return False
        return self._advance(ep, live, completion, replies, at)

    def _advance(self, ep: _Live, live: dict[str, _Live], completion: Completion, replies: list[Reply], at: int
                 ) -> bool:
        """Record the completed turn; finish the episode (False) or keep its next prompt (True)."""
        update = replies[at].value
        self._record_turn(ep, update.turn, completion)
        if self._needs_teacher:
            ep.teacher_response = replies[at + 1].value
        if update.done:
            del live[ep.key]
            self._done(ep.index, self._assemble(ep, update.trajectory))
            return False
        ep.messages = update.messages
        return True

    def _at_cap(self, ep: _Live) -> bool:
        """Accumulated context: the next completion might pass max_trajectory_tokens (see module docstring)."""
        if not ep.sequence_ids:
            return False
        return len(ep.sequence_ids) - ep.first_prompt + self.sampling.max_new_tokens > self.max_trajectory_tokens

    def _end_capped(self, ep: _Live, live: dict[str, _Live], reply: Reply) -> None:
        if not reply.ok:
            self._fail(ep, live, reply.error)
            return
        del live[ep.key]
        self.stats.token_caps += 1
        if ep.turns:  # the record ends with the last completion: the continuation after it was never sampled from
            end = len(ep.turns[-1].prompt_ids) + len(ep.turns[-1].completion_ids)
            del ep.sequence_ids[end:], ep.sequence_logprobs[end:], ep.loss_mask[end:]
        self._done(ep.index, self._assemble(ep, reply.value))

    def _record_turn(self, ep: _Live, turn: Turn, completion: Completion) -> None:
        request = ep.request
        assert request is not None
        turn.prompt_ids = list(request.prompt_ids)
        turn.completion_ids = list(completion.completion_ids)
        turn.logprobs = list(completion.logprobs)
        turn.prompt_truncated = request.prompt_truncated
        turn.check_tokens()
        ep.turns.append(turn)
        self.stats.turns += 1
        self.stats.generated_tokens += len(turn.completion_ids)
        self.stats.prompt_truncations += request.prompt_truncated
        if self._settings.context == "accumulated" and self.backend.uses_tokens:
            ep.sequence_ids.extend(turn.completion_ids)
            ep.sequence_logprobs.extend(turn.logprobs)
            ep.loss_mask.extend([1] * len(turn.completion_ids))

    # -- tokens -------------------------------------------------------------------------------

    def _prompt_ids(self, ep: _Live) -> tuple[list[int], bool]:
        """This turn's prompt ids (per_turn: fresh; accumulated: the sequence so far, extended by this turn's
        continuation), what the turn adds cut by the rule (see module docstring)."""
        from evoharness_rl.engines.tokens import (continuation_head_length, encode_continuation, encode_prompt,
                                                  system_head_length, truncate_prompt)

        if ep.keep_head is None:
            ep.keep_head = system_head_length(self.tokenizer, ep.messages)
        if self._settings.context == "per_turn":
            return truncate_prompt(encode_prompt(self.tokenizer, ep.messages), self.max_prompt_tokens, ep.keep_head)
        if not ep.sequence_ids:
            added, cut = truncate_prompt(encode_prompt(self.tokenizer, ep.messages), self.max_prompt_tokens,
                                         ep.keep_head)
            ep.first_prompt = len(added)
        else:
            last = ep.turns[-1].completion_ids
            added = encode_continuation(self.tokenizer, ep.messages, last, ep.conversation)
            cut = len(added) > self.max_prompt_tokens
            if cut:
                head = continuation_head_length(self.tokenizer, ep.messages, last, ep.conversation)
                added, cut = truncate_prompt(added, self.max_prompt_tokens, min(head, self.max_prompt_tokens - 1))
        ep.conversation.extend(ep.messages)
        ep.sequence_ids.extend(added)
        ep.sequence_logprobs.extend([0.0] * len(added))
        ep.loss_mask.extend([0] * len(added))
        return list(ep.sequence_ids), cut

    # -- endings ------------------------------------------------------------------------------

    def _assemble(self, ep: _Live, record: Trajectory) -> Trajectory:
        record.turns = ep.turns
        record.sequence_ids = ep.sequence_ids
        record.sequence_logprobs = ep.sequence_logprobs
        record.loss_mask = ep.loss_mask
        record.wall_s = time.monotonic() - ep.started
        return record

    def _fail(self, ep: _Live, live: dict[str, _Live], error: str) -> None:
        """End `ep` as an infrastructure error (not a policy failure)."""
        del live[ep.key]
        record = self._assemble(ep, Trajectory.from_dict(ep.header.to_dict()))
        _tally(record)
        record.error = error
        self._done(ep.index, record)

    def _done(self, index: int, record: Trajectory) -> None:
        if record.error is not None:
            self.stats.errors += 1
        elif self.reward_cfg is not None:  # the one place an episode is scored (GRPO reads it from the record)
            record.rewards = reward.reward_components(record, self.reward_cfg, self._update_index)
        self._results[index] = record
        self._bar.advance()
        if self._on_finish is not None:
            self._on_finish(index, record)

    def _abandon(self, live: dict[str, _Live]) -> None:
        """After an exception: free the episodes still in the workers."""
        try:
            self.pool.abandon(list(live))
        except Exception:  # noqa: BLE001 - the original exception is the one to report
            pass

    def _collect(self, pending: Pending) -> list[Reply]:
        """Wait for the workers (the time counted as env_s: what generation did not hide)."""
        t0 = time.monotonic()
        replies = self.pool.collect(pending)
        self.stats.env_s += time.monotonic() - t0
        return replies

    @property
    def _needs_teacher(self) -> bool:
        return bool(getattr(self.backend, "needs_teacher", False))


def _constant(text: str) -> str:
    return text


# --------------------------------------------------------------------------- pipelined schedule


class _EnvThread:
    """Owns the pool during a pipelined run.

    Each item (a tag and its commands) goes to its workers as soon as it is put; the
    thread waits on the workers and hands each item's replies back to the main thread as
    soon as that item's own commands are answered, whatever the workers still run for
    others. So an episode whose step is done never waits for another episode's step, and
    the workers' replies are read while the main thread is generating.
    """

    POLL_S = 0.002  # while work is in flight, a new item waits at most this long to go out

    def __init__(self, pool: BasePool, resets_in_flight: int = 1):
        self.pool = pool
        self.resets_in_flight = resets_in_flight  # reset items sent and not answered, at most
        self._held: deque = deque()  # reset items waiting for one of those places, in the order they were put
        self._resetting: set[Pending] = set()  # the reset submissions in flight
        self._inbox: queues.SimpleQueue = queues.SimpleQueue()
        self._outbox: queues.SimpleQueue = queues.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="evoharness-env", daemon=True)
        self._thread.start()

    def put(self, tag: Any, commands: list[Any], reset: bool = False) -> None:
        """Send `commands` (a `reset` item waits here while `resets_in_flight` others are unanswered)."""
        self._inbox.put((tag, commands, reset))

    def take(self, block: bool) -> list[tuple[Any, list[Reply]]]:
        """Every answered item (at least one when `block`); re-raises the thread's error."""
        answered = []
        while block and not answered:
            try:
                answered.append(self._outbox.get(timeout=1.0))
            except queues.Empty:
                if not self._thread.is_alive():
                    raise RuntimeError("the rollout engine's environment thread stopped unexpectedly") from None
        while True:
            try:
                answered.append(self._outbox.get_nowait())
            except queues.Empty:
                break
        for item in answered:
            if isinstance(item, BaseException):
                raise item
        return answered

    def stop(self) -> None:
        """Let the work in flight finish (the pool is the caller's again afterwards)."""
        self._inbox.put(None)
        self._thread.join()

    def _loop(self) -> None:
        stopping = False
        try:
            while not (stopping and not self.pool.busy):
                items = []
                if not stopping and not self.pool.busy:
                    items.append(self._inbox.get())  # nothing in flight: sleep until there is work
                while not stopping:
                    try:
                        items.append(self._inbox.get_nowait())
                    except queues.Empty:
                        break
                for item in items:
                    if item is None:
                        stopping = True
                    elif item[2]:
                        self._held.append(item)
                    else:
                        self.pool.submit(item[1], tag=item[0])
                self._release_resets()
                for pending in self.pool.answered(timeout=self.POLL_S):  # waits on the workers, not the inbox
                    if pending in self._resetting:
                        self._resetting.discard(pending)
                        self._release_resets()  # before the main thread hears of it: the worker is free now
                    self._outbox.put((pending.tag, pending.replies))
        except BaseException as err:  # noqa: BLE001 - handed to the main thread, which raises it
            self._outbox.put(err)

    def _release_resets(self) -> None:
        while self._held and len(self._resetting) < self.resets_in_flight:
            tag, commands, _ = self._held.popleft()
            self._resetting.add(self.pool.submit(commands, tag=tag))


class _BatchDriver:
    """Backends without a request queue: one `generate` call per micro-batch of ready episodes.

    A call costs about as much for one request as for many (on small models the per-token
    overhead dominates), so the driver waits for a batch: it generates once the ready
    episodes are a full micro-batch, or at least as many as those still at the environment
    (the two halves then alternate, each generating while the other steps), or when
    nothing is left at the environment to wait for.
    """

    busy = False  # nothing is held between calls

    def __init__(self, engine: RolloutEngine):
        self.engine = engine
        self.size = getattr(engine.backend, "micro_batch", None) or engine.max_live_episodes

    def wants(self, ready: int, at_env: int) -> bool:
        return ready > 0 and (ready >= min(self.size, at_env) or at_env == 0)

    def advance(self, ready: deque) -> Iterable[tuple[_Live, Completion]]:
        if not ready:
            return []
        batch = [ready.popleft() for _ in range(min(self.size, len(ready)))]
        return zip(batch, self.engine._generate_batch(batch))


class _StreamDriver:
    """Streaming backends (vLLM's engine): ready requests join the running batch; one engine step per call."""

    def __init__(self, engine: RolloutEngine):
        self.engine = engine
        self.waiting: dict[str, _Live] = {}  # request key -> episode

    @property
    def busy(self) -> bool:
        return bool(self.waiting)

    def wants(self, ready: int, at_env: int) -> bool:  # a request queue batches by itself: submit at once
        return ready > 0

    def advance(self, ready: deque) -> list[tuple[_Live, Completion]]:
        engine, backend = self.engine, self.engine.backend
        t0 = time.monotonic()
        while ready:
            ep = ready.popleft()
            backend.submit(ep.request, engine.sampling)  # built by `RolloutEngine._prepare`
            self.waiting[ep.key] = ep
        done = backend.poll() if self.waiting else []
        engine.stats.generate_s += time.monotonic() - t0
        return [(self.waiting.pop(key), completion) for key, completion in done]


def _tally(record: Trajectory) -> None:
    """Counters of a partial record, recomputed from its turns."""
    record.steps = len(record.turns)
    record.invalid_count = sum(t.action_kind == "invalid" for t in record.turns)
    record.repeat_count = sum(t.repeated for t in record.turns)
    calls: dict[str, int] = {}
    for t in record.turns:
        if t.action_kind == "harness" and t.verb:
            calls[t.verb] = calls.get(t.verb, 0) + 1
    record.harness_calls = calls


# --------------------------------------------------------------------------- from a Config


def episode_settings(cfg: Any, train: bool = False, max_steps: Optional[int] = None) -> EpisodeSettings:
    """EpisodeSettings from the harness and env sections (`max_steps` overrides the budget)."""
    h, env = cfg.harness, cfg.env
    budget = max_steps if max_steps is not None else (env.max_steps_train if train else env.max_steps_eval)
    return EpisodeSettings(
        mode=h.mode,
        switches=HarnessSwitches(belief=h.belief, progress=h.progress, experience=h.experience),
        context=env.context,
        prompt_style=env.prompt_style,
        prompt_variant=env.prompt_variant,
        max_steps=budget,
        recall_k=env.recall_k,
        progress_capacity=h.progress_capacity,
        history_length=h.history_length,
    )


def sampling_settings(cfg: Any, train: bool = False) -> SamplingSettings:
    """Decoding settings of a Config: GRPO rollouts (`train`) sample at grpo.temperature; eval and collect
    decode at policy.temperature (0, greedy, by default)."""
    p = cfg.policy
    return SamplingSettings(temperature=cfg.grpo.temperature if train else p.temperature, top_p=p.top_p,
                            max_new_tokens=p.max_new_tokens, seed=cfg.seed)


def make_pool(env_factory: Callable[[], Any], env_cfg: Any) -> BasePool:
    """The environment pool `env_cfg.pool` names (process: this machine; ray: Ray actors, possibly on other nodes)."""
    if env_cfg.pool == "ray":
        from evoharness_rl.rollout.ray_pool import RayEnvPool

        return RayEnvPool(env_factory, env_cfg.num_workers, env_cfg.step_timeout_s, address=env_cfg.ray_address,
                          cpus_per_worker=env_cfg.ray_cpus_per_worker)
    return EnvPool(env_factory, env_cfg.num_workers, env_cfg.step_timeout_s)


def build_engine(cfg: Any, backend: Optional[GenerationBackend] = None) -> RolloutEngine:
    """The pool (cfg.env) and backend (cfg.policy/cfg.model) of a Config, wired into an engine."""
    from evoharness_rl.engines import make_backend
    from evoharness_rl.envs import env_factory

    backend = backend if backend is not None else make_backend(cfg)
    pool = make_pool(env_factory(cfg.env), cfg.env)
    return RolloutEngine(
        pool,
        backend,
        tokenizer=getattr(backend, "tokenizer", None),
        sampling=sampling_settings(cfg),
        max_prompt_tokens=cfg.policy.max_prompt_tokens,
        max_live_episodes=cfg.env.max_live_episodes,
        harness_rate=cfg.policy.harness_rate,
        reward_cfg=cfg.reward,
        slip_rate=cfg.policy.teacher_slip_rate,
        max_trajectory_tokens=cfg.policy.max_trajectory_tokens,
        schedule=cfg.env.schedule,
    )
