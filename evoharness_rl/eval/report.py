"""`evoharness-rl report runs=[dir,...]`: Markdown tables and PNG plots from run directories.

    text = report(["runs/sft_seen", "runs/rl_seen", "runs/rl_unseen", "runs/grpo"], out_dir="runs/report")

- Every run directory with a `summary.json` (eval or collect) is one row of the table of
  its environment and split, laid out like the paper's Table 1 / Table 3: the method
  (ReAct, EvoHarness-Base, EvoHarness, or a memory baseline: ExpeL, ReasoningBank), success rate
  per task family (ALFWorld: Pick, Look, Clean, Heat, Cool, Pick2), the average, the
  score where the environment has one, then harness calls, invalid actions and errors
  per episode. All rates are percentages.
- When runs of the same policy were evaluated on both `valid_seen` and `valid_unseen`,
  a seen-vs-unseen table pairs them (rows keyed by env, policy, model, harness mode).
- Every run directory with a GRPO `metrics.jsonl` gets a plot of success rate and
  harness calls per episode over updates; each split's table gets a per-family bar chart.
- All GRPO runs together get the learning-dynamics panels (`dynamics.png`: validation
  success, harness calls by verb, episode length and Experience operations per
  consolidation cycle -- as the consolidator chose them, with the bank's redirections
  as separate series -- against the update) and a table of the updates each needed to
  reach validation-success thresholds (paper Fig. 8, 3 and 5).
- GRPO runs whose resolved configs differ only in `seed` (and `out_dir`) are seeds of one
  setting: the panels draw their mean with the min-max band, and an "across seeds" table
  gives each setting's validation success as mean and range over its seeds.

Plots are written next to `report.md` in `out_dir` (when given) and linked from it.

`paired_difference(per_task_success(a), per_task_success(b))` compares two evals of the same
tasks: the mean per-task success difference with a 95% paired bootstrap interval
(`scripts/demo_table.py` gives every GRPO row of the demo table its difference to SFT).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional

from evoharness_rl.envs import env_spec
from evoharness_rl.fileio import atomic_write_text
from evoharness_rl.errors import UserError

REPORT_FILE = "report.md"
SPLIT_NAMES = {"valid_seen": "seen", "valid_unseen": "unseen"}
TRAINING_CURVES = (  # (metrics.jsonl key, plot title, scale)
    ("success_rate", "success rate (%)", 100.0),
    ("harness_calls_per_episode", "harness calls / episode", 1.0),
)


class ReportError(UserError, ValueError):
    """A run directory that cannot be reported; the message names it and what was expected."""


# --------------------------------------------------------------------------------- loading


def load_run(run_dir: str | Path) -> dict[str, Any]:
    """{name, dir, summary or None, metrics: [...]}; a directory with neither is an error."""
    path = Path(run_dir)
    if not path.is_dir():
        raise ReportError(f"run directory {path} does not exist")
    summary_file, metrics_file = path / "summary.json", path / "metrics.jsonl"
    summary = json.loads(summary_file.read_text(encoding="utf-8")) if summary_file.exists() else None
    metrics = []
    if metrics_file.exists():
        lines = metrics_file.read_text(encoding="utf-8").splitlines()
        metrics = [json.loads(line) for line in lines if line.strip()]
    if summary is None and not any(_has_curves(m) for m in metrics):
        raise ReportError(f"{path} has no summary.json (eval/collect) and no training metrics.jsonl (grpo)")
    return {"name": path.name, "dir": path, "summary": summary, "metrics": metrics}


def _has_curves(record: dict) -> bool:
    return any(key in record for key, _, _ in TRAINING_CURVES)


# ---------------------------------------------------------------------------------- tables


def _pct(value: Optional[float]) -> str:
    return "–" if value is None else f"{100.0 * value:.1f}"


def _num(value: Optional[float]) -> str:
    return "–" if value is None else f"{value:.2f}"


def family_columns(env: str, summaries: list[dict]) -> list[tuple[str, str]]:
    """[(family key, column title)]: the env's own columns (`EnvSpec.family_columns`, e.g. ALFWorld's six in the
    paper's order) when they cover the families found, else the families found."""
    found = sorted({fam for s in summaries for fam in s.get("per_family", {})})
    spec = env_spec(env)
    columns = spec.family_columns if spec is not None else {}
    if columns and set(found) <= set(columns):
        return list(columns.items())
    return [(fam, fam) for fam in found]


