"""Entry points of `evoharness-rl consolidate` and the Experience part of `evoharness-rl report`.

    evoharness-rl consolidate experience.trajectories=RUN_DIR [experience.bank=BANK] out_dir=D
        -> D/bank.json, D/history.jsonl, D/consolidation_report.json, D/bank_report.md

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
from evoharness_rl.experience.baselines import load_bank
from evoharness_rl.experience.evolution import make_consolidator
from evoharness_rl.experience.history import HISTORY_FILE, save_cycle, start_history
from evoharness_rl.experience.operations import OPS, OpLimits
from evoharness_rl.fileio import atomic_write_json, atomic_write_text
from evoharness_rl.rollout.trajectory import Trajectory, read_jsonl

REPORT_ROWS = 10  # operation rows in the report table (consolidations are grouped into ranges)


def consolidate_command(cfg: Any) -> Path:
    """Consolidate saved trajectories into a bank; -> the written bank path."""
    from evoharness_rl.errors import Refusal, UserError
    from evoharness_rl.runlog import RunLogger, progress

    exp = cfg.experience
    out = Path(cfg.out_dir)
    try:  # every input is checked before anything is written: a refusal leaves out_dir as it was
        trajectories, bank, consolidator = _inputs(cfg)
    except (UserError, FileNotFoundError, ValueError) as err:
        raise Refusal.of(err) from None
    log = RunLogger(out, getattr(cfg, "logger", None))
    limits = OpLimits(max_field_chars=exp.max_field_chars)
    ordered = sorted(trajectories, key=lambda t: canonical_key(t)[3])  # digest order mixes families in every batch
    batches = [ordered[i : i + exp.window] for i in range(0, len(ordered), exp.window)]
    log.info(f"consolidating {len(trajectories)} episodes in {len(batches)} batches with {consolidator.name}")
    reports = []
    start_history(out / HISTORY_FILE, exp.bank or None)
    try:
        for batch in progress(batches, description="consolidate"):
            report = consolidate(bank, batch, consolidator, limits=limits, log=log)
            _stop_if_unreachable(report, exp)
            log.metrics(report.update_index, **report.metrics())
            reports.append(report.to_dict())
            save_cycle(bank, report, out / "bank.json")
            atomic_write_json(out / "consolidation_report.json", reports)
    finally:
        log.close()
    atomic_write_text(out / "bank_report.md", bank_report(bank))
    failures = sum(len(r["failures"]) + len(r["rejected"]) for r in reports)
    print(f"bank: {out / 'bank.json'} ({bank.composition()}); failures: {failures}; report: {out / 'bank_report.md'}")
    return out / "bank.json"


CALL_FAILED = "the consolidator call failed"  # (experience/llm.py's words for a call that got no usable answer)


def _stop_if_unreachable(report: Any, exp: Any) -> None:
    """A batch in which every consolidator call failed (after its retries: an HTTP error, a refused connection)
    ends the run with the first failure, its HTTP status in it, rather than a bank of failed cycles."""
    from evoharness_rl.errors import UserError

    if report.status == "failed" and report.failures and all(CALL_FAILED in f for f in report.failures):
        first = report.failures[0].split(f"{CALL_FAILED}: ", 1)[-1]
        from evoharness_rl.engines.openai import public_url

        where = f"the server at experience.base_url={public_url(exp.base_url)}" if exp.base_url else "the consolidator"
        raise UserError(f"every consolidator call of cycle {report.update_index} failed (first: {first[:300]}); check "
                        f"{where}, then rerun with overwrite=true")


def _inputs(cfg: Any) -> tuple[list[Trajectory], ExperienceBank, Any]:
    """(the trajectories, the starting bank, the consolidator) of a `consolidate` run, or the error naming the field."""
    from evoharness_rl.errors import UserError

    exp = cfg.experience
    if not exp.trajectories:
        raise UserError("consolidate needs experience.trajectories=<.jsonl file | trajectories/ folder | run directory>")
    trajectories = read_trajectories(exp.trajectories)
    if not trajectories:
        raise UserError(f"experience.trajectories={exp.trajectories} holds no trajectories (*.jsonl / *.json records)")
    others = sorted({t.env for t in trajectories if t.env and t.env != cfg.env.name})
    if others:
        raise UserError(f"experience.trajectories={exp.trajectories} holds {', '.join(others)} episodes; a bank is "
                        f"one environment's: consolidate them with env={others[0]} into their own bank")
    if exp.bank and not Path(exp.bank).is_file():
        raise UserError(f"experience.bank={exp.bank!r} does not exist; give an existing bank file, or use "
                        "experience.bank=null to start an empty bank")
    bank = load_bank(exp)  # a damaged bank fails here
    bank.claim_env(cfg.env.name, f"experience.bank={exp.bank}")
    return trajectories, bank, make_consolidator(exp, cfg.env.name)


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
        try:
            if file.suffix == ".jsonl":
                out.extend(read_jsonl(file))
                continue
            data = json.loads(file.read_text(encoding="utf-8"))
            records = data if isinstance(data, list) else [data]
            out.extend(Trajectory.from_dict(r) for r in records if isinstance(r, dict) and "task_id" in r)
        except (ValueError, TypeError, KeyError, AttributeError) as err:  # JSONDecodeError is a ValueError
            raise ValueError(f"{file} is not a trajectory file ({type(err).__name__}: {' '.join(str(err).split())[:120]}); "
                             "remove it or point experience.trajectories at the run's trajectories") from None
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
    head = ("| updates | general | task-specific | mistakes | search | Add | Update | Archive | Skip | redirected | pruned "
            "| failures |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    size = max(1, -(-len(history) // REPORT_ROWS))  # ceil: at most REPORT_ROWS rows
    lines = head.split("\n")
    for start in range(0, len(history), size):
        group = history[start : start + size]
        ops = {op: sum((r.get("chosen") or r.get("ops", {})).get(op, 0) for r in group) for op in OPS}  # as chosen
        comp = group[-1].get("composition", {})
        first, last = group[0].get("update", "?"), group[-1].get("update", "?")
        span = f"{first}" if first == last else f"{first}-{last}"
        lines.append(
            f"| {span} | {comp.get('general', 0)} | {comp.get('task', 0)} | {comp.get('mistakes', 0)} | "
            f"{comp.get('search', 0)} | {ops['add']} | {ops['update']} | {ops['archive']} | {ops['skip']} | "
            f"{sum(sum((r.get('redirected') or {}).values()) for r in group)} | "
            f"{sum(r.get('pruned', 0) for r in group)} | {sum(r.get('failures', 0) for r in group)} |"
        )
    return lines


# ------------------------------------------------------------------ evoharness-rl bank

BANK_USAGE = """evoharness-rl bank show SOURCE [--all]   entries by category and family (--all: archived ones too)
evoharness-rl bank log SOURCE             consolidation cycles with their operations (history.jsonl)
evoharness-rl bank diff SOURCE SOURCE     entries added, archived and changed from the first bank to the second

