"""GRPO probes (scripts/grpo_probe.sh) next to SFT without a bank: greedy success on both splits.

    .venv/bin/python scripts/probe_table.py [PROBE_DIR=outputs/exp] [DEMO_DIR=outputs/demo]

One row per probe directory: success on valid_seen / valid_unseen, each minus SFT's, harness calls
and invalid actions per episode (seen), and the probe's training success per update.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SPLITS = ("valid_seen", "valid_unseen")


def summary(path: Path) -> dict | None:
    file = path / "summary.json"
    return json.loads(file.read_text()) if file.exists() else None


def main(probe_dir: str = "outputs/exp", demo_dir: str = "outputs/demo") -> None:
    sft = {split: summary(Path(demo_dir) / f"eval_sft_none_{split}") for split in SPLITS}
    if not all(sft.values()):
        sys.exit(f"SFT's no-bank evaluations are missing under {demo_dir}; run `make demo` first")
    print("| probe | valid_seen (- SFT) | valid_unseen (- SFT) | harness calls / ep | invalid / ep | training success per update |")
    print("|---|---|---|---|---|---|")
    base = {split: 100 * sft[split]["success_rate"] for split in SPLITS}
    print(f"| SFT | {base['valid_seen']:.1f}% | {base['valid_unseen']:.1f}% | "
          f"{sft['valid_seen']['harness_calls_per_episode']:.2f} | {sft['valid_seen']['invalid_actions_per_episode']:.2f} | |")
    for probe in sorted(p for p in Path(probe_dir).iterdir() if p.is_dir()):
        evals = {split: summary(probe / f"eval_none_{split}") for split in SPLITS}
        if not all(evals.values()):
            continue
        cells = [f"{100 * evals[s]['success_rate']:.1f}% ({100 * evals[s]['success_rate'] - base[s]:+.1f})" for s in SPLITS]
        curve = " ".join(f"{json.loads(line)['success_rate']:.2f}"
                         for line in (probe / "grpo" / "metrics.jsonl").read_text().splitlines() if line.strip())
        seen = evals["valid_seen"]
        print(f"| {probe.name} | {cells[0]} | {cells[1]} | {seen['harness_calls_per_episode']:.2f} | "
              f"{seen['invalid_actions_per_episode']:.2f} | {curve} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