def split_table(env: str, split: str, runs: list[dict]) -> str:
    """One Markdown table: a row per run of this env and split."""
    return markdown_table(*split_rows(env, split, runs))


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join([_row(header), _row(["---"] * len(header))] + [_row(r) for r in rows])


def split_rows(env: str, split: str, runs: list[dict]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of `split_table`."""
    summaries = [r["summary"] for r in runs]
    families = family_columns(env, summaries)
    header = ["Run", "Method", "Mode", "Policy"] + [title for _, title in families]
    header += ["Avg.", "Score", "Harness/ep", "Invalid/ep", "Steps", "Episodes", "Errors"]
    lines = []
    for run, s in zip(runs, summaries):
        per_family = s.get("per_family", {})
        cells = [run["name"], method_label(s), mode_label(s), _policy_label(s)]
        cells += [_pct(per_family.get(key, {}).get("success_rate")) for key, _ in families]
        cells += [_pct(s.get("success_rate")), _num(s.get("score")), _num(s.get("harness_calls_per_episode")),
                  _num(s.get("invalid_actions_per_episode")), _num(s.get("steps")), str(s.get("episodes", 0)),
                  str(s.get("errors", 0))]
        lines.append(cells)
    return header, lines


COST_COLUMNS = (("prompt_tokens", "Prompt tokens"), ("generated_tokens", "Generated tokens"),
                ("env_steps", "Env steps"), ("harness_calls", "Harness calls"),
                ("consolidator_calls", "Consolidator calls"), ("wall_s", "Wall s"))


def run_cost(run: dict) -> Optional[dict]:
    """The run's cost object: eval/collect's summary["cost"], or summed from a GRPO run's metrics."""
    from evoharness_rl.eval.cost import training_cost

    if run["summary"] is not None:
        return run["summary"].get("cost")
    return training_cost(run["metrics"])


def cost_rows(runs: list[dict]) -> Optional[tuple[list[str], list[list[str]]]]:
    """(header, rows): per run its episodes, successes, the totals and the cost of one success (None: no costs)."""
    rows = []
    for run in runs:
        cost = run_cost(run)
        if cost is None:
            continue
        per = cost.get("per_success") or {}
        cells = [run["name"], "grpo (training rollouts)" if run["summary"] is None else "eval",
                 str(cost.get("episodes", "–")), str(cost.get("successes", "–"))]
        cells += [_count(cost.get(key)) for key, _ in COST_COLUMNS]
        cells += [_count(per.get(key)) for key, _ in COST_COLUMNS if key != "consolidator_calls"]
        rows.append(cells)
    if not rows:
        return None
    header = ["Run", "Episodes of", "Episodes", "Successes"] + [title for _, title in COST_COLUMNS]
    header += [f"{title} / success" for key, title in COST_COLUMNS if key != "consolidator_calls"]
    return header, rows


def _count(value: Optional[float]) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.2f}"


