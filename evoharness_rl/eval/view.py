"""`evoharness-rl view runs=[dir,...] out_dir=SITE`: a static HTML site over eval, collect and GRPO runs.

    build_site(["runs/grpo", "runs/eval_seen"], "runs/site")   # then open runs/site/index.html

One folder that opens from disk: no server, no network, no script or style from elsewhere
(CSS and the filter script are inline; plots are SVG drawn by matplotlib, inline). Pages:

- `index.html`: every run (kind, env, split, mode, policy, success, cost), the report's tables
  (success per task family and split, seen vs unseen, updates to validation thresholds) and
  plots (success per family, learning dynamics), the cost of each run and of one success, per
  run and per family side by side, and every episode of every run in one filterable list
  (run, task family, outcome, harness mode, GRPO update);
- `runs/<run>.html`: one run: its summary, harness calls by verb, cost, training curves
  (GRPO: the report's curves, the learning-dynamics panels and trainer health), its episodes;
- `episodes/<run>/<episode>.html`: one episode turn by turn: the prompt the policy saw, its raw
  response, the parsed action (environment action or harness verb), what the action returned,
  the harness views in the prompt, the Belief and Progress state after the turn, and at the end
  the reward breakdown (success, diversity, efficiency, penalties) and the Experience entries shown;
- `compare/<n>.html`: the same task played in two or more runs, side by side (e.g. SFT vs GRPO,
  adaptive vs env_only); `compare/index.html` lists them with each run's outcome.

Episodes come from `trajectories/*.json` (eval, collect) and `trajectories/update_*/*.json`
(GRPO's `grpo.keep_trajectories` per update). Episodes without recorded rewards (eval) show
the rewards the run's own reward settings give them (`config.yaml`; the defaults when absent),
at update 0. The site is written into a temporary folder and moved into place at the end, so
`out_dir` holds either the previous site or the new one; a folder that is not a site is never
replaced.
"""

from __future__ import annotations

import functools
import html
import io
import itertools
import json
import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterable, Optional

from evoharness_rl.eval.report import (COST_COLUMNS, SPLIT_NAMES, ReportError, mode_label,
                                       cost_rows, dynamics_figure, families_figure, family_columns, load_run,
                                       run_cost, split_rows, training_figure)
from evoharness_rl.envs import env_names, env_spec
from evoharness_rl.fileio import atomic_replace_dir, atomic_write_text
from evoharness_rl.harness.protocol import HARNESS_VERBS

SITE_MARKER = ".evoharness-site"  # marks a folder `view` wrote (the only kind it replaces)
KEEP_FROM_OLD = ("config.yaml", "run.log")  # written into out_dir by the CLI before the site is built
OUTCOMES = ("won", "lost", "error")
HEALTH = (  # (title, [metrics keys]) -- trainer health panels of a GRPO run page
    ("reward (mean)", ["reward/total", "reward/r_grpo", "reward/r_eff", "reward/r_div"]),
    ("invalid / repeat share of steps", ["invalid_rate", "repeat_rate"]),
    ("KL and entropy", ["kl_ref", "approx_kl", "entropy"]),
    ("loss and gradient", ["loss", "grad_norm"]),
    ("PPO ratios", ["ratio_mean", "ratio_max", "clip_frac"]),
    ("time per update (s)", ["rollout_s", "train_s", "sync_consolidate_s"]),
)


# --------------------------------------------------------------------------------- loading


@dataclass
class Episode:
    run: str  # the run's slug
    slug: str  # file stem of its page (unique within the run)
    data: dict  # the Trajectory record as saved (plus GRPO's update / advantage / sample)
    rewards: dict  # recorded reward components, else computed from the run's reward settings
    rewards_recorded: bool

    @property
    def outcome(self) -> str:
        return "error" if self.data.get("error") else "won" if self.data.get("won") else "lost"

    @property
    def update(self) -> Optional[int]:
        return self.data.get("update")

    @property
    def harness_calls(self) -> int:
        return sum((self.data.get("harness_calls") or {}).values())

    @property
    def tokens(self) -> tuple[int, int]:
        turns = self.data.get("turns", [])
        prompt = sum(len(t.get("prompt_ids") or []) for t in turns)
        return prompt, sum(len(t.get("completion_ids") or []) for t in turns)

    def href(self, depth: int) -> str:
        return f"{'../' * depth}episodes/{self.run}/{self.slug}.html"


@dataclass
class SiteRun:
    name: str  # the run directory's name
    slug: str  # unique in the site
    run: dict  # report.load_run's record (name, dir, summary, metrics)
    episodes: list[Episode] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # record files that could not be read

    @property
    def kind(self) -> str:
        summary = self.run["summary"]
        if summary is None:
            return "grpo"
        return "collect" if "collection" in summary else "eval"

    @property
    def summary(self) -> Optional[dict]:
        return self.run["summary"]

    def href(self, depth: int) -> str:
        return f"{'../' * depth}runs/{self.slug}.html"


