"""The cost object: totals over error-free episodes and per success (eval records, GRPO metrics)."""

from __future__ import annotations

import pytest

from evoharness_rl.eval.cost import episode_cost, training_cost
from evoharness_rl.rollout.trajectory import Trajectory, Turn


def _turn(i: int, kind: str, prompt: int, completion: int, verb: str | None = None) -> Turn:
    return Turn(index=i, messages=[], response="", action_kind=kind, action="x", verb=verb,
                prompt_ids=[1] * prompt, completion_ids=[2] * completion, logprobs=[0.0] * completion)


def test_episode_cost_counts_tokens_steps_calls_and_divides_by_successes():
    won = Trajectory(task_id="a", family="f", env="e", won=True, steps=3, harness_calls={"track": 1},
                     turns=[_turn(0, "harness", 10, 2, "track"), _turn(1, "env", 12, 3), _turn(2, "env", 14, 1)])
    lost = Trajectory(task_id="b", family="f", env="e", won=False, steps=2, harness_calls={"note": 2},
                      turns=[_turn(0, "harness", 5, 5, "note"), _turn(1, "harness", 5, 5, "note")])
    broken = Trajectory(task_id="c", family="f", env="e", error="worker died", turns=[_turn(0, "env", 99, 99)])
    cost = episode_cost([won, lost, broken], wall_s=8.0, consolidator_calls=2)
    assert cost["episodes"] == 2 and cost["successes"] == 1
    assert cost["prompt_tokens"] == 46 and cost["generated_tokens"] == 16
    assert cost["env_steps"] == 2 and cost["harness_calls"] == 3
    assert cost["harness_calls_by_verb"] == {"track": 1, "commit": 0, "recall": 0, "note": 2}
    assert cost["per_success"] == {"prompt_tokens": 46, "generated_tokens": 16, "env_steps": 2, "harness_calls": 3,
                                   "consolidator_calls": 2, "wall_s": 8.0}
    assert episode_cost([lost])["per_success"] is None  # nothing succeeded: no price per success


def test_training_cost_sums_updates_and_leaves_validation_out():
    rows = [
        {"step": -1, "update": -1, "val/success_rate": 0.5},  # validation before the first update
        {"step": 0, "update": 0, "episodes": 8, "errors": 0, "success_rate": 0.25, "steps_per_episode": 4.0,
         "harness/track_per_episode": 0.5, "harness/commit_per_episode": 0.0, "harness/recall_per_episode": 0.0,
         "harness/note_per_episode": 0.25, "generated_tokens": 100, "prompt_tokens": 1000, "update_s": 2.5,
         "experience/llm_calls": 0.0},
        {"step": 1, "update": 1, "episodes": 8, "errors": 0, "success_rate": 0.5, "steps_per_episode": 3.0,
         "harness/track_per_episode": 0.0, "harness/commit_per_episode": 1.0, "harness/recall_per_episode": 0.0,
         "harness/note_per_episode": 0.0, "generated_tokens": 50, "prompt_tokens": 500, "update_s": 1.5,
         "experience/llm_calls": 1.0},
    ]
    cost = training_cost(rows)
    assert cost["updates"] == 2 and cost["episodes"] == 16 and cost["successes"] == 6
    assert cost["harness_calls_by_verb"] == {"track": 4, "commit": 8, "recall": 0, "note": 2}
    assert cost["env_steps"] == 56 - 14 and cost["harness_calls"] == 14
    assert cost["prompt_tokens"] == 1500 and cost["generated_tokens"] == 150 and cost["wall_s"] == 4.0
    assert cost["consolidator_calls"] == 1
    assert cost["per_success"]["generated_tokens"] == pytest.approx(25.0)
    assert training_cost([rows[0]]) is None