def seen_unseen_table(runs: list[dict]) -> Optional[str]:
    """Pairs runs of the same policy on valid_seen and valid_unseen (None when nothing pairs)."""
    pairs: dict[tuple, dict[str, dict]] = {}
    for run in runs:
        s = run["summary"]
        if s.get("split") in SPLIT_NAMES:
            key = (s.get("env"), method_label(s), mode_label(s), _policy_label(s))
            pairs.setdefault(key, {})[SPLIT_NAMES[s["split"]]] = s
    rows = {k: v for k, v in pairs.items() if len(v) == 2}
    if not rows:
        return None
    header = ["Env", "Method", "Mode", "Policy", "Seen SR", "Unseen SR", "Seen harness/ep", "Unseen harness/ep"]
    lines = [_row(header), _row(["---"] * len(header))]
    for (env, method, mode, policy), by in sorted(rows.items(), key=lambda kv: tuple(map(str, kv[0]))):
        seen, unseen = by["seen"], by["unseen"]
        lines.append(_row([env, method, mode, policy, _pct(seen.get("success_rate")), _pct(unseen.get("success_rate")),
                           _num(seen.get("harness_calls_per_episode")), _num(unseen.get("harness_calls_per_episode"))]))
    return "\n".join(lines)


# --------------------------------------------------------------------- paired comparison

BOOTSTRAP_SAMPLES = 10_000  # resamples of the tasks in `paired_difference`
BOOTSTRAP_SEED = 0  # fixed: the same records always give the same interval


def per_task_success(run_dir: str | Path) -> dict[str, float]:
    """{task id: share of its episodes won} over an eval's records (run_dir/trajectories/*.json); errored
    episodes are left out (they say nothing about the policy)."""
    folder = Path(run_dir) / "trajectories"
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        raise ReportError(f"{folder} has no episode records; a paired comparison needs an eval's trajectories/")
    outcomes: dict[str, list[bool]] = {}
    for path in files:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("error") is None:
            outcomes.setdefault(record["task_id"], []).append(bool(record.get("won")))
    return {task: sum(won) / len(won) for task, won in outcomes.items()}


def paired_difference(a: dict[str, float], b: dict[str, float], samples: int = BOOTSTRAP_SAMPLES,
                      seed: int = BOOTSTRAP_SEED) -> dict[str, Any]:
    """Success of `a` minus `b` over the tasks both ran: {"diff": the mean per-task difference, "ci95": [low, high]
    (the 2.5th and 97.5th percentiles of that mean over `samples` resamples of the tasks with replacement, each
    task keeping its pair of outcomes), "tasks": how many}."""
    import numpy as np

    tasks = sorted(a.keys() & b.keys())
    if not tasks:
        raise ReportError(f"no task in common between the two evals ({len(a)} and {len(b)} tasks); compare evals "
                          "of the same split")
    diffs = np.array([a[t] - b[t] for t in tasks], dtype=np.float64)  # [T]
    picks = np.random.default_rng(seed).integers(0, len(diffs), size=(samples, len(diffs)))  # [S, T]
    low, high = np.percentile(diffs[picks].mean(axis=1), [2.5, 97.5])
    return {"diff": float(diffs.mean()), "ci95": [float(low), float(high)], "tasks": len(tasks)}


METHOD_NAMES = {"expel": "ExpeL", "reasoningbank": "ReasoningBank"}  # experience.method -> the paper's row name
MODE_NAMES = {"env_only": "ReAct", "always_on": "EvoHarness-Base", "adaptive": "EvoHarness"}


def method_label(summary: dict) -> str:
    """The paper's name for the row (Table 1): a memory baseline by `experience.method`, else by harness mode --
    ReAct (env_only), EvoHarness-Base (always_on), EvoHarness (adaptive: the SFT/RL policies)."""
    method = (summary.get("experience") or {}).get("method") or "evoharness"
    return METHOD_NAMES.get(method) or MODE_NAMES.get(summary.get("mode", ""), summary.get("mode", "?"))


def mode_label(summary: dict) -> str:
    """The harness mode, with the prompt variant when it is not the full prompt (env.prompt_variant) and the
    schedule when it is not the policy's own (harness.schedule): the row label that tells ablations apart."""
    variant, schedule = summary.get("prompt_variant", "full"), summary.get("schedule", "policy")
    extras = ([] if variant in ("full", None) else [f"{variant} prompt"]) + \
        ([] if schedule in ("policy", None) else [f"{schedule} schedule"])
    return summary.get("mode", "") + (f" ({', '.join(extras)})" if extras else "")


