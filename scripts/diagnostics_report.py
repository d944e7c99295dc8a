"""The report of `make diagnostics`: table.json, table.md, curves.json and figures under DIR/report/.

    .venv/bin/python scripts/diagnostics_report.py outputs/diagnostics

It reads what scripts/diagnostics.sh wrote (DIR/eval/<model>_<mode>_s<seed>_<bank>/, DIR/grpo_<mode>_s<seed>/)
and writes:
- table.json: one row per task, variant, mode, model, seed and bank (envs/diagnostics/report.py says what each
  field means);
- table.md: success and calls per episode, mean over seeds with the range, per task and variant; the targets
  (docs/diagnostics.md) checked seed by seed;
- curves.json + success_vs_update.png (training success of the needed variants per update and mode, with the
  updates each mode took to reach the threshold), calls_vs_update.png (calls at a needed decision point and all
  others, per update), bank_ops.png (Add / Update / Archive / Skip per consolidation cycle).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path
from statistics import mean

from evoharness_rl.envs.diagnostics.report import bank_cycles, eval_rows, training_curves, updates_to_threshold
from evoharness_rl.fileio import atomic_write_json, atomic_write_text

EVAL_NAME = re.compile(r"^(?P<model>sft|grpo)_(?P<mode>env_only|always_on|adaptive)_s(?P<seed>\d+)_(?P<bank>none|evolved)$")
GRPO_NAME = re.compile(r"^grpo_(?P<mode>env_only|always_on|adaptive)_s(?P<seed>\d+)$")
THRESHOLD = 0.8  # training success of the needed variants (3-update mean) that counts as "learned"


def collect_rows(root: Path) -> list[dict]:
    rows = []
    for run in sorted((root / "eval").glob("*")):
        match = EVAL_NAME.match(run.name)
        if match and (run / "summary.json").is_file():
            rows += eval_rows(run, mode=match["mode"], model=match["model"], seed=int(match["seed"]), bank=match["bank"])
    return rows


def collect_curves(root: Path) -> dict[str, dict]:
    curves = {}
    for run in sorted(root.glob("grpo_*")):
        match = GRPO_NAME.match(run.name)
        if match:
            curve = training_curves(run)
            curves[run.name] = {"mode": match["mode"], "seed": int(match["seed"]), "curve": curve,
                                "updates_to_threshold": updates_to_threshold(curve, THRESHOLD),
                                "bank_cycles": bank_cycles(run)}
    return curves


def _cell(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    if len(values) == 1 or max(values) == min(values):
        return f"{mean(values):.{digits}f}"
    return f"{mean(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def sampled_control_calls(curves: dict[str, dict], task: str, seed: int) -> tuple[float, float] | None:
    """Calls per control episode of adaptive GRPO's sampled rollouts: (the first update, i.e. the SFT policy, the
    mean of the last 3 updates), or None without that run."""
    for c in curves.values():
        if c["mode"] == "adaptive" and c["seed"] == seed:
            by: dict[int, float] = {r["update"]: r["calls_needed"] + r["calls_not_needed"] for r in c["curve"]
                                    if r["task"] == task and r["variant"] == "control"}
            if by:
                last = sorted(by)[-3:]
                return by[min(by)], mean(by[u] for u in last)
    return None


def checks(rows: list[dict], curves: dict[str, dict] | None = None) -> list[str]:
    """The issue's targets, seed by seed (docs/diagnostics.md): one line each, PASS or MISS with the numbers.

    The control's call target compares greedy calls; where greedy SFT makes none (its calls are below the argmax),
    it compares the sampled rollouts of adaptive GRPO's first update (the SFT policy) with its last three."""
    get = {(r["task"], r["variant"], r["mode"], r["model"], r["seed"], r["bank"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    tasks = sorted({r["task"] for r in rows})
    lines = []

    def line(ok: bool, text: str) -> None:
        lines.append(f"- {'PASS' if ok else 'MISS'}: {text}")

    for task in tasks:
        for seed in seeds:
            g = get.get((task, "needed", "adaptive", "grpo", seed, "evolved")) or get.get(
                (task, "needed", "adaptive", "grpo", seed, "none"))
            s = get.get((task, "needed", "adaptive", "sft", seed, g["bank"] if g else "none"))
            e = get.get((task, "needed", "env_only", "grpo", seed, "none"))
            if g and s:
                line(g["success"] >= s["success"] + 0.15,
                     f"{task} seed {seed}: adaptive GRPO {g['success']:.2f} >= SFT {s['success']:.2f} + 0.15")
            if g and e:
                line(g["success"] >= e["success"] + 0.30,
                     f"{task} seed {seed}: adaptive GRPO {g['success']:.2f} >= env_only GRPO {e['success']:.2f} + 0.30")
            gc = get.get((task, "control", "adaptive", "grpo", seed, "none"))
            sc = get.get((task, "control", "adaptive", "sft", seed, "none"))
            if gc and sc:
                before, after, how = sc["harness_calls"], gc["harness_calls"], "greedy"
                sampled = sampled_control_calls(curves or {}, task, seed)
                if not before and sampled:
                    (before, after), how = sampled, "sampled, update 0 -> last 3"
                fall = 1 - after / before if before else None
                line(fall is not None and fall >= 0.8 and gc["success"] >= sc["success"],
                     f"{task} control seed {seed}: calls {before:.2f} -> {after:.2f} per episode ({how}; fall "
                     f"{'n/a: SFT makes none' if fall is None else f'{fall:.0%}'}), greedy success "
                     f"{sc['success']:.2f} -> {gc['success']:.2f}")
            if g and g["decision_point_share"] is not None:
                line(g["decision_point_share"] >= 0.8,
                     f"{task} seed {seed}: share of adaptive GRPO's calls at the decision point "
                     f"{g['decision_point_share']:.2f} >= 0.8")
            if task == "experience":
                ev = get.get((task, "needed", "adaptive", "grpo", seed, "evolved"))
                no = get.get((task, "needed", "adaptive", "grpo", seed, "none"))
                if ev and no:
                    line(ev["success"] >= no["success"] + 0.2,
                         f"experience seed {seed}: with the evolved bank {ev['success']:.2f} >= without "
                         f"{no['success']:.2f} + 0.20")
    for seed in seeds:
        for variant in ("needed", "control"):
            a = [get.get((t, variant, "adaptive", "grpo", seed, "evolved")) for t in tasks]
            o = [get.get((t, variant, "always_on", "grpo", seed, "evolved")) for t in tasks]
            if all(a) and all(o):
                sa, so = mean(r["success"] for r in a), mean(r["success"] for r in o)
                ta = [r["prompt_tokens_per_success"] for r in a if r["prompt_tokens_per_success"]]
                to = [r["prompt_tokens_per_success"] for r in o if r["prompt_tokens_per_success"]]
                if ta and to:
                    line(sa >= so - 1e-9 and mean(ta) < mean(to),
                         f"seed {seed} {variant}: adaptive {sa:.2f} vs always_on {so:.2f} success at "
                         f"{mean(ta):.0f} vs {mean(to):.0f} prompt tokens per success")
    return lines


def table_md(rows: list[dict], curves: dict[str, dict]) -> str:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["task"], r["variant"], r["mode"], r["model"], r["bank"])].append(r)
    out = ["# Diagnostics", "", f"Greedy evaluation on valid_seen; mean over seeds "
           f"{sorted({r['seed'] for r in rows})} (range in brackets).", "",
           "| task | variant | mode | model | bank | success | calls / episode | at decision point | steps |",
           "|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(groups):
        g = groups[key]
        shares = [r["decision_point_share"] for r in g if r["decision_point_share"] is not None]
        out.append(f"| {' | '.join(key)} | {_cell([r['success'] for r in g])} | "
                   f"{_cell([r['harness_calls'] for r in g])} | {_cell(shares)} | {_cell([r['steps'] for r in g], 1)} |")
    out += ["", f"## Updates to {THRESHOLD:.0%} training success on the needed variants (3-update mean)", "",
            "| mode | seed | updates |", "|---|---|---|"]
    for name, c in sorted(curves.items(), key=lambda kv: (kv[1]["mode"], kv[1]["seed"])):
        out.append(f"| {c['mode']} | {c['seed']} | {c['updates_to_threshold'] if c['updates_to_threshold'] is not None else 'not reached'} |")
    out += ["", "## Targets, seed by seed", ""] + checks(rows, curves)
    return "\n".join(out) + "\n"


def figures(curves: dict[str, dict], folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"env_only": "tab:grey", "always_on": "tab:blue", "adaptive": "tab:red"}

    def per_update(curve: list[dict], key: str, variant: str = "needed") -> tuple[list[int], list[float]]:
        by: dict[int, list[float]] = defaultdict(list)
        for row in curve:
            if row["variant"] == variant:
                by[row["update"]].append(row[key])
        updates = sorted(by)
        return updates, [mean(by[u]) for u in updates]

    fig, ax = plt.subplots(figsize=(6, 4))
    for c in curves.values():
        ax.plot(*per_update(c["curve"], "success"), color=colours[c["mode"]], alpha=0.8,
                label=f"{c['mode']} s{c['seed']}")
    ax.set(xlabel="update", ylabel="training success (needed variants)", ylim=(0, 1.05))
    ax.axhline(THRESHOLD, color="black", lw=0.5, ls=":")
    ax.legend(fontsize=6, ncol=3)
    fig.tight_layout()
    fig.savefig(folder / "success_vs_update.png", dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
    for c in curves.values():
        if c["mode"] != "adaptive":
            continue
        for ax, variant in zip(axes, ("needed", "control")):
            ax.plot(*per_update(c["curve"], "calls_needed", variant), color="tab:green", label=f"needed s{c['seed']}")
            ax.plot(*per_update(c["curve"], "calls_not_needed", variant), color="tab:red", ls="--",
                    label=f"not needed s{c['seed']}")
            ax.set(title=f"adaptive, {variant} variants", xlabel="update")
    axes[0].set_ylabel("harness calls per episode")
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(folder / "calls_vs_update.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for c in curves.values():
        if c["mode"] == "adaptive" and c["bank_cycles"]:
            cycles = [row["cycle"] for row in c["bank_cycles"]]
            for op, style in (("add", "-"), ("update", "--"), ("archive", ":")):
                ax.plot(cycles, [row[op] for row in c["bank_cycles"]], ls=style, label=f"{op} s{c['seed']}")
    ax.set(xlabel="consolidation cycle", ylabel="operations")
    ax.legend(fontsize=6, ncol=3)
    fig.tight_layout()
    fig.savefig(folder / "bank_ops.png", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the diagnostics folder (DIAG_DIR, default outputs/diagnostics)")
    args = parser.parse_args(argv)
    if not (args.root / "eval").is_dir():
        print(f"error: {args.root}/eval does not exist; run `make diagnostics` (scripts/diagnostics.sh) first",
              file=sys.stderr)
        return 2
    rows = collect_rows(args.root)
    curves = collect_curves(args.root)
    out = args.root / "report"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "table.json", rows)
    atomic_write_json(out / "curves.json", curves)
    atomic_write_text(out / "table.md", table_md(rows, curves))
    figures(curves, out)
    print((out / "table.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
