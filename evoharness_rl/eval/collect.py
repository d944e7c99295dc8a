"""`evoharness-rl collect`: teacher traces with the BPE interface -> an SFT dataset.

    summary = collect(cfg)    # policy=scripted (the env's expert) or policy=openai (any LLM endpoint)

The teacher plays the split exactly as `eval` does (same engine, same fixed task order,
same resumable per-episode records in `out_dir/trajectories/`), in the harness mode of
`harness.mode`. Then:

- `out_dir/trajectories.jsonl`: the successful, error-free episodes only (what `sft`
  reads when `sft.data` points at this directory);
- `out_dir/dataset/`: those episodes as next-action conversations (each turn's exact
  prompt and the teacher's response; `sft/data.py` builds and saves them);
- `out_dir/summary.json`: the eval summary of every episode plus a `collection` block
  (episodes, successes, examples): the data-quality gate to read before training.

A collection with no successful episode is an error that says how many episodes ran,
how many succeeded and how many errored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from evoharness_rl.eval.evaluate import SUMMARY_FILE, run_eval
from evoharness_rl.fileio import atomic_write_json
from evoharness_rl.rollout.engine import RolloutEngine
from evoharness_rl.rollout.trajectory import write_jsonl
from evoharness_rl.runlog import RunLogger

TRAJECTORIES_FILE = "trajectories.jsonl"
DATASET_DIR = "dataset"
TEACHER_SUCCESS_WARNING = 0.9  # below this success rate the log warns that the teacher is weak


def collect(cfg: Any, engine: Optional[RolloutEngine] = None) -> dict[str, Any]:
    """Run the teacher, keep its successful episodes, write them and their SFT dataset; returns the summary."""
    from evoharness_rl.sft.data import build_examples, save_dataset

    result = run_eval(cfg, engine)
    out = Path(cfg.out_dir)
    trajectories = result.trajectories
    won = [t for t in trajectories if t.won and t.error is None and t.turns]
    errors = sum(t.error is not None for t in trajectories)
    if not won:
        from evoharness_rl.errors import UserError

        first = next((t.error.splitlines()[0] for t in trajectories if t.error), "")
        raise UserError(
            f"collect: {len(trajectories)} episodes collected, 0 succeeded ({errors} errored"
            + (f"; first: {first[:300]}" if first else "") + "); nothing to train on. "
            f"See {out / SUMMARY_FILE} and {out / 'trajectories'}: check the teacher (policy.backend="
            f"{cfg.policy.backend}), the step budget (env.max_steps_eval={cfg.env.max_steps_eval}) and the data."
        )
    write_jsonl(out / TRAJECTORIES_FILE, won)
    examples = build_examples(won, result.prompt_version, context=cfg.env.context, unique=cfg.sft.dedup)
    save_dataset(examples, out / DATASET_DIR, cfg.sft.validation_fraction, cfg.seed)
    summary = dict(result.summary)
    summary["collection"] = {
        "episodes": len(trajectories),
        "successful": len(won),
        "errors": errors,
        "examples": len(examples),
        "trajectories": TRAJECTORIES_FILE,
        "dataset": DATASET_DIR,
    }
    atomic_write_json(out / SUMMARY_FILE, summary)
    _log_gate(cfg, summary)
    return summary


def _log_gate(cfg: Any, summary: dict) -> None:
    log = RunLogger(cfg.out_dir, cfg.logger)
    c = summary["collection"]
    log.info(f"collect: {c['successful']}/{c['episodes']} episodes succeeded ({c['errors']} errored) -> "
             f"{c['examples']} examples in {Path(cfg.out_dir) / DATASET_DIR}")
    if (summary["success_rate"] or 0.0) < TEACHER_SUCCESS_WARNING:
        log.warning(f"teacher success rate {summary['success_rate']} is below {TEACHER_SUCCESS_WARNING}: "
                    "the dataset covers the tasks unevenly")
    log.close()
