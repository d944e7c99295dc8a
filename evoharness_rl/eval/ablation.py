"""Schedule ablations in `eval`: read the unmodified source run, check it, write this run's schedule.

    source = read_source(cfg)                          # before any model or worker starts
    table = plan_schedule(cfg, source, jobs)           # {episode key: calls}, keyed by this run's episodes
    save_schedule(out / SCHEDULE_FILE, ...)            # the episodes (in the workers) read their calls from it

The controls and the design decisions are in `evoharness_rl/harness/schedule.py` and
docs/ablations.md. The source must be an unmodified (`harness.schedule=policy`) adaptive
eval on the same environment and split, with an episode for every episode this run plays
(same tasks, episodes per task and episode numbers); anything else is a one-line error.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evoharness_rl.errors import UserError
from evoharness_rl.harness.schedule import ScheduledCall, SourceEpisode, build_schedule, episode_key
from evoharness_rl.harness.workspace import HarnessSwitches
from evoharness_rl.rollout.trajectory import Trajectory


class ScheduleSourceError(UserError, ValueError):
    """harness.schedule_source cannot be used; the message says why and what to point it at."""


@dataclass
class ScheduleSource:
    path: Path  # the source's trajectories/ folder
    seed: int  # the source run's base seed (episode e of a task was reset with seed + e)
    episodes: dict[tuple[str, int], Trajectory]  # (task id, episode number) -> record


def read_source(cfg: Any) -> ScheduleSource:
    """The source run of `harness.schedule_source`, checked against this run's env, split and mode."""
    given = cfg.harness.schedule_source
    where = f"harness.schedule_source={given}"
    root = Path(given)
    folder = root / "trajectories" if (root / "trajectories").is_dir() else root
    run_dir = folder.parent if folder.name == "trajectories" else root
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        raise ScheduleSourceError(f"{where} holds no episode records (trajectories/*.json); point it at the out_dir "
                                  "of an unmodified eval of the same checkpoint on the same split")
    meta = _run_meta(run_dir)
    if meta is None:
        raise ScheduleSourceError(f"{where} has no summary.json or fingerprint.json beside its trajectories/: "
                                  "not an eval run directory")
    checks = (("env", meta["env"], cfg.env.name, "env.name"), ("split", meta["split"], cfg.split, "split"),
              ("harness mode", meta["mode"], "adaptive", "harness.mode"),
              ("schedule", meta["schedule"], "policy", "harness.schedule"))
    for what, theirs, ours, key in checks:
        if theirs != ours:
            raise ScheduleSourceError(f"{where} was recorded with {what} {theirs!r}, this run needs {ours!r} "
                                      f"({key}); use an unmodified adaptive eval of the same split as the source")
    episodes: dict[tuple[str, int], Trajectory] = {}
    for file in files:
        try:
            traj = Trajectory.from_dict(json.loads(file.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise ScheduleSourceError(f"{where}: {file.name} is not an episode record ({err})") from None
        episodes[(traj.task_id, traj.seed - meta["seed"])] = traj
    return ScheduleSource(folder, meta["seed"], episodes)


def _run_meta(run_dir: Path) -> dict | None:
    """env, split, mode, schedule and seed of a run, from its summary.json or (unfinished) fingerprint.json."""
    summary, fp = run_dir / "summary.json", run_dir / "fingerprint.json"
    if summary.is_file():
        s = json.loads(summary.read_text(encoding="utf-8"))
        return {"env": s.get("env"), "split": s.get("split"), "mode": s.get("mode"), "seed": int(s.get("seed", 0)),
                "schedule": s.get("schedule", "policy")}
    if fp.is_file():
        ident = json.loads(fp.read_text(encoding="utf-8")).get("identity", {})
        return {"env": ident.get("env", {}).get("name"), "split": ident.get("split"),
                "mode": ident.get("harness", {}).get("mode"), "seed": int(ident.get("seed", 0)),
                "schedule": ident.get("harness", {}).get("schedule", "policy")}
    return None


def source_episode(traj: Trajectory) -> SourceEpisode:
    """An unmodified episode's calls: turn t of such an episode is its step t."""
    calls = tuple(ScheduledCall(t.index, t.verb, t.action) for t in traj.turns if t.action_kind == "harness" and t.verb)
    return SourceEpisode(length=traj.steps, calls=calls, objective=traj.objective, won=bool(traj.won))


def plan_schedule(cfg: Any, source: ScheduleSource, jobs: list) -> dict[str, tuple[ScheduledCall, ...]]:
    """This run's schedule: every job's source episode (an error names the first one missing), under the control."""
    where = f"harness.schedule_source={cfg.harness.schedule_source}"
    sources: dict[str, SourceEpisode] = {}
    missing, errored = [], []
    for job in jobs:
        traj = source.episodes.get((job.task_id, job.seed - cfg.seed))
        if traj is None:
            missing.append(job)
        elif traj.error is not None or any(t.schedule for t in traj.turns):
            errored.append(job)
        else:
            sources[episode_key(job.task_id, job.seed)] = source_episode(traj)
    if missing:
        first = missing[0]
        raise ScheduleSourceError(
            f"{where} has no episode {first.seed - cfg.seed} of task {first.task_id} ({len(missing)} of {len(jobs)} "
            "episodes missing): it was recorded on another task set; use a source eval with the same split, data, "
            "limit and episodes_per_task")
    if errored:
        raise ScheduleSourceError(f"{where}: the episode of task {errored[0].task_id} errored or was itself "
                                  f"scheduled ({len(errored)} such); re-run the source eval (it resumes) first")
    h = cfg.harness
    verbs = HarnessSwitches(belief=h.belief, progress=h.progress, experience=h.experience).verbs()
    try:
        return build_schedule(h.schedule, sources, cfg.seed, verbs)
    except ValueError as err:
        raise ScheduleSourceError(f"{where}: {err}") from None


def table_hash(table: dict[str, tuple[ScheduledCall, ...]]) -> str:
    """What the schedule is (its calls), for the eval's fingerprint: a changed source changes it."""
    flat = {k: [[c.step, c.verb, c.arg] for c in calls] for k, calls in sorted(table.items())}
    return hashlib.sha256(json.dumps(flat, sort_keys=True).encode()).hexdigest()[:16]