SOURCE: a bank file, a folder holding bank.json (a GRPO checkpoint, final/, an eval or consolidate
run), or a GRPO run directory (its final/ bank, else its newest checkpoint's)."""


def bank_main(args: list[str]) -> None:
    """`evoharness-rl bank show|log|diff ...` (plain arguments, not Hydra overrides): prints to stdout."""
    import argparse

    from evoharness_rl.errors import UserError

    class Parser(argparse.ArgumentParser):
        def error(self, message: str):  # one line, like every other bad input
            raise UserError(f"bank: {message}; see `evoharness-rl bank -h`")

    parser = Parser(prog="evoharness-rl bank", usage=BANK_USAGE)
    parser.add_argument("action", choices=("show", "log", "diff"))
    parser.add_argument("sources", nargs="+")
    parser.add_argument("--all", action="store_true", help="show: archived entries too")
    ns = parser.parse_args(args)
    wanted = 2 if ns.action == "diff" else 1
    if len(ns.sources) != wanted:
        raise UserError(f"bank {ns.action} takes {wanted} SOURCE{'s' if wanted > 1 else ''}, got {len(ns.sources)}: "
                        f"{' '.join(ns.sources)}")
    if ns.action == "show":
        print(show_bank(ns.sources[0], include_archived=ns.all))
    elif ns.action == "log":
        print(bank_log(ns.sources[0]))
    else:
        print(bank_diff(*ns.sources))


def find_bank(source: str | os.PathLike) -> Path:
    """The bank file SOURCE names (see BANK_USAGE)."""
    from evoharness_rl.errors import UserError

    path = Path(source)
    if path.is_file():
        return path
    if not path.is_dir():
        raise UserError(f"{source} does not exist; give a bank file, a checkpoint or a run directory")
    for candidate in (path / "bank.json", path / "final" / "bank.json"):
        if candidate.is_file():
            return candidate
    checkpoints = sorted((path / "checkpoints").glob("update_*/bank.json"))
    found = checkpoints or sorted(path.rglob("bank.json"), key=os.path.getmtime)
    if not found:
        raise UserError(f"no bank.json in {source} (nor in its final/ or checkpoints/)")
    return found[-1]


def read_cycles(source: str | os.PathLike) -> tuple[Path, list[dict], bool]:
    """(bank file, its cycles, whether they come from history.jsonl): the history beside the bank, else the run
    directory's, else the bank's own compact `ops_history` (no operations listed)."""
    from evoharness_rl.experience.history import HISTORY_FILE, history_path, read_history

    bank_file = find_bank(source)
    for candidate in (history_path(bank_file), Path(source) / HISTORY_FILE):
        if candidate.is_file():
            return bank_file, read_history(candidate), True
    return bank_file, ExperienceBank.load(bank_file).ops_history, False


def show_bank(source: str | os.PathLike, include_archived: bool = False) -> str:
    bank_file = find_bank(source)
    bank = ExperienceBank.load(bank_file)
    entries = [e for e in bank._ordered() if e.active or include_archived]
    active = sum(e.active for e in bank.entries.values())
    lines = [f"bank: {bank_file}", f"version {bank.content_hash()} (cycle {bank.update_index}, capacity {bank.capacity} "
             f"per category); {active} active, {len(bank.entries) - active} archived entries"]
    groups: dict[tuple[str, str], list] = {}
    for entry in entries:
        groups.setdefault((entry.category, entry.family), []).append(entry)
    for (category, family), members in groups.items():
        scope = "" if category.startswith("task:") else (f" of family {family}" if family else " (every family)")
        lines += ["", f"{category}{scope}: {sum(e.active for e in members)} active"
                      + (f", {sum(not e.active for e in members)} archived" if include_archived else "")]
        for e in members:
            extra = [f"when: {e.trigger}"] if e.trigger else []
            extra += [f"avoid: {e.how_to_avoid}"] if e.how_to_avoid else []
            extra += [f"task types: {', '.join(e.task_types)}"] if e.task_types else []
            extra += [f"used {e.usage}x", f"cycle {e.created}" + (f"-{e.updated}" if e.updated != e.created else "")]
            lines.append(f"  [{e.id}]{'' if e.active else ' (archived)'} {e.principle} | " + " | ".join(extra))
    if not entries:
        lines += ["", "(no entries)"]
    return "\n".join(lines)


def bank_log(source: str | os.PathLike) -> str:
    bank_file, cycles, full = read_cycles(source)
    lines = [f"bank: {bank_file}; {len(cycles)} consolidation cycles"
             + ("" if full else " (no history.jsonl beside it: the bank's own summary, without operations)")]
    for c in cycles:
        cycle = c.get("cycle", c.get("update"))
        where = f" (GRPO update {c['update']})" if full and "update" in c else ""
        read = f"read {c['episodes_seen']}/{c['episodes_in_batch']} episodes" if full else f"{c.get('episodes', '?')} episodes"
        chosen = c.get("chosen") or c.get("ops", {})
        head = (f"cycle {cycle}{where} {c.get('status', '')}".rstrip() + f" [{c.get('source', '?')}]: {read}; chosen "
                + ", ".join(f"{op} {chosen.get(op, 0)}" for op in (*OPS, *sorted(set(chosen) - set(OPS)))))
        # (a memory baseline's cycles add their own operations: ExpeL's edit / upvote / downvote)
        redirected = {k: n for k, n in (c.get("redirected") or {}).items() if n}
        if redirected:
            head += "; redirected by the bank " + ", ".join(f"{k.replace('_to_', '->')} {n}" for k, n in redirected.items())
        if full:
            head += f"; bank {str(c.get('bank_before'))[:19]} -> {str(c.get('bank_after'))[:19]}"
        check = c.get("edit_check") or {}
        if check.get("played"):
            head += (f"; edit check: success {check['old_success']:.3f} -> {check['new_success']:.3f} on "
                     f"{check['tasks']} held-out tasks, {'rolled back' if check['rolled_back'] else 'kept'}")
        failures = c.get("failures") or []
        if not isinstance(failures, list):  # the bank's compact summary counts them (history.jsonl lists them)
            head += f"; {failures} failures" if failures else ""
            failures = []
        lines.append(head)
        for op in c.get("operations") if isinstance(c.get("operations"), list) else []:
            lines.append("  " + _operation_line(op))
        for failure in failures:
            lines.append(f"  failed: {failure}")
    return "\n".join(lines)


def _operation_line(op: dict) -> str:
    result = op.get("result", "?")
    head = op.get("op", "?") + (f" -> {result}" if result != op.get("op") else "")
    target = op.get("entry") or op.get("category") or ""
    text = op.get("principle") or op.get("reason") or op.get("bank_reason") or op.get("error") or ""
    line = f"{head} {target}: {text}".replace(" : ", ": ")
    if result == "rejected" and op.get("error") and op.get("error") != text:
        line += f" (rejected: {op['error']})"
    if op.get("evidence"):
        line += f" [evidence: {', '.join(op['evidence'])}]"
    return line


def bank_diff(first: str | os.PathLike, second: str | os.PathLike) -> str:
    files = [find_bank(first), find_bank(second)]
    a, b = (ExperienceBank.load(f) for f in files)
    lines = [f"{name}: {f} ({bank.content_hash()[:19]}, cycle {bank.update_index})"
             for name, f, bank in zip("AB", files, (a, b))]
    added = [e for e in b._ordered() if e.active and (e.id not in a.entries or not a.entries[e.id].active)]
    archived = [e for e in a._ordered() if e.active and (e.id not in b.entries or not b.entries[e.id].active)]
    changed = []
    for e in b._ordered():
        old = a.entries.get(e.id)
        if old is not None and old.active and e.active:
            fields = [f"{k}: {getattr(old, k)!r} -> {getattr(e, k)!r}" for k in ("principle", "trigger", "how_to_avoid",
                                                                                   "subject") if getattr(old, k) != getattr(e, k)]
            if fields:
                changed.append(f"  ~ [{e.id}] " + "; ".join(fields))
    lines += ["", f"added ({len(added)}):"] + [f"  + [{e.id}] {e.category}: {e.principle}" for e in added]
    lines += ["", f"archived or gone ({len(archived)}):"] + [f"  - [{e.id}] {e.category}: {e.principle}" for e in archived]
    lines += ["", f"changed ({len(changed)}):"] + changed
    same = sum(1 for e in b.entries.values() if e.active) - len(added) - len(changed)
    lines += ["", f"unchanged active entries: {same}"]
    return "\n".join(lines)