def _policy_label(summary: dict) -> str:
    model = summary.get("model")
    return f"{summary.get('policy', '?')}" + (f" ({Path(model).name})" if model and summary.get("policy") in
                                              ("hf", "vllm", "vllm_server", "openai") else "")


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |"


# ----------------------------------------------------------------------------------- plots


def plot_training(run: dict, out_dir: Path) -> Optional[Path]:
    """Success rate and harness calls per episode over GRPO updates (one PNG per run)."""
    fig = training_figure(run)
    return None if fig is None else _save_png(fig, out_dir / f"{run['name']}_training.png")


def agg_pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no display); imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_png(fig, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    agg_pyplot().close(fig)
    return path


def training_figure(run: dict):
    """The figure of `plot_training` (None for a run without training curves)."""
    records = [m for m in run["metrics"] if _has_curves(m)]
    if not records:
        return None
    plt = agg_pyplot()
    fig, axes = plt.subplots(1, len(TRAINING_CURVES), figsize=(10, 3.5))
    for ax, (key, title, scale) in zip(axes, TRAINING_CURVES):
        points = [(m["step"], scale * m[key]) for m in records if m.get(key) is not None]
        if points:
            ax.plot(*zip(*points), marker="o", markersize=3, label="rollouts")
        val = [(m["step"], scale * m[f"val/{key}"]) for m in run["metrics"] if m.get(f"val/{key}") is not None]
        if val:
            ax.plot(*zip(*val), marker="s", markersize=4, label="validation")
            ax.legend()
        ax.set_xlabel("update")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    fig.suptitle(run["name"])
    fig.tight_layout()
    return fig


def plot_families(env: str, split: str, runs: list[dict], out_dir: Path) -> Optional[Path]:
    """Grouped bars: success rate per task family, one bar per run."""
    fig = families_figure(env, split, runs)
    return None if fig is None else _save_png(fig, out_dir / f"success_{env}_{split}.png")


def families_figure(env: str, split: str, runs: list[dict]):
    """The figure of `plot_families` (None when no run has families)."""
    families = family_columns(env, [r["summary"] for r in runs])
    if not families:
        return None
    plt = agg_pyplot()
    width = 0.8 / max(len(runs), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(families)), 3.5))
    for i, run in enumerate(runs):
        per_family = run["summary"].get("per_family", {})
        values = [100.0 * (per_family.get(key, {}).get("success_rate") or 0.0) for key, _ in families]
        ax.bar([j + i * width for j in range(len(families))], values, width, label=run["name"])
    ax.set_xticks([j + width * (len(runs) - 1) / 2 for j in range(len(families))], [t for _, t in families])
    ax.set_ylabel("success rate (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"{env} {split}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------ learning dynamics

DYNAMICS = (  # (title, [(metrics key, legend)], scale) -- one panel each, every GRPO run a line
    ("validation success (%)", [("val/success_rate", "")], 100.0),
    ("harness calls / episode by verb", [(f"harness/{v}_per_episode", v) for v in ("track", "commit", "recall",
                                                                                  "note")], 1.0),
    ("episode length (steps)", [("steps_per_episode", "")], 1.0),
    ("Experience operations / cycle",  # the consolidator's own choices; the bank's redirections as their own series
     [(f"experience/chosen/{op}", op) for op in ("add", "update", "archive", "skip")]
     + [(f"experience/redirected/{kind}", f"redirected {kind.replace('_to_', '->')}")
        for kind in ("add_to_update", "add_to_skip", "update_to_skip")], 1.0),
)
# Runs logged before operations were split into chosen / applied / redirected have one series per operation as
# the bank applied it (redirections included); they are drawn under that name.
LEGACY_SERIES = {f"experience/chosen/{op}": (f"experience/{op}", f"{op} (applied)")
                 for op in ("add", "update", "archive", "skip")}
THRESHOLDS = (0.3, 0.5)  # validation success rates for the updates-to-threshold table


def _training_runs(runs: list[dict]) -> list[dict]:
    return [r for r in runs if any(_has_curves(m) for m in r["metrics"])]


def _series(run: dict, key: str) -> list[tuple[float, float]]:
    return [(m["step"], m[key]) for m in run["metrics"] if m.get(key) is not None]


SEED_SUFFIX = re.compile(r"[_-]?seed\d+$")
NOT_SETTING = ("seed", "out_dir", "resume")  # config keys that do not make two runs different settings


def seed_groups(runs: list[dict]) -> list[tuple[str, list[dict]]]:
    """GRPO runs whose resolved `config.yaml` differs only in NOT_SETTING, together: [(label, runs)].

    A run without a config.yaml is its own group. Labels: the run's name, or for several
    seeds the first run's name without its `_seedN` suffix.
    """
    groups: dict[str, list[dict]] = {}
    for run in _training_runs(runs):
        groups.setdefault(_setting_key(run), []).append(run)
    labelled = []
    for members in groups.values():
        label = members[0]["name"] if len(members) == 1 else SEED_SUFFIX.sub("", members[0]["name"])
        labelled.append((label or members[0]["name"], members))
    return labelled


def _setting_key(run: dict) -> str:
    config_file = Path(run["dir"]) / "config.yaml"
    if not config_file.exists():
        return f"run:{run['dir']}"
    import yaml

    config = yaml.safe_load(config_file.read_text(encoding="utf-8")) or {}
    for key in NOT_SETTING:
        config.pop(key, None)
    return json.dumps(config, sort_keys=True, default=str)


def _mean_band(members: list[dict], key: str) -> list[tuple[float, float, float, float]]:
    """(update, mean, min, max) over the seeds at every update that all of them logged."""
    by_seed = [dict(_series(run, key)) for run in members]
    common = sorted(set.intersection(*(set(s) for s in by_seed))) if by_seed else []
    rows = []
    for update in common:
        values = [s[update] for s in by_seed]
        rows.append((update, sum(values) / len(values), min(values), max(values)))
    return rows


def across_seeds_table(runs: list[dict]) -> Optional[str]:
    """Markdown: per setting with several seeds, validation success at each validation point (mean, range)."""
    groups = [(label, members) for label, members in seed_groups(runs)
              if len(members) > 1 and _mean_band(members, "val/success_rate")]
    if not groups:
        return None
    lines = [_row(["Setting", "seeds", "validation success by update: mean (min-max)"]), _row(["---"] * 3)]
    for label, members in groups:
        points = "; ".join(f"{int(u) + 1}: {_pct(mean)} ({_pct(lo)}-{_pct(hi)})"
                           for u, mean, lo, hi in _mean_band(members, "val/success_rate"))
        lines.append(_row([label, str(len(members)), points]))
    return "\n".join(lines)


def updates_to_threshold(runs: list[dict]) -> Optional[str]:
    """Markdown: the first update whose validation success reaches each threshold (paper Fig. 8's table)."""
    runs = [r for r in _training_runs(runs) if _series(r, "val/success_rate")]
    if not runs:
        return None
    header = ["Run", "first val.", "best val."] + [f"updates to {100 * t:.0f}%" for t in THRESHOLDS]
    lines = [_row(header), _row(["---"] * len(header))]
    for run in runs:
        points = _series(run, "val/success_rate")
        reached = [next((str(int(u) + 1) for u, v in points if v >= t), "not reached") for t in THRESHOLDS]
        lines.append(_row([run["name"], _pct(points[0][1]), _pct(max(v for _, v in points))] + reached))
    return "\n".join(lines)


def plot_dynamics(runs: list[dict], out_dir: Path) -> Optional[Path]:
    """The paper's learning-dynamics panels (Fig. 8, 3, 5 and episode length), every GRPO run overlaid."""
    fig = dynamics_figure(runs)
    return None if fig is None else _save_png(fig, out_dir / "dynamics.png")


def dynamics_figure(runs: list[dict]):
    """The figure of `plot_dynamics` (None without a GRPO run)."""
    runs = _training_runs(runs)
    if not runs:
        return None
    plt = agg_pyplot()
    fig, axes = plt.subplots(1, len(DYNAMICS), figsize=(4.2 * len(DYNAMICS), 3.6))
    groups = seed_groups(runs)
    for ax, (title, keys, scale) in zip(axes, DYNAMICS):
        for name, members in groups:
            for key, legend in keys:
                band = _mean_band(members, key)
                if not band and key in LEGACY_SERIES:
                    key, legend = LEGACY_SERIES[key]
                    band = _mean_band(members, key)
                if not band:
                    continue
                label = " ".join(x for x in (name if len(groups) > 1 else "", legend) if x) or name
                if len(members) > 1:
                    label += f" (mean of {len(members)} seeds)"
                x = [u + 1 for u, *_ in band]
                line, = ax.plot(x, [scale * m for _, m, _, _ in band], marker="o", markersize=3, label=label)
                if len(members) > 1:
                    ax.fill_between(x, [scale * lo for *_, lo, _ in band], [scale * hi for *_, hi in band],
                                    color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set_xlabel("update")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------- report


def report(run_dirs: list[str | Path], out_dir: Optional[str | Path] = None) -> str:
    """The Markdown report of `run_dirs`; with `out_dir`, also writes report.md and the plots there."""
    if not run_dirs:
        raise ReportError("no run directories given; pass runs=[dir1,dir2,...]")
    runs = [load_run(d) for d in run_dirs]
    target = Path(out_dir) if out_dir is not None else None
    if target is not None:
        target.mkdir(parents=True, exist_ok=True)
    sections = ["# EvoHarness-RL report", "", "Success rates are percentages; per-episode counts are means."]
    evaluated = [r for r in runs if r["summary"] is not None]
    groups: dict[tuple[str, str], list[dict]] = {}
    for run in evaluated:
        groups.setdefault((run["summary"].get("env", "?"), run["summary"].get("split", "?")), []).append(run)
    for (env, split), members in sorted(groups.items()):
        title = f"{env} — {split}" + (f" ({SPLIT_NAMES[split]})" if split in SPLIT_NAMES else "")
        sections += ["", f"## {title}", "", split_table(env, split, members)]
        if target is not None and (png := plot_families(env, split, members, target)):
            sections += ["", f"![{title}]({png.name})"]
    paired = seen_unseen_table(evaluated)
    if paired:
        sections += ["", "## Seen vs unseen", "", paired]
    if costs := cost_rows(runs):
        sections += ["", "## Cost", "", "What each run's episodes cost in all, and what one success cost "
                     "(tokens: '–' for text-only policies, which count none).", "", markdown_table(*costs)]
    for run in runs:
        if target is not None and (png := plot_training(run, target)):
            sections += ["", f"## Training: {run['name']}", "", f"![{run['name']} training]({png.name})"]
    if target is not None and (png := plot_dynamics(runs, target)):
        sections += ["", "## Learning dynamics", "", f"![learning dynamics]({png.name})"]
    if thresholds := updates_to_threshold(runs):
        sections += ["", "## Updates to validation-success thresholds", "", thresholds]
    if seeds := across_seeds_table(runs):
        sections += ["", "## Across seeds", "", "Validation success of each setting run with several seeds "
                     "(update: mean over seeds, min-max in brackets).", "", seeds]
    text = "\n".join(sections) + "\n"
    if target is not None:
        atomic_write_text(target / REPORT_FILE, text)
    return text


def report_command(cfg: Any) -> None:
    """CLI entry: `evoharness-rl report runs=[...] out_dir=...` prints the Markdown."""
    from evoharness_rl.errors import UserError

    try:
        text = report(list(cfg.runs), cfg.out_dir)
    except ReportError as err:
        raise UserError(str(err)) from None
    print(text)
