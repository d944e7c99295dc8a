"""Entry points of `evoharness-rl consolidate` and the Experience part of `evoharness-rl report`.

    evoharness-rl consolidate experience.trajectories=RUN_DIR [experience.bank=BANK] out_dir=D
        -> D/bank.json, D/consolidation_report.json, D/bank_report.md

Saved trajectories are consolidated in batches of `experience.window` episodes. Batches
are formed in a canonical order (by a content digest), so the same trajectories give the
same bank whatever files they came in; the input bank is never modified.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from evoharness_rl.experience.bank import ExperienceBank
from evoharness_rl.experience.consolidation import canonical_key, consolidate
from evoharness_rl.experience.evolution import load_bank, make_consolidator
from evoharness_rl.experience.operations import OPS, OpLimits
from evoharness_rl.fileio import atomic_write_json, atomic_write_text
from evoharness_rl.rollout.trajectory import Trajectory, read_jsonl

REPORT_ROWS = 10  # operation rows in the report table (consolidations are grouped into ranges)


def consolidate_command(cfg: Any) -> Path:
    """Consolidate saved trajectories into a bank; -> the written bank path."""
    from evoharness_rl.runlog import RunLogger, progress

    exp = cfg.experience
    if not exp.trajectories:
        raise ValueError("consolidate needs experience.trajectories=<.jsonl file | trajectories/ folder | run directory>")
    trajectories = read_trajectories(exp.trajectories)
    if not trajectories:
        raise ValueError(f"experience.trajectories={exp.trajectories} holds no trajectories (*.jsonl / *.json records)")
    out = Path(cfg.out_dir)
    log = RunLogger(out, getattr(cfg, "logger", None))
    if exp.bank and not Path(exp.bank).exists():
        log.info(f"experience.bank={exp.bank} does not exist yet: starting from an empty bank")
        bank = ExperienceBank(exp.capacity)
    else:
        bank = load_bank(exp)
    consolidator = make_consolidator(exp, cfg.env.name)
    limits = OpLimits(max_field_chars=exp.max_field_chars)
    ordered = sorted(trajectories, key=lambda t: canonical_key(t)[3])  # digest order mixes families in every batch
    batches = [ordered[i : i + exp.window] for i in range(0, len(ordered), exp.window)]
    log.info(f"consolidating {len(trajectories)} episodes in {len(batches)} batches with {consolidator.name}")
    reports = []
    try:
        for batch in progress(batches, description="consolidate"):
            report = consolidate(bank, batch, consolidator, limits=limits, log=log)
            log.metrics(report.update_index, **report.metrics())
            reports.append(report.to_dict())
            bank.save(out / "bank.json")
            atomic_write_json(out / "consolidation_report.json", reports)
    finally:
        log.close()
    atomic_write_text(out / "bank_report.md", bank_report(bank))
    failures = sum(len(r["failures"]) + len(r["rejected"]) for r in reports)
    print(f"bank: {out / 'bank.json'} ({bank.composition()}); failures: {failures}; report: {out / 'bank_report.md'}")
    return out / "bank.json"


def read_trajectories(source: str | os.PathLike) -> list[Trajectory]:
    """Trajectories from a .jsonl/.json file, a folder of them, or a run directory (its trajectories/)."""
    path = Path(source)
    if path.is_dir() and (path / "trajectories").is_dir():
        path = path / "trajectories"
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in (".jsonl", ".json") and p.is_file())
    else:
        raise FileNotFoundError(f"experience.trajectories={source} does not exist")
    out: list[Trajectory] = []
    for file in files:
        if file.suffix == ".jsonl":
            out.extend(read_jsonl(file))
            continue
        data = json.loads(file.read_text(encoding="utf-8"))
        records = data if isinstance(data, list) else [data]
        out.extend(Trajectory.from_dict(r) for r in records if isinstance(r, dict) and "task_id" in r)
    return out


# --------------------------------------------------------------------------- report


def bank_report(source: Any) -> str:
    """Markdown: bank composition and consolidation operations over training (paper Table 4, right).

    `source`: an ExperienceBank, a bank file, a run directory holding one (bank.json,
    or the newest */bank.json below it), or an `ops_history` list.
    """
    bank, history = _resolve(source)
    lines = ["## Experience bank", ""]
    if bank is not None:
        lines += _composition_table(bank) + [""]
    lines += ["### Consolidation operations over training", ""]
    lines += _history_table(history) if history else ["(no consolidation recorded)"]
    return "\n".join(lines) + "\n"


def _resolve(source: Any) -> tuple[ExperienceBank | None, list[dict]]:
    if isinstance(source, ExperienceBank):
        return source, source.ops_history
    if isinstance(source, list):
        return None, source
    path = Path(source)
    if path.is_dir():
        found = [path / "bank.json"] if (path / "bank.json").is_file() else sorted(path.rglob("bank.json"), key=os.path.getmtime)
        if not found:
            raise FileNotFoundError(f"no bank.json in {path}")
        path = found[-1]
    bank = ExperienceBank.load(path)
    return bank, bank.ops_history


def _composition_table(bank: ExperienceBank) -> list[str]:
    lines = [f"Update index {bank.update_index}; capacity {bank.capacity} per category; hash `{bank.content_hash()[:19]}`", "",
             "| category | active | archived | recalls (active) |", "|---|---:|---:|---:|"]
    categories = sorted({e.category for e in bank.entries.values()}, key=lambda c: (c.startswith("task:"), c))
    for category in categories:
        entries = [e for e in bank.entries.values() if e.category == category]
        active = [e for e in entries if e.active]
        lines.append(f"| {category} | {len(active)} | {len(entries) - len(active)} | {sum(e.usage for e in active)} |")
    if not categories:
        lines.append("| (empty) | 0 | 0 | 0 |")
    return lines


def _history_table(history: list[dict]) -> list[str]:
    head = ("| updates | general | task-specific | mistakes | search | Add | Update | Archive | Skip | pruned | failures |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    size = max(1, -(-len(history) // REPORT_ROWS))  # ceil: at most REPORT_ROWS rows
    lines = head.split("\n")
    for start in range(0, len(history), size):
        group = history[start : start + size]
        ops = {op: sum(r.get("ops", {}).get(op, 0) for r in group) for op in OPS}
        comp = group[-1].get("composition", {})
        first, last = group[0].get("update", "?"), group[-1].get("update", "?")
        span = f"{first}" if first == last else f"{first}-{last}"
        lines.append(
            f"| {span} | {comp.get('general', 0)} | {comp.get('task', 0)} | {comp.get('mistakes', 0)} | "
            f"{comp.get('search', 0)} | {ops['add']} | {ops['update']} | {ops['archive']} | {ops['skip']} | "
            f"{sum(r.get('pruned', 0) for r in group)} | {sum(r.get('failures', 0) for r in group)} |"
        )
    return lines