def load_site_run(run_dir: str | Path, taken: set[str]) -> SiteRun:
    run = load_run(run_dir)  # ReportError (one line) for a directory that is not a run
    slug = _unique(_slugify(run["name"]) or "run", taken)
    site_run = SiteRun(run["name"], slug, run)
    reward_cfg = _reward_settings(Path(run_dir))
    folder = Path(run_dir) / "trajectories"
    files = sorted(folder.glob("*.json")) + sorted(folder.glob("update_*/*.json"))
    seen: set[str] = set()
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or "turns" not in data:
                raise ValueError("not a trajectory record")
        except (OSError, ValueError) as err:
            site_run.unreadable.append(f"{path.name}: {err}")
            continue
        stem = path.stem if path.parent == folder else f"{path.parent.name}-{path.stem}"
        recorded = bool(data.get("rewards"))
        rewards = data["rewards"] if recorded else _computed_rewards(data, reward_cfg)
        site_run.episodes.append(Episode(slug, _unique(_slugify(stem), seen), data, rewards, recorded))
    return site_run


def _reward_settings(run_dir: Path):
    """The run's RewardConfig (from its config.yaml; the defaults when it has none)."""
    from evoharness_rl.config import RewardConfig

    cfg = RewardConfig()
    path = run_dir / "config.yaml"
    if path.exists():
        from omegaconf import OmegaConf

        saved = OmegaConf.to_container(OmegaConf.load(path)).get("reward") or {}
        for key, value in saved.items():
            if hasattr(cfg, key):
                setattr(cfg, key, value)
    return cfg


def _computed_rewards(data: dict, reward_cfg) -> dict:
    if data.get("error"):
        return {}
    from evoharness_rl.reward import reward_components
    from evoharness_rl.rollout.trajectory import Trajectory

    return reward_components(Trajectory.from_dict(data), reward_cfg, 0)


