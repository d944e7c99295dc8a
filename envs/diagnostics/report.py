"""The diagnostics report: `table.json`, the learning curves and their figures (`scripts/diagnostics_report.py`).

    rows = eval_rows(run_dir, mode="adaptive", model="grpo", seed=0, bank="none")   # one row per task x variant
    curves = training_curves(grpo_dir)        # per update and task x variant: success, calls needed / not needed
    cycles = bank_cycles(grpo_dir)            # per consolidation cycle: Add / Update / Archive / Skip

A call is *needed* when it is made at the task's decision point in a `needed` episode; every other
call (elsewhere in the episode, or anywhere in a control) is a wasted step. `decision_point_share`
is the share of an evaluation's calls made at a decision point (controls included).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Optional

from evoharness_rl.envs.diagnostics.tasks import DiagnosticsEnv, decision_point, split_task_id

HARNESS = "harness"


def _episodes(folder: Path) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]


def _calls(episode: dict, env: DiagnosticsEnv) -> tuple[int, int]:
    """(calls at a decision point, all calls) of one recorded episode."""
    flags = decision_point(env, episode["task_id"], episode["turns"], episode.get("seed") or 0)
    calls = [flag for flag, turn in zip(flags, episode["turns"]) if turn["action_kind"] == HARNESS]
    return sum(calls), len(calls)


def summarise(episodes: Iterable[dict], env: DiagnosticsEnv) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (task, variant): success, steps, harness calls (all and by verb), decision-point share, prompt tokens."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for episode in episodes:
        if episode.get("error"):
            continue
        task, variant, _, _ = split_task_id(episode["task_id"])
        groups[(task, variant)].append(episode)
    out = {}
    for key, eps in sorted(groups.items()):
        n = len(eps)
        by_verb: dict[str, float] = defaultdict(float)
        at_decision = calls = tokens = 0
        for ep in eps:
            for verb, count in ep["harness_calls"].items():
                by_verb[verb] += count / n
            hits, total = _calls(ep, env)
            at_decision, calls = at_decision + hits, calls + total
            tokens += sum(len(t.get("prompt_ids") or []) for t in ep["turns"])
        wins = sum(ep["won"] for ep in eps)
        out[key] = {
            "success": wins / n,
            "episodes": n,
            "steps": sum(ep["steps"] for ep in eps) / n,
            "harness_calls": calls / n,
            "harness_calls_by_verb": dict(sorted(by_verb.items())),
            "decision_point_calls": at_decision,
            "decision_point_share": at_decision / calls if calls else None,
            "prompt_tokens_per_success": tokens / wins if wins else None,
        }
    return out


def eval_rows(run_dir: str | Path, *, mode: str, model: str, seed: int, bank: str,
              env: Optional[DiagnosticsEnv] = None) -> list[dict]:
    """`table.json` rows of one evaluation run (its `trajectories/` folder)."""
    env = env or DiagnosticsEnv()
    stats = summarise(_episodes(Path(run_dir) / "trajectories"), env)
    return [{"task": task, "variant": variant, "mode": mode, "model": model, "seed": seed, "bank": bank, **row}
            for (task, variant), row in stats.items()]


def training_curves(grpo_dir: str | Path, env: Optional[DiagnosticsEnv] = None) -> list[dict]:
    """Per update of a GRPO run (its kept episodes, `trajectories/update_NNNNNN/`): each task x variant's success
    and calls per episode, split into calls at a needed decision point and the rest."""
    env = env or DiagnosticsEnv()
    rows = []
    for folder in sorted(Path(grpo_dir, "trajectories").glob("update_*")):
        update = int(folder.name.split("_")[1])
        for (task, variant), row in summarise(_episodes(folder), env).items():
            needed = row["decision_point_calls"] / row["episodes"] if variant == "needed" else 0.0
            rows.append({"update": update, "task": task, "variant": variant, "success": row["success"],
                         "calls_needed": needed, "calls_not_needed": row["harness_calls"] - needed})
    return rows


def bank_cycles(grpo_dir: str | Path) -> list[dict]:
    """Each consolidation cycle of a GRPO run's bank (`history.jsonl` beside its bank): operations applied."""
    for path in (Path(grpo_dir) / "history.jsonl", Path(grpo_dir) / "final" / "history.jsonl"):
        if path.is_file():
            lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            return [{"cycle": c.get("cycle"), **{op: c.get("applied", {}).get(op, 0)
                                                   for op in ("add", "update", "archive", "skip")}} for c in lines]
    return []


def updates_to_threshold(curve: list[dict], threshold: float, window: int = 3) -> Optional[int]:
    """The first update at which the success of the needed variants, averaged over `window` updates, reaches
    `threshold` (None: never)."""
    by_update: dict[int, list[float]] = defaultdict(list)
    for row in curve:
        if row["variant"] == "needed":
            by_update[row["update"]].append(row["success"])
    updates = sorted(by_update)
    means = [sum(by_update[u]) / len(by_update[u]) for u in updates]
    for i in range(len(means)):
        recent = means[max(0, i - window + 1): i + 1]
        if len(recent) == min(window, len(means)) and sum(recent) / len(recent) >= threshold:
            return updates[i]
    return None
