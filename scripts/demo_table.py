"""The `make demo` table: five rows per split (model x bank) from the demo's eval directories.

    python scripts/demo_table.py outputs/demo     # -> outputs/demo/report/table.json and table.md, printed

Rows: the untrained model; SFT and GRPO, each without a bank and with the bank GRPO
evolved. `table.json` is a list of {"model", "bank", "split", "success", "episodes"}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROWS = (("untrained", "none"), ("sft", "none"), ("sft", "evolved"), ("grpo", "none"), ("grpo", "evolved"))
SPLITS = ("valid_seen", "valid_unseen")


def table(demo_dir: Path) -> list[dict]:
    rows = []
    for model, bank in ROWS:
        for split in SPLITS:
            summary = json.loads((demo_dir / f"eval_{model}_{bank}_{split}" / "summary.json").read_text())
            rows.append({"model": model, "bank": bank, "split": split, "success": summary["success_rate"],
                         "episodes": summary["episodes"],
                         "harness_calls_per_episode": summary["harness_calls_per_episode"],
                         "invalid_actions_per_episode": summary["invalid_actions_per_episode"]})
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
    return "\n".join(lines) + "\n"


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