def _slugify(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.")[:100]


def _unique(slug: str, taken: set[str]) -> str:
    candidate = slug
    for n in itertools.count(2):
        if candidate not in taken:
            break
        candidate = f"{slug}-{n}"
    taken.add(candidate)
    return candidate


# ---------------------------------------------------------------------------------- html


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:1.5em auto;max-width:1400px;padding:0 1em;
color:#1d2125;line-height:1.4}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccd;padding-bottom:.2em}
h3{font-size:1.05em}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
th,td{border:1px solid #ccd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#eef0f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.won td.outcome{color:#176b2c;font-weight:600}tr.lost td.outcome{color:#a31d1d}tr.error td.outcome{color:#8a5a00}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f7f9;border:1px solid #e1e4e8;padding:.4em;margin:.2em 0;
font-size:.85em;max-height:30em;overflow:auto}
.turn{border:1px solid #ccd;border-radius:4px;margin:.8em 0;padding:.3em .8em}
.turn.harness{border-left:5px solid #3a6ea5}.turn.env{border-left:5px solid #5b8c3a}
.turn.invalid{border-left:5px solid #b33}
.label{font-weight:600;font-size:.85em;color:#555}.tag{display:inline-block;padding:0 .4em;border-radius:3px;
background:#eef0f4;font-size:.85em;margin-right:.3em}
.filters label{margin-right:1em}.plot svg{max-width:100%;height:auto}
.side{display:grid;gap:1em}.side>div{min-width:0}
nav a{margin-right:1em}.muted{color:#666;font-size:.9em}
"""

FILTER_JS = """
function applyFilters(tableId){
  var table=document.getElementById(tableId);
  var selects=document.querySelectorAll('select[data-table="'+tableId+'"]');
  var shown=0;
  table.querySelectorAll('tbody tr').forEach(function(row){
    var ok=true;
    selects.forEach(function(s){
      if(s.value!=='' && row.getAttribute('data-'+s.getAttribute('data-filter'))!==s.value){ok=false;}
    });
    row.hidden=!ok; if(ok){shown++;}
  });
  document.getElementById(tableId+'-count').textContent=shown;
}
document.querySelectorAll('select[data-table]').forEach(function(s){
  s.addEventListener('change',function(){applyFilters(s.getAttribute('data-table'));});
});
"""


def page(title: str, body: str, depth: int, script: bool = False) -> str:
    root = "../" * depth
    nav = (f'<nav><a href="{root}index.html">all runs</a><a href="{root}index.html#episodes">all episodes</a>'
           f'<a href="{root}compare/index.html">side by side</a></nav>')
    js = f"<script>{FILTER_JS}</script>" if script else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc(title)}</title>'
            f"<style>{CSS}</style></head><body>{nav}<h1>{esc(title)}</h1>\n{body}\n{js}</body></html>\n")


def table(header: Iterable[str], rows: Iterable[Iterable[Any]], numeric_from: int = 1, attrs: str = "") -> str:
    """An HTML table of escaped cells; cells from column `numeric_from` on are right-aligned numbers."""
    header = list(header)
    head = "" if not any(header) else "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr></thead>"
    body = "".join("<tr>" + "".join(f'<td{" class=num" if i >= numeric_from else ""}>{esc(c)}</td>'
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table{attrs}>{head}<tbody>{body}</tbody></table>"


def pre(text: Any) -> str:
    return f"<pre>{esc(text)}</pre>"


def svg(fig) -> str:
    """A matplotlib figure as inline SVG (text kept as text; ids salted per figure so several can share a page)."""
    import matplotlib
    import matplotlib.pyplot as plt

    svg.count = getattr(svg, "count", 0) + 1
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"fig{svg.count}"}):
        fig.savefig(buffer, format="svg")
    plt.close(fig)
    text = buffer.getvalue()
    return '<div class="plot">' + text[text.index("<svg"):] + "</div>"


def _pct(value: Optional[float]) -> str:
    return "–" if value is None else f"{100.0 * value:.1f}%"


def _num(value: Optional[float], digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


# ------------------------------------------------------------------------------- site


def build_site(run_dirs: list[str | Path], out_dir: str | Path) -> Path:
    """Write the site for `run_dirs` into `out_dir` (see the module docstring); returns its index.html."""
    if not run_dirs:
        raise ReportError("no run directories given; pass runs=[dir1,dir2,...]")
    target = Path(out_dir)
    _check_target(target, [Path(d) for d in run_dirs])
    taken: set[str] = set()
    runs = [load_site_run(d, taken) for d in run_dirs]
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _write_site(runs, tmp)
        for name in KEEP_FROM_OLD:
            if (target / name).is_file():
                shutil.copy2(target / name, tmp / name)
        (tmp / SITE_MARKER).write_text("written by evoharness-rl view\n", encoding="utf-8")
        atomic_replace_dir(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target / "index.html"


def _check_target(target: Path, run_dirs: list[Path]) -> None:
    """Never replace a folder `view` did not write, nor one holding a run."""
    resolved = target.resolve()
    for run_dir in run_dirs:
        r = run_dir.resolve()
        if resolved == r or resolved in r.parents:
            raise ReportError(f"out_dir={target} holds the run {run_dir}; write the site to another folder")
    if target.exists() and not target.is_dir():
        raise ReportError(f"out_dir={target} is a file; give a folder for the site")
    if target.is_dir() and not (target / SITE_MARKER).exists():
        foreign = [p.name for p in target.iterdir() if p.name not in KEEP_FROM_OLD]
        if foreign:
            raise ReportError(f"out_dir={target} exists and is not a site written by `view` (it holds "
                              f"{', '.join(sorted(foreign)[:3])}); choose an empty or new folder")


def _write_site(runs: list[SiteRun], root: Path) -> None:
    for run in runs:
        for ep in run.episodes:
            path = root / "episodes" / run.slug / f"{ep.slug}.html"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(episode_page(run, ep), encoding="utf-8")
        (root / "runs").mkdir(exist_ok=True)
        (root / "runs" / f"{run.slug}.html").write_text(run_page(run), encoding="utf-8")
    (root / "compare").mkdir(exist_ok=True)
    pairs = compare_groups(runs)
    for n, (key, members) in enumerate(pairs):
        (root / "compare" / f"{n}.html").write_text(compare_page(key, members), encoding="utf-8")
    (root / "compare" / "index.html").write_text(compare_index(runs, pairs), encoding="utf-8")
    atomic_write_text(root / "index.html", index_page(runs))


# ----------------------------------------------------------------------------- index


def index_page(runs: list[SiteRun]) -> str:
    parts = ['<p class="muted">Success rates are percentages of error-free episodes; per-episode counts are '
             "means. Every table and plot is also in the Markdown report (<code>evoharness-rl report</code>).</p>",
             "<h2>Runs</h2>", runs_table(runs, depth=0)]
    records = [r.run for r in runs]
    evaluated = [r for r in runs if r.summary is not None]
    groups: dict[tuple[str, str], list[SiteRun]] = {}
    for r in evaluated:
        groups.setdefault((r.summary.get("env", "?"), r.summary.get("split", "?")), []).append(r)
    for (env, split), members in sorted(groups.items()):
        title = f"{env} — {split}" + (f" ({SPLIT_NAMES[split]})" if split in SPLIT_NAMES else "")
        header, rows = split_rows(env, split, [m.run for m in members])
        parts += [f"<h2>Success per task family: {esc(title)}</h2>", table(header, rows, numeric_from=4)]
        if (fig := families_figure(env, split, [m.run for m in members])) is not None:
            parts.append(svg(fig))
        parts += family_cost_section(members)
    from evoharness_rl.eval.report import seen_unseen_table, updates_to_threshold

    if seen_unseen_table([r.run for r in evaluated]):
        parts += ["<h2>Seen vs unseen</h2>", _markdown_to_html(seen_unseen_table([r.run for r in evaluated]))]
    if costs := cost_rows(records):
        parts += ["<h2>Cost</h2>", '<p class="muted">What each run\'s episodes cost in all and what one success '
                  "cost (GRPO: its training rollouts, validation left out; tokens: – for text-only policies).</p>",
                  table(*costs, numeric_from=2)]
    if (fig := dynamics_figure(records)) is not None:
        parts += ["<h2>Learning dynamics</h2>", '<p class="muted">Validation success, harness calls per episode by '
                  "verb, episode length and Experience operations per consolidation cycle, against the update.</p>",
                  svg(fig)]
    if thresholds := updates_to_threshold(records):
        parts += ["<h2>Updates to validation-success thresholds</h2>", _markdown_to_html(thresholds)]
    parts += ['<h2 id="episodes">Episodes</h2>', episodes_table([e for r in runs for e in r.episodes], runs, 0,
                                                                 "all-episodes")]
    return page("EvoHarness-RL runs", "\n".join(parts), depth=0, script=True)


def runs_table(runs: list[SiteRun], depth: int) -> str:
    rows = []
    for r in runs:
        s = r.summary or {}
        metrics = [m for m in r.run["metrics"] if m.get("update", -1) >= 0]
        last_val = next((m["val/success_rate"] for m in reversed(r.run["metrics"]) if "val/success_rate" in m), None)
        success = s.get("success_rate") if r.summary else last_val
        last_val_note = " (last validation)" if r.summary is None and success is not None else ""
        rows.append("<tr>" + "".join([
            f'<td><a href="{esc(r.href(depth))}">{esc(r.name)}</a></td>', f"<td>{esc(r.kind)}</td>",
            f"<td>{esc(s.get('env', _config_value(r, 'env', 'name')))}</td>", f"<td>{esc(s.get('split', ''))}</td>",
            f"<td>{esc(mode_label(s) if s else _config_value(r, 'harness', 'mode'))}</td>",
            f"<td>{esc(_policy(r))}</td>",
            f'<td class=num>{esc(s.get("episodes", len(r.episodes)))}</td>',
            f'<td class=num>{esc(len(metrics) if r.summary is None else "")}</td>',
            f"<td class=num>{esc(_pct(success))}{esc(last_val_note)}</td>",
            f'<td class=num>{esc(_num(s.get("harness_calls_per_episode")))}</td>',
            f'<td class=num>{esc(len(r.episodes))}</td>',
        ]) + "</tr>")
    header = ["Run", "Kind", "Env", "Split", "Harness mode", "Policy", "Episodes", "Updates", "Success",
              "Harness/ep", "Episode pages"]
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    return f'<table id="runs"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _config_value(run: SiteRun, section: str, key: str) -> str:
    path = Path(run.run["dir"]) / "config.yaml"
    if not path.exists():
        return ""
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(OmegaConf.load(path))
    return str((data.get(section) or {}).get(key, ""))


def _policy(run: SiteRun) -> str:
    s = run.summary
    if s is not None:
        model = s.get("model")
        return f"{s.get('policy', '?')}" + (f" ({Path(model).name})" if model and s.get("policy") not in
                                            ("scripted", "replay") else "")
    model = _config_value(run, "model", "path")
    return f"grpo from {Path(model).name}" if model else "grpo"


def family_cost_section(members: list[SiteRun]) -> list[str]:
    """Per task family, side by side across runs: success, steps, harness calls, invalid actions and tokens per
    episode (from the runs' episode records)."""
    stats = {r.slug: family_stats(r.episodes) for r in members}
    families = sorted({f for s in stats.values() for f in s}, key=_family_order)
    if not families:
        return []
    header = ["Family"] + [f"{r.name}: {col}" for r in members for col in ("success", "steps/ep", "harness/ep",
                                                                           "invalid/ep", "gen. tokens/ep")]
    rows = []
    for fam in families:
        row = [_family_titles().get(fam, fam)]
        for r in members:
            st = stats[r.slug].get(fam)
            row += ["–"] * 5 if st is None else [_pct(st["success"]), _num(st["steps"]), _num(st["harness"]),
                                                 _num(st["invalid"]), _num(st["tokens"], 0)]
        rows.append(row)
    return ["<h3>Per family, side by side</h3>", table(header, rows)]


@functools.lru_cache(maxsize=1)
def _family_titles() -> dict[str, str]:
    """Family key -> column title, in each environment's own order (`EnvSpec.family_columns`)."""
    titles: dict[str, str] = {}
    for name in env_names():
        spec = env_spec(name)
        titles.update(spec.family_columns if spec is not None else {})
    return titles


def _family_order(family: str) -> tuple[int, str]:
    order = list(_family_titles())
    return (order.index(family), family) if family in order else (len(order), family)


def family_stats(episodes: list[Episode]) -> dict[str, dict]:
    by: dict[str, list[Episode]] = {}
    for ep in episodes:
        if ep.outcome != "error":
            by.setdefault(ep.data.get("family", "?"), []).append(ep)

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    return {fam: {"episodes": len(eps), "success": mean([e.outcome == "won" for e in eps]),
                  "steps": mean([e.data.get("steps", 0) for e in eps]), "harness": mean([e.harness_calls for e in eps]),
                  "invalid": mean([e.data.get("invalid_count", 0) for e in eps]),
                  "tokens": mean([e.tokens[1] for e in eps]) if any(e.tokens[1] for e in eps) else None}
            for fam, eps in by.items()}


def _markdown_to_html(markdown: str) -> str:
    """A Markdown table of the report as an HTML table (the same rows)."""
    lines = [line.strip().strip("|").split("|") for line in markdown.strip().splitlines()]
    header, rows = [c.strip() for c in lines[0]], [[c.strip() for c in line] for line in lines[2:]]
    return table(header, rows)


# ---------------------------------------------------------------------------- episodes


def episodes_table(episodes: list[Episode], runs: list[SiteRun], depth: int, table_id: str) -> str:
    """Every episode as a row, with filters (run, family, outcome, harness mode, update) that hide the others."""
    names = {r.slug: r.name for r in runs}
    facets = {
        "run": sorted({e.run for e in episodes}),
        "family": sorted({str(e.data.get("family", "")) for e in episodes}),
        "outcome": [o for o in OUTCOMES if any(e.outcome == o for e in episodes)],
        "mode": sorted({str(e.data.get("mode", "")) for e in episodes}),
        "update": [str(u) for u in sorted({e.update for e in episodes if e.update is not None})],
    }
    filters = []
    for facet, values in facets.items():
        if len(values) < 2 and facet != "outcome":
            continue
        options = '<option value="">all</option>' + "".join(
            f'<option value="{esc(v)}">{esc(names.get(v, v) if facet == "run" else v)}</option>' for v in values)
        filters.append(f'<label>{esc(facet)} <select data-table="{table_id}" data-filter="{facet}" '
                       f'id="{table_id}-{facet}">{options}</select></label>')
    rows = []
    for e in episodes:
        d = e.data
        attrs = {"run": e.run, "family": d.get("family", ""), "outcome": e.outcome, "mode": d.get("mode", ""),
                 "update": "" if e.update is None else e.update}
        data_attrs = " ".join(f'data-{k}="{esc(v)}"' for k, v in attrs.items())
        cells = [f'<a href="{esc(e.href(depth))}">{esc(d.get("task_id", e.slug))}</a>', esc(names.get(e.run, e.run)),
                 esc(d.get("family", "")), esc(d.get("mode", "")), esc("" if e.update is None else e.update),
                 esc(d.get("seed", "")), esc(e.outcome)]
        nums = [d.get("steps", 0), e.harness_calls, d.get("invalid_count", 0), _num(e.rewards.get("total"))]
        rows.append(f'<tr class="{esc(e.outcome)}" {data_attrs}>'
                    + "".join(f'<td{" class=outcome" if i == 6 else ""}>{c}</td>' for i, c in enumerate(cells))
                    + "".join(f"<td class=num>{esc(n)}</td>" for n in nums) + "</tr>")
    header = ["Task", "Run", "Family", "Mode", "Update", "Seed", "Outcome", "Steps", "Harness calls", "Invalid",
              "Reward"]
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    return (f'<div class="filters">{"".join(filters)} <span><span id="{table_id}-count">{len(episodes)}</span> of '
            f'{len(episodes)} episodes shown</span></div>'
            f'<table id="{table_id}" class="episodes"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
            "</tbody></table>")


def episode_page(run: SiteRun, ep: Episode) -> str:
    d = ep.data
    facts = [("run", run.name), ("task", d.get("task_id")), ("family", d.get("family")), ("split", d.get("split")),
             ("harness mode", d.get("mode")), ("context", d.get("context")), ("seed", d.get("seed")),
             ("outcome", ep.outcome), ("score", d.get("score")), ("steps", f"{d.get('steps')} of {d.get('max_steps')}"),
             ("truncated", d.get("truncated")), ("token capped", d.get("token_capped", False)),
             ("invalid actions", d.get("invalid_count")),
             ("repeats", d.get("repeat_count")), ("harness calls", json.dumps(d.get("harness_calls") or {})),
             ("prompt version", d.get("prompt_version"))]
    if ep.update is not None:
        facts += [("GRPO update", ep.update), ("advantage", _num(d.get("advantage"), 3))]
    if d.get("error"):
        facts.append(("error", d["error"]))
    parts = [f'<p><a href="{esc(run.href(2))}">{esc(run.name)}</a></p>',
             table(["", ""], facts, numeric_from=9), "<h2>Objective</h2>", pre(d.get("objective", ""))]
    parts.append("<h2>Turns</h2>")
    for turn in d.get("turns", []):
        parts.append(turn_html(turn))
    parts += ["<h2>Reward</h2>", reward_html(ep)]
    if d.get("recalled_ids"):
        parts += ["<h2>Experience entries shown</h2>", '<p class="muted">Entry ids retrieved by recall (adaptive) or '
                  "shown in the views (always_on), in order; their text is in each recall's result above.</p>",
                  pre(", ".join(map(str, d["recalled_ids"])))]
    if d.get("notes"):
        parts += ["<h2>Notes written</h2>", "".join(pre(n) for n in d["notes"])]
    return page(f"{d.get('task_id', ep.slug)} · {run.name}", "\n".join(parts), depth=2)


SCHEDULE_TAGS = {"injected": "injected by the schedule (response discarded)",
                 "refused": "refused off the schedule (no step)"}


def _action_line(turn: dict) -> str:
    kind = turn.get("action_kind", "")
    if kind == "harness":
        return f"harness: {turn.get('verb')} [{turn.get('action', '')}]"
    if kind == "invalid":
        return f"invalid: {turn.get('action') or '(no action)'} — {turn.get('invalid_reason') or ''}"
    return f"env: {turn.get('action', '')}"


def turn_html(turn: dict) -> str:
    kind = turn.get("action_kind", "")
    messages = turn.get("messages") or []
    shown = [m for m in messages if m.get("role") != "system"]
    system = [m for m in messages if m.get("role") == "system"]
    tags = [f'<span class="tag">{esc(kind)}</span>']
    if turn.get("repeated"):
        tags.append('<span class="tag">repeated</span>')
    if turn.get("schedule"):  # schedule ablations: the call was the schedule's / the policy's call was refused
        tags.append(f'<span class="tag">{esc(SCHEDULE_TAGS.get(turn["schedule"], turn["schedule"]))}</span>')
    if turn.get("prompt_truncated"):
        tags.append('<span class="tag">prompt truncated</span>')
    n_prompt, n_gen = len(turn.get("prompt_ids") or []), len(turn.get("completion_ids") or [])
    if n_prompt or n_gen:
        tags.append(f'<span class="tag">{n_prompt} prompt / {n_gen} generated tokens</span>')
    parts = [f'<div class="turn {esc(kind)}" id="turn-{esc(turn.get("index"))}">',
             f"<h3>Turn {esc(turn.get('index'))}: {esc(_action_line(turn))} {''.join(tags)}</h3>"]
    if system:
        parts.append("<details><summary class=label>system prompt</summary>"
                     + "".join(pre(m.get("content", "")) for m in system) + "</details>")
    for m in shown:
        parts += [f'<div class="label">{esc(m.get("role", ""))} (what the policy saw)</div>', pre(m.get("content", ""))]
    parts += ['<div class="label">model response (raw)</div>', pre(turn.get("response", "")),
              '<div class="label">result of the action</div>', pre(turn.get("observation", ""))]
    if turn.get("harness_view"):
        parts += ['<div class="label">harness views in the prompt</div>', pre(turn["harness_view"])]
    if turn.get("belief") or turn.get("progress"):
        parts += ['<details><summary class="label">Belief and Progress after the turn</summary>',
                  '<div class="label">Belief</div>', pre(turn.get("belief") or "(off)"),
                  '<div class="label">Progress</div>', pre(turn.get("progress") or "(off)"), "</details>"]
    parts.append("</div>")
    return "".join(parts)


REWARD_TERMS = (("r_grpo", "R_GRPO: success minus invalid and repeat penalties"),
                ("r_div", "R_div: diversity of harness verbs used"), ("lambda_div", "λ_div at this update"),
                ("r_eff", "R_eff: success-gated efficiency"), ("total", "total: R_GRPO + λ_div R_div + λ_eff R_eff"))


def reward_html(ep: Episode) -> str:
    if not ep.rewards:
        return '<p class="muted">No reward: the episode errored.</p>'
    note = ("recorded by the trainer" if ep.rewards_recorded else
            "computed by the viewer from the run's reward settings at update 0 (eval records carry no reward)")
    d = ep.data
    rows = [(label, _num(ep.rewards.get(key), 3)) for key, label in REWARD_TERMS if key in ep.rewards]
    rows += [("success", bool(d.get("won"))), ("invalid actions (penalised)", d.get("invalid_count", 0)),
             ("consecutive repeats (penalised)", d.get("repeat_count", 0)),
             ("verbs used", ", ".join(v for v in HARNESS_VERBS if (d.get("harness_calls") or {}).get(v)) or "none")]
    return f'<p class="muted">{esc(note)}</p>' + table(["term", "value"], rows)


# -------------------------------------------------------------------------------- runs


def run_page(run: SiteRun) -> str:
    s, parts = run.summary, [f'<p class="muted">{esc(run.run["dir"])}</p>']
    if s is not None:
        facts = [(k, s.get(k)) for k in ("env", "split", "mode", "prompt_variant", "context", "policy", "model",
                                         "tasks", "episodes_per_task", "seed", "episodes", "errors")]
        facts += [("success rate", _pct(s.get("success_rate"))), ("score", _num(s.get("score"))),
                  ("steps / episode", _num(s.get("steps"))), ("harness calls / episode",
                                                             _num(s.get("harness_calls_per_episode"))),
                  ("invalid actions / episode", _num(s.get("invalid_actions_per_episode"))),
                  ("repeats / episode", _num(s.get("repeats_per_episode"))),
                  ("truncated", _pct(s.get("truncated_rate"))), ("wall time (s)", s.get("wall_s")),
                  ("fingerprint", s.get("fingerprint"))]
        parts += ["<h2>Summary</h2>", table(["", ""], facts, numeric_from=9)]
        families = family_columns(s.get("env", ""), [s])
        if families:
            rows = [[title, _pct(s["per_family"].get(key, {}).get("success_rate")),
                     _num(s["per_family"].get(key, {}).get("score")), s["per_family"].get(key, {}).get("episodes", 0)]
                    for key, title in families]
            parts += ["<h2>Success per task family</h2>", table(["Family", "Success", "Score", "Episodes"], rows)]
        verbs = s.get("harness_calls_by_verb") or {}
        parts += ["<h2>Harness calls per episode, by verb</h2>",
                  table(list(HARNESS_VERBS), [[_num(verbs.get(v)) for v in HARNESS_VERBS]], numeric_from=0)]
        if s.get("collection"):
            parts += ["<h2>Collection</h2>", table(["", ""], list(s["collection"].items()))]
    cost = run_cost(run.run)
    if cost is not None:
        per = cost.get("per_success") or {}
        rows = [[title, _count_str(cost.get(key)), _count_str(per.get(key))] for key, title in COST_COLUMNS]
        rows += [[f"harness calls: {v}", _count_str((cost.get("harness_calls_by_verb") or {}).get(v)), ""]
                 for v in HARNESS_VERBS]
        what = "its training rollouts" if s is None else "its episodes"
        parts += ["<h2>Cost</h2>", f'<p class="muted">{cost.get("episodes")} episodes of {what}, '
                  f'{cost.get("successes")} successes.</p>', table(["", "total", "per success"], rows)]
    if s is None:
        parts += _training_sections(run)
    stats = family_stats(run.episodes)
    if stats:
        rows = [[_family_titles().get(f, f), st["episodes"], _pct(st["success"]), _num(st["steps"]),
                 _num(st["harness"]), _num(st["invalid"]), _num(st["tokens"], 0)]
                for f, st in sorted(stats.items(), key=lambda kv: _family_order(kv[0]))]
        parts += ["<h2>Per family, from the episode pages</h2>",
                  table(["Family", "Episodes", "Success", "Steps/ep", "Harness/ep", "Invalid/ep", "Gen. tokens/ep"],
                        rows)]
    if run.unreadable:
        parts += ["<h2>Unreadable records</h2>", pre("\n".join(run.unreadable))]
    parts += ["<h2>Episodes</h2>", episodes_table(run.episodes, [run], 1, "run-episodes")]
    return page(f"{run.name} ({run.kind})", "\n".join(parts), depth=1, script=True)


def _count_str(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.2f}"


def _training_sections(run: SiteRun) -> list[str]:
    parts = []
    if (fig := training_figure(run.run)) is not None:
        parts += ["<h2>Training curves</h2>", svg(fig)]
    if (fig := dynamics_figure([run.run])) is not None:
        parts += ["<h2>Learning dynamics</h2>", svg(fig)]
    if (fig := health_figure(run.run["metrics"])) is not None:
        parts += ["<h2>Trainer health</h2>", svg(fig)]
    rows = [m for m in run.run["metrics"] if m.get("update", -1) >= 0]
    keys = [k for k in ("update", "success_rate", "val/success_rate", "harness_calls_per_episode", "steps_per_episode",
                        "invalid_rate", "reward/total", "kl_ref", "entropy", "zero_std_groups", "update_s")
            if any(k in m for m in rows)]
    if rows:
        parts += ["<h2>Metrics per update</h2>",
                  table(keys, [[_cell(m.get(k)) for k in keys] for m in rows], numeric_from=0)]
    return parts


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def health_figure(metrics: list[dict]):
    """Trainer-health panels (rewards, invalid share, KL/entropy, loss, ratios, time) of a GRPO run."""
    rows = [m for m in metrics if m.get("update", -1) >= 0]
    panels = [(title, [k for k in keys if any(m.get(k) is not None for m in rows)]) for title, keys in HEALTH]
    panels = [(title, keys) for title, keys in panels if keys]
    if not panels:
        return None
    from evoharness_rl.eval.report import agg_pyplot

    plt = agg_pyplot()
    cols = 3
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.0 * nrows), squeeze=False)
    for ax, (title, keys) in zip(axes.flat, panels):
        for key in keys:
            points = [(m["update"] + 1, m[key]) for m in rows if m.get(key) is not None]
            ax.plot(*zip(*points), marker="o", markersize=3, label=key)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- compare


def compare_groups(runs: list[SiteRun]) -> list[tuple[tuple[str, int], list[tuple[SiteRun, Episode]]]]:
    """(task, seed) played by two or more runs: each such run's first episode of it, in run order."""
    by: dict[tuple[str, int], list[tuple[SiteRun, Episode]]] = {}
    for run in runs:
        firsts: dict[tuple[str, int], Episode] = {}
        for ep in run.episodes:
            firsts.setdefault((str(ep.data.get("task_id")), int(ep.data.get("seed") or 0)), ep)
        for key, ep in firsts.items():
            by.setdefault(key, []).append((run, ep))
    return [(key, members) for key, members in sorted(by.items()) if len(members) >= 2]


def compare_index(runs: list[SiteRun], groups) -> str:
    if not groups:
        body = '<p class="muted">No task was played by two of these runs (same task and seed).</p>'
        return page("Side by side", body, depth=1)
    names = [r for r in runs if any(r is m for _, members in groups for m, _ in members)]
    head = "".join(f"<th>{esc(h)}</th>" for h in ["Task", "Seed", "Family"] + [r.name for r in names])
    rows = []
    for n, ((task, seed), members) in enumerate(groups):
        outcome = {m.slug: ep for m, ep in members}
        fam = members[0][1].data.get("family", "")
        cells = [f'<td><a href="{n}.html">{esc(task)}</a></td><td class=num>{esc(seed)}</td><td>{esc(fam)}</td>']
        for r in names:
            ep = outcome.get(r.slug)
            cells.append("<td>–</td>" if ep is None else
                         f'<td class="outcome {esc(ep.outcome)}">{esc(ep.outcome)}, {esc(ep.data.get("steps"))} steps, '
                         f"{esc(ep.harness_calls)} harness</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    body = (f'<p class="muted">Tasks played by two or more runs with the same seed: {len(groups)}.</p>'
            f'<table id="compare"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')
    return page("Side by side", body, depth=1)


def compare_page(key: tuple[str, int], members: list[tuple[SiteRun, Episode]]) -> str:
    task, seed = key
    columns = []
    for run, ep in members:
        d = ep.data
        turns = "".join(
            f'<div class="turn {esc(t.get("action_kind", ""))}"><div class="label">{esc(t.get("index"))}. '
            f'{esc(_action_line(t))}</div>{pre(t.get("observation", ""))}</div>' for t in d.get("turns", []))
        calls = Counter({k: v for k, v in (d.get("harness_calls") or {}).items() if v})
        head = (f'<h2><a href="{esc(ep.href(1))}">{esc(run.name)}</a></h2><p><b>{esc(ep.outcome)}</b> in '
                f'{esc(d.get("steps"))} steps; harness calls {esc(dict(calls) or "none")}; invalid '
                f'{esc(d.get("invalid_count", 0))}; mode {esc(d.get("mode"))}</p>')
        columns.append(f"<div>{head}{turns}</div>")
    style = f'style="grid-template-columns:repeat({len(columns)},minmax(0,1fr))"'
    objective = members[0][1].data.get("objective", "")
    body = f"{pre(objective)}<div class=\"side\" {style}>{''.join(columns)}</div>"
    return page(f"{task} (seed {seed}), side by side", body, depth=1)


# --------------------------------------------------------------------------------- CLI


def view_command(cfg: Any) -> None:
    """CLI entry: `evoharness-rl view runs=[...] out_dir=SITE` writes the site and prints where it is
    (`serve=true`: then serves it on loopback until Ctrl-C)."""
    from evoharness_rl.errors import UserError

    try:
        index = build_site(list(cfg.runs), cfg.out_dir)
    except ReportError as err:
        raise UserError(str(err)) from None
    if not cfg.serve:
        print(f"site: {index} (open it in a browser; it needs no server)")
        return
    server = serve_site(index.parent, cfg.port)
    print(f"site: {index}; serving it at http://127.0.0.1:{server.server_port}/ (loopback only; Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def serve_site(site: str | Path, port: int = 0) -> ThreadingHTTPServer:
    """An HTTP server for the folder `site` on 127.0.0.1:`port` (0: a free port), not yet serving.

    Loopback only: the site holds prompts and model outputs, which are the user's to share. The
    caller runs `serve_forever()` and closes it."""
    from evoharness_rl.errors import UserError

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # one line per request would bury the URL
            pass

    handler = functools.partial(Quiet, directory=str(site))
    try:
        return ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as err:
        raise UserError(f"cannot serve the site on 127.0.0.1:{port} ({err.strerror}); "
                        f"pick another port=N, or port=0 for any free one") from None
