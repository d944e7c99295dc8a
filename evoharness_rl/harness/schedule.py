"""Schedule ablations (paper Table 7): replay a policy's harness-call pattern under controls.

Does the *timing* of a trained policy's harness calls matter, or only how often it calls?
An unmodified eval of the checkpoint gives, per episode, its calls as (step, verb,
argument) and its length. `build_schedule` turns them into a schedule of controls:

- `timing_shuffle`: the same calls (verbs and arguments, in their order) moved to other
  steps of the same episode: a uniform draw of as many distinct steps among the source
  episode's steps (before its winning action, when it won: a call after it would never
  be made), redrawn while it equals the source's steps (unless no other placement
  exists: every such step was a call, or there were none).
- `type_shuffle`: the same steps; the verbs of every call of the run are permuted
  together (one seeded permutation over the run, not per episode: an episode that used a
  single verb would otherwise keep it), so the run's verb mix is the source's exactly and
  only the pairing of verb and moment is broken.
- `frequency_matched`: per episode as many calls as the source episode made, at uniformly
  drawn distinct steps (the same steps timing_shuffle draws from), each verb drawn
  uniformly from the enabled verbs.

Arguments (design decision (b)): a call keeps its source argument while its verb is the
source's verb (timing_shuffle, and type_shuffle calls whose verb the permutation left
unchanged); a call whose verb is new (type_shuffle) or random (frequency_matched) carries
the task's objective -- the one argument every verb accepts in every environment (recall
and track match on its words, commit makes the task itself the subgoal, note records it)
and the query the always_on mode's automatic recall uses. No argument is invented.

During the episode (`EpisodeSchedule`, used by `rollout.episode.Episode`):

- on a scheduled step the policy is still asked (the rollout engine generates for every
  live episode each turn), its response is recorded and discarded, and the scheduled call
  is executed instead; it costs that step of the budget exactly like a call of the policy's
  own (decision (c)), and counts in `harness_calls`;
- design decision (a): a harness call of the policy on a step without a scheduled call is
  refused: the turn is recorded (`Turn.schedule == "refused"`), costs no step, and the
  policy is asked again for that step with the refusal as the feedback of its history /
  conversation. After `retries` refusals on the same step the next harness call counts as
  an invalid action (one step), so a policy that insists cannot stall the episode. Why
  re-ask rather than make every refused call an invalid step: the source policy spent
  about one step in four on harness calls; charging them again as invalid steps would
  shrink the controls' budget for environment actions and confound the ablation with
  a budget cut. The refused turns are deterministic given the seed: greedy decoding
  repeats, and sampled decoding is seeded by the turn number, which counts refused turns.
- calls scheduled after the episode has ended (it succeeded sooner than the source
  episode) are not made; `Trajectory.scheduled_calls` keeps the whole plan.

All draws come from `random.Random` seeded by a string of (seed, kind, episode key), so a
schedule depends on nothing but the seed and the source.
"""

from __future__ import annotations

import functools
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from evoharness_rl.harness.protocol import HARNESS_VERBS, MAX_ARGUMENT_CHARS

CONTROLS = ("timing_shuffle", "type_shuffle", "frequency_matched")  # harness.schedule values other than `policy`
SCHEDULE_FILE = "schedule.json"  # written into the eval's out_dir; the episodes read their calls from it
REFUSAL = ("harness actions are not available on this turn (schedule ablation); "
           "answer with an environment action")


@dataclass(frozen=True)
class ScheduledCall:
    """One harness call at one step (0-based step number = the turn index of an unmodified episode)."""

    step: int
    verb: str
    arg: str


@dataclass(frozen=True)
class SourceEpisode:
    """An unmodified episode's harness-call pattern."""

    length: int  # steps the episode took
    calls: tuple[ScheduledCall, ...]
    objective: str  # the task's objective (the default argument)
    won: bool = False  # its last step was the winning action (no call can be placed there or after it)

    @property
    def slots(self) -> int:
        """Steps a call can be placed at: those before the winning action, or every step of a lost episode."""
        return max(self.length - 1, 0) if self.won else self.length


def episode_key(task_id: str, seed: int) -> str:
    """The key of one episode of a run: its task and its reset seed."""
    return f"{task_id}#{seed}"


def default_argument(objective: str) -> str:
    """The argument of a call whose verb is not the source's (see module docstring)."""
    return " ".join(objective.split())[:MAX_ARGUMENT_CHARS] or "task"


