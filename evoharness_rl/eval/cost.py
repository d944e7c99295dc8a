"""What a run's episodes cost, and what one success costs.

    cost = episode_cost(trajectories, wall_s=123.4)      # eval / collect: summary.json["cost"]
    cost = training_cost(read_metrics(run_dir))          # grpo: from metrics.jsonl

A cost object holds totals over the run's error-free episodes:

- `prompt_tokens`, `generated_tokens`: tokens sent to and produced by the policy (None when the
  backend records no token ids: scripted, replay and openai policies are text in, text out);
- `env_steps`: turns that were not harness calls (environment actions, valid or rejected);
- `harness_calls` (and `harness_calls_by_verb`): turns spent on track / commit / recall / note;
- `consolidator_calls`: LLM calls of Experience consolidation (0 for the heuristic or a frozen bank);
- `wall_s`: wall time of the run (eval: the whole command; grpo: the sum of its updates);
- `episodes`, `successes`, and `per_success`: every quantity above divided by the number of
  successes (None when nothing succeeded: a success was not bought at any price).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from evoharness_rl.harness.protocol import HARNESS_VERBS

PER_SUCCESS = ("prompt_tokens", "generated_tokens", "env_steps", "harness_calls", "consolidator_calls", "wall_s")


def episode_cost(trajectories: Iterable[Any], wall_s: Optional[float] = None, consolidator_calls: int = 0) -> dict:
    """The cost object of a list of `Trajectory` records (errored episodes left out, as in the summary)."""
    ok = [t for t in trajectories if t.error is None]
    by_verb = {v: sum(t.harness_calls.get(v, 0) for t in ok) for v in HARNESS_VERBS}
    has_tokens = any(turn.completion_ids or turn.prompt_ids for t in ok for turn in t.turns)
    harness = sum(by_verb.values())
    return with_per_success({
        "episodes": len(ok),
        "successes": sum(bool(t.won) for t in ok),
        "prompt_tokens": sum(len(turn.prompt_ids) for t in ok for turn in t.turns) if has_tokens else None,
        "generated_tokens": sum(t.generated_tokens for t in ok) if has_tokens else None,
        "env_steps": sum(t.steps for t in ok) - harness,
        "harness_calls": harness,
        "harness_calls_by_verb": by_verb,
        "consolidator_calls": consolidator_calls,
        "wall_s": None if wall_s is None else round(wall_s, 3),
    })


def training_cost(metrics: list[dict]) -> Optional[dict]:
    """The cost object of a GRPO run's rollouts, summed over the updates in its metrics.jsonl (None without any).

    Validation episodes are not counted (they are a measurement, not training)."""
    rows = [m for m in metrics if m.get("update", m.get("step", -1)) >= 0 and "episodes" in m
            and "steps_per_episode" in m]
    if not rows:
        return None

    def total(key: str, per_episode: bool = False) -> float:
        return sum((m.get(key) or 0.0) * (m["episodes"] - m.get("errors", 0) if per_episode else 1) for m in rows)

    by_verb = {v: round(total(f"harness/{v}_per_episode", True)) for v in HARNESS_VERBS}
    harness = sum(by_verb.values())
    steps = round(total("steps_per_episode", True))
    return with_per_success({
        "episodes": int(sum(m["episodes"] - m.get("errors", 0) for m in rows)),
        "successes": round(total("success_rate", True)),
        "prompt_tokens": int(total("prompt_tokens")) if any("prompt_tokens" in m for m in rows) else None,
        "generated_tokens": int(total("generated_tokens")) if any("generated_tokens" in m for m in rows) else None,
        "env_steps": steps - harness,
        "harness_calls": harness,
        "harness_calls_by_verb": by_verb,
        "consolidator_calls": int(total("experience/llm_calls")),
        "wall_s": round(total("update_s"), 3) if any("update_s" in m for m in rows) else None,
        "updates": len(rows),
    })


def with_per_success(cost: dict) -> dict:
    wins = cost["successes"]
    cost["per_success"] = None if not wins else {
        k: (None if cost.get(k) is None else round(cost[k] / wins, 3)) for k in PER_SUCCESS}
    return cost
