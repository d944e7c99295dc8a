"""Markdown tables of scripts/real_model.sh from its eval directories (their summary.json).

    python scripts/real_model_table.py scaffold outputs/real/scaffold_alfworld_env_only ...
    python scripts/real_model_table.py sft outputs/real/eval_sft_real_valid_seen ...

scaffold: one row per run directory named scaffold_<env>_<mode>; sft: eval_sft_<model>_<split>.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

MODES = {"env_only": "ReAct (env_only)", "always_on": "EvoHarness-Base (always_on)", "adaptive": "adaptive"}


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text(encoding="utf-8"))


def cell(s: dict) -> str:
    return f"{100 * s['success_rate']:.0f}% ({round(s['success_rate'] * s['episodes'])}/{s['episodes']})"


def scaffold(runs: list[Path]) -> str:
    lines = ["| env | harness | success | invalid actions / ep | harness calls / ep | steps / ep |",
             "|---|---|---|---|---|---|"]
    for run in runs:
        _, env, mode = run.name.split("_", 2)
        s = summary(run)
        lines.append(f"| {env} | {MODES.get(mode, mode)} | {cell(s)} | {s['invalid_actions_per_episode']:.2f} | "
                     f"{s['harness_calls_per_episode']:.2f} | {s['steps']:.1f} |")
    return "\n".join(lines) + "\n"


def sft(runs: list[Path]) -> str:
    by = {}
    for run in runs:
        model, split = run.name.removeprefix("eval_sft_").split("_", 1)
        by[(model, split)] = summary(run)
    lines = ["| model (SFT) | valid_seen | valid_unseen | invalid actions / ep (seen) | harness calls / ep (seen) |",
             "|---|---|---|---|---|"]
    for model in dict.fromkeys(m for m, _ in by):
        seen, unseen = by[(model, "valid_seen")], by[(model, "valid_unseen")]
        lines.append(f"| {model} | {cell(seen)} | {cell(unseen)} | {seen['invalid_actions_per_episode']:.2f} | "
                     f"{seen['harness_calls_per_episode']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    kind, runs = argv[0], [Path(r) for r in argv[1:]]
    print({"scaffold": scaffold, "sft": sft}[kind](runs), end="")


if __name__ == "__main__":
    main(sys.argv[1:])