def _rng(seed: int, kind: str, key: str = "") -> random.Random:
    return random.Random(f"schedule:{kind}:{seed}:{key}")


def _moved_steps(rng: random.Random, length: int, n: int, original: list[int]) -> list[int]:
    if n == 0 or n >= length:
        return original  # no other placement exists
    while True:  # at most a few draws: the original placement has probability 1 / C(length, n) <= 1/2
        steps = sorted(rng.sample(range(length), n))
        if steps != original:
            return steps


def build_schedule(kind: str, sources: dict[str, SourceEpisode], seed: int,
                   verbs: tuple[str, ...] = HARNESS_VERBS) -> dict[str, tuple[ScheduledCall, ...]]:
    """{episode key: its calls in step order} of control `kind` over `sources` (keys are the target episodes).

    `verbs`: the verbs enabled in the replay (frequency_matched draws from them; the other controls refuse a
    source whose calls use a disabled verb)."""
    if kind not in CONTROLS:
        raise ValueError(f"unknown schedule {kind!r}; expected one of {', '.join(CONTROLS)}")
    if kind != "frequency_matched":
        used = sorted({c.verb for s in sources.values() for c in s.calls} - set(verbs))
        if used:
            raise ValueError(f"the source episodes call {', '.join(used)}, which this run disables; "
                             "enable the verb (harness.belief/progress/experience) or use frequency_matched")
    keys = sorted(sources)
    table: dict[str, tuple[ScheduledCall, ...]] = {}
    if kind == "type_shuffle":
        pool = [c.verb for key in keys for c in sources[key].calls]
        _rng(seed, kind).shuffle(pool)
        drawn = iter(pool)
        for key in keys:
            src = sources[key]
            table[key] = tuple(ScheduledCall(c.step, v, c.arg if v == c.verb else default_argument(src.objective))
                               for c in src.calls for v in [next(drawn)])
        return table
    for key in keys:
        src, rng = sources[key], _rng(seed, kind, key)
        original = [c.step for c in src.calls]
        if kind == "timing_shuffle":
            steps = _moved_steps(rng, src.slots, len(src.calls), original)
            table[key] = tuple(ScheduledCall(s, c.verb, c.arg) for s, c in zip(steps, src.calls))
        else:  # frequency_matched
            steps = sorted(rng.sample(range(src.slots), min(len(src.calls), src.slots)))
            arg = default_argument(src.objective)
            table[key] = tuple(ScheduledCall(s, rng.choice(verbs), arg) for s in steps)
    return table


# ------------------------------------------------------------------------------ the file


def save_schedule(path: str | os.PathLike, kind: str, source: str, seed: int,
                  table: dict[str, tuple[ScheduledCall, ...]]) -> None:
    from evoharness_rl.fileio import atomic_write_json

    episodes = {key: [[c.step, c.verb, c.arg] for c in calls] for key, calls in sorted(table.items())}
    atomic_write_json(path, {"kind": kind, "source": source, "seed": seed, "episodes": episodes})


def load_schedule(path: str | os.PathLike) -> dict[str, tuple[ScheduledCall, ...]]:
    """The episodes of a schedule file (read once per process and file version: every worker reads it)."""
    stat = os.stat(path)
    return _load(str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _load(path: str, mtime_ns: int, size: int) -> dict[str, tuple[ScheduledCall, ...]]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return {key: tuple(ScheduledCall(int(s), str(v), str(a)) for s, v, a in calls)
            for key, calls in data["episodes"].items()}


# --------------------------------------------------------------------------- one episode


class EpisodeSchedule:
    """The schedule of one episode as the episode loop asks it: a call at this step? refuse or give up?"""

    def __init__(self, calls: tuple[ScheduledCall, ...], retries: int = 2):
        self.calls = {c.step: c for c in calls}
        self.plan = tuple(calls)
        self.retries = retries
        self._refused: dict[int, int] = {}

    def call_at(self, step: int) -> Optional[ScheduledCall]:
        """The scheduled call of `step` (None: the policy's own action is used, unless it is a harness call)."""
        return self.calls.get(step)

    def refuse(self, step: int) -> bool:
        """A policy harness call on unscheduled `step`: True to refuse it and ask again (no step spent); False
        once `retries` refusals were spent on this step (the call is then an invalid action)."""
        n = self._refused.get(step, 0)
        if n >= self.retries:
            return False
        self._refused[step] = n + 1
        return True
