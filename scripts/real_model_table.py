"""Markdown tables of scripts/real_model.sh from its eval directories (their summary.json).

    python scripts/real_model_table.py scaffold outputs/real/scaffold_alfworld_env_only ...
    python scripts/real_model_table.py sft outputs/real/eval_sft_real_valid_seen ...

    python scripts/real_model_table.py grpo outputs/real_model/grpo/vllm outputs/real_model/grpo/hf \
        --json outputs/real_model/grpo/report.json

scaffold: one row per run directory named scaffold_<env>_<mode>; sft: eval_sft_<model>_<split>;
grpo: one GRPO run directory per backend (its metrics.jsonl and config.yaml), named after it. grpo
writes the report (--json) as {"<backend>": {"updates", "train_success" (per update),
"val_success" (greedy, after the last update), "seconds_per_update", ...}} and prints the curves,
the cost of an update and the weight-sync check.
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


TARGET = 0.9  # the success both curves must reach


def _first(values: list, target: float = TARGET):
    """1-based number of updates after which `values` first reaches `target` (None: never)."""
    return next((i + 1 for i, v in enumerate(values) if v is not None and v >= target), None)


def _mean(values: list) -> float:
    return sum(values) / len(values) if values else 0.0


def grpo_report(run: Path) -> dict:
    """One backend's run: its curves, cost per update and (vllm) weight-sync check, from metrics.jsonl."""
    import yaml

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    cfg = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    start = next((r for r in rows if r.get("update") == -1), {})
    updates = [r for r in rows if r.get("update", -1) >= 0 and "success_rate" in r]
    val = [start.get("val/success_rate")] + [r.get("val/success_rate") for r in updates]
    stepped = [r for r in updates if r.get("optimizer_steps", 1) > 0]  # all groups tied: no step, nothing changes
    seconds = run.with_suffix(".seconds")
    g = cfg["grpo"]
    report = {
        "updates": len(updates),
        "train_success": [r["success_rate"] for r in updates],
        "val_success": updates[-1].get("val/success_rate") if updates else None,
        "seconds_per_update": _mean([r["update_s"] for r in updates]),
        "val_curve": val,  # greedy validation before the first update, then after each one
        "updates_to_train_target": _first([r["success_rate"] for r in updates]),
        "updates_to_val_target": _first(val[1:]),
        "train_invalid_rate": [r["invalid_rate"] for r in updates],
        "rollout_s_per_update": _mean([r["rollout_s"] for r in updates]),
        "train_s_per_update": _mean([r["train_s"] for r in updates]),
        "sync_s_per_update": _mean([r["sync_consolidate_s"] for r in updates]),
        "generation_tokens_per_s": _mean([r["rollout_tokens_per_s"] for r in updates]),  # generated / rollout wall
        "prompt_tokens_per_s": _mean([r["prompt_tokens"] / r["rollout_s"] for r in updates if r.get("rollout_s")]),
        "update_tokens_per_s": _mean([r["train_tokens_per_s"] for r in stepped]),  # updates with an optimizer step
        "rss_peak_gb": max((r.get("rss_peak_gb", r["rss_gb"]) for r in updates), default=0.0),
        "wall_s": int(seconds.read_text()) if seconds.exists() else None,
        "settings": {"backend": cfg["policy"]["backend"], "model": cfg["model"]["path"],
                     "lora_r": g["lora_r"], "lora_alpha": g["lora_alpha"], "learning_rate": g["learning_rate"],
                     "prompts_per_update": g["prompts_per_update"], "group_size": g["group_size"],
                     "mini_batch_trajectories": g["mini_batch_trajectories"]},
    }
    if any("sync/engine_vs_trainer" in r for r in updates):
        report["sync_engine_vs_trainer_max"] = max(r["sync/engine_vs_trainer"] for r in updates)
        report["sync_engine_change_min"] = min((r["sync/engine_change"] for r in stepped), default=None)
    return report


def _sci(value) -> str:
    return "-" if value is None else f"{value:.1e}"


def _cell(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def grpo(runs: list[Path], json_path: Path | None = None) -> str:
    report = {run.name: grpo_report(run) for run in runs}
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    names = list(report)
    lines = ["| update | " + " | ".join(f"{n} train | {n} greedy val" for n in names) + " |",
             "|---|" + "---|---|" * len(names)]
    for u in range(max(r["updates"] for r in report.values()) + 1):
        cells = []
        for r in report.values():
            train = r["train_success"][u - 1] if 0 < u <= r["updates"] else None
            cells += [_cell(train), _cell(r["val_curve"][u] if u < len(r["val_curve"]) else None)]
        lines.append(f"| {u if u else 'start'} | " + " | ".join(cells) + " |")
    lines += ["", "| backend | updates to >= 0.9 (train / val) | final train / val | s / update (rollout, train, sync) "
              "| rollout tok/s (generated, prompt) | update tok/s | peak RSS | wall "
              "| sync: max abs(engine - trainer), min change over updates that stepped |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, r in report.items():
        sync = (f"{r['sync_engine_vs_trainer_max']:.1e}, {_sci(r['sync_engine_change_min'])}"
                if "sync_engine_vs_trainer_max" in r else "- (shares the trainer's model)")
        final = r["train_success"][-1] if r["train_success"] else None
        lines.append(
            f"| {name} | {r['updates_to_train_target'] or '-'} / {r['updates_to_val_target'] or '-'} | "
            f"{_cell(final)} / {_cell(r['val_success'])} | {r['seconds_per_update']:.1f} "
            f"({r['rollout_s_per_update']:.1f}, {r['train_s_per_update']:.1f}, {r['sync_s_per_update']:.1f}) | "
            f"{r['generation_tokens_per_s']:.0f}, {r['prompt_tokens_per_s']:.0f} | {r['update_tokens_per_s']:.0f} | {r['rss_peak_gb']:.1f} GiB | "
            f"{r['wall_s'] if r['wall_s'] is not None else '-'} s | {sync} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    kind, rest = argv[0], argv[1:]
    json_path = None
    if "--json" in rest:
        i = rest.index("--json")
        json_path, rest = Path(rest[i + 1]), rest[:i] + rest[i + 2:]
    runs = [Path(r) for r in rest]
    if kind == "grpo":
        print(grpo(runs, json_path), end="")
    else:
        print({"scaffold": scaffold, "sft": sft}[kind](runs), end="")


if __name__ == "__main__":
    main(sys.argv[1:])
