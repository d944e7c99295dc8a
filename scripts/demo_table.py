"""The `make demo` table: five rows per split (model x bank) from the demo's eval directories.

    python scripts/demo_table.py outputs/demo     # -> outputs/demo/report/table.json and table.md, printed

Rows: the untrained model; SFT and GRPO, each without a bank and with the bank GRPO
evolved. `table.json` is a list of {"model", "bank", "split", "success", "episodes", ...}; every
GRPO row also carries "vs_sft": {"diff", "ci95", "tasks"}, its success minus that of the SFT row
with the same bank and split, paired per task, with a 95% bootstrap interval over the tasks
(`evoharness_rl.eval.report.paired_difference`, fixed seed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from evoharness_rl.eval.report import paired_difference, per_task_success

ROWS = (("untrained", "none"), ("sft", "none"), ("sft", "evolved"), ("grpo", "none"), ("grpo", "evolved"))
SPLITS = ("valid_seen", "valid_unseen")


def eval_dir(demo_dir: Path, model: str, bank: str, split: str) -> Path:
    return demo_dir / f"eval_{model}_{bank}_{split}"


def table(demo_dir: Path) -> list[dict]:
    rows = []
    for model, bank in ROWS:
        for split in SPLITS:
            summary = json.loads((eval_dir(demo_dir, model, bank, split) / "summary.json").read_text())
            row = {"model": model, "bank": bank, "split": split, "success": summary["success_rate"],
                   "episodes": summary["episodes"],
                   "harness_calls_per_episode": summary["harness_calls_per_episode"],
                   "invalid_actions_per_episode": summary["invalid_actions_per_episode"]}
            if model == "grpo":
                row["vs_sft"] = paired_difference(per_task_success(eval_dir(demo_dir, "grpo", bank, split)),
                                                  per_task_success(eval_dir(demo_dir, "sft", bank, split)))
            rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    by = {(r["model"], r["bank"], r["split"]): r for r in rows}
    lines = ["| model | bank | valid_seen | valid_unseen | harness calls/ep (seen) | invalid/ep (seen) |",
             "|---|---|---|---|---|---|"]
    for model, bank in ROWS:
        seen, unseen = by[(model, bank, "valid_seen")], by[(model, bank, "valid_unseen")]
        lines.append(f"| {model} | {bank} | {100 * seen['success']:.1f}% ({seen['episodes']}) | "
                     f"{100 * unseen['success']:.1f}% ({unseen['episodes']}) | "
                     f"{seen['harness_calls_per_episode']:.2f} | {seen['invalid_actions_per_episode']:.2f} |")
    lines += ["", "GRPO minus SFT (same bank, paired per task; 95% bootstrap interval over the tasks):", "",
              "| bank | valid_seen | valid_unseen |", "|---|---|---|"]
    for bank in ("none", "evolved"):
        cells = [_difference(by[("grpo", bank, split)]["vs_sft"]) for split in SPLITS]
        lines.append(f"| {bank} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def _difference(vs: dict) -> str:
    low, high = vs["ci95"]
    return f"{100 * vs['diff']:+.1f} pts [{100 * low:+.1f}, {100 * high:+.1f}] ({vs['tasks']} tasks)"


def main(demo_dir: str) -> None:
    root = Path(demo_dir)
    rows = table(root)
    out = root / "report"
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "table.md").write_text(markdown(rows))
    print(markdown(rows), end="")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "outputs/demo")
