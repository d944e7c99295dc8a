"""Looking at runs: a real tiny GRPO run (2 updates, logger=wandb offline) and two real evaluations on the count
env, then the offline wandb run it left, the `view` site over all three, and that site in headless Chromium.

The browser is Debian's Chromium driven by Playwright (as WebArena uses it): no browser is downloaded.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SECRET = "sk-observability-test-0123456789"
ARTIFACTS = Path(os.environ.get("EVOHARNESS_TEST_ARTIFACTS", "outputs/test-artifacts"))


@pytest.fixture(scope="module")
def observed(warm_model_dir, tmp_path_factory):
    """{grpo, eval_warm, eval_grpo}: run directories of a 2-update GRPO run and greedy evals before and after it."""
    from tests.fakes.count import make_count_env, tiny_config

    from evoharness_rl.config import Config
    from evoharness_rl.envs import register_env
    from evoharness_rl.eval.evaluate import evaluate
    from evoharness_rl.grpo.trainer import run_grpo
    from evoharness_rl.runlog import set_progress

    root = tmp_path_factory.mktemp("observed")
    saved = {k: os.environ.get(k) for k in ("WANDB_MODE", "WANDB_SILENT", "EVO_TEST_API_KEY", "WANDB_API_KEY")}
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", EVO_TEST_API_KEY=SECRET)
    os.environ.pop("WANDB_API_KEY", None)
    try:
        cfg = tiny_config(warm_model_dir, root / "grpo", updates=2, eval_every=1, keep_trajectories=3)
        cfg.logger.backend = "wandb"
        cfg.policy.base_url = f"http://127.0.0.1:9/v1?key={SECRET}"  # a secret inside a config value
        final = run_grpo(cfg, env_factory=functools.partial(make_count_env))
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    register_env("count", "tests.fakes.count:build_count_env")
    set_progress(False)
    runs = {"grpo": root / "grpo"}
    for name, model in (("eval_warm", warm_model_dir), ("eval_grpo", final)):
        cfg = Config(command="eval", out_dir=str(root / name), split="valid_seen", limit=4, device="cpu")
        cfg.env.name, cfg.env.num_workers, cfg.env.max_steps_eval = "count", 1, 4
        cfg.policy.backend, cfg.policy.max_new_tokens, cfg.policy.max_prompt_tokens = "hf", 24, 1024
        cfg.model.path = str(model)
        cfg.logger.progress = False
        evaluate(cfg)
        runs[name] = root / name
    return runs


# ------------------------------------------------------------------------------- wandb


def wandb_records(path: Path) -> list:
    """The protobuf records of a `.wandb` transaction log (a 7-byte W&B header, then LevelDB-style log blocks of
    32 KiB whose chunks carry a 7-byte header: checksum, length, and whether it is a whole/first/middle/last part)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a wandb transaction log"
    block, pos, pending, chunks = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # the tail of a block too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            chunks.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            chunks.append(pending + chunk)
    return [wandb_internal_pb2.Record.FromString(c) for c in chunks]


@pytest.mark.slow
def test_wandb_offline_run_holds_metrics_config_and_tables_and_is_syncable(observed):
    runs = list((observed["grpo"] / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, "logger=wandb with WANDB_MODE=offline leaves one offline run in out_dir/wandb"
    log = next(runs[0].glob("run-*.wandb"))
    raw = log.read_bytes()
    assert SECRET.encode() not in raw  # the config went in redacted
    records = wandb_records(log)
    history = [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]
    steps = sorted({h["_step"] for h in history})
    assert steps[-2:] == [0, 1]  # both updates
    metrics = {k for h in history for k in h}
    assert {"success_rate", "reward/total", "kl_ref", "harness_calls_per_episode", "prompt_tokens"} <= metrics
    assert "val/success_rate" in metrics
    config = {item.key: json.loads(item.value_json) for r in records if r.WhichOneof("record_type") in ("run", "config")
              for item in (r.run.config.update if r.WhichOneof("record_type") == "run" else r.config.update)}
    assert config["grpo"]["updates"] == 2 and config["logger"]["backend"] == "wandb"
    assert SECRET not in json.dumps(config) and "<redacted>" in config["policy"]["base_url"]
    tables = [h for h in history if h.get("trajectories/_type") == "table-file"]  # one wandb.Table per update
    assert len(tables) == 2 and all(t["trajectories/nrows"] == 3 for t in tables)
    for t in tables:
        table = json.loads((runs[0] / "files" / t["trajectories/path"]).read_text())
        assert "transcript" in table["columns"] and len(table["data"]) == 3
    dry = subprocess.run([sys.executable, "-m", "wandb", "sync", "--dry-run", str(runs[0])], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "WANDB_MODE": "offline"})
    assert dry.returncode == 0 and "Would sync 1 run" in dry.stdout + dry.stderr, dry.stdout + dry.stderr


# -------------------------------------------------------------------------------- site


def _site(observed, out: Path) -> Path:
    from evoharness_rl.eval.view import build_site

    return build_site([observed["grpo"], observed["eval_warm"], observed["eval_grpo"]], out).parent


@pytest.mark.slow
def test_site_over_a_grpo_run_and_its_evaluations(observed, tmp_path):
    sys.path.insert(0, str(HERE.parent / "eval"))
    from site_check import check_site

    site = _site(observed, tmp_path / "site")
    pages = check_site(site)
    home = pages[site / "index.html"]
    rows = home.rows_by_table["all-episodes"]
    kept = sorted((observed["grpo"] / "trajectories").glob("update_*/*.json"))
    assert len(kept) == 6  # grpo.keep_trajectories=3 per update, 2 updates
    assert len(rows) == 6 + 4 + 4
    assert sorted({r["data-update"] for r in rows if r["data-run"] == "grpo"}) == ["0", "1"]
    assert "Learning dynamics" in home.all_text and home.svgs >= 2  # the family bars and the dynamics panels
    grpo_page = pages[site / "runs" / "grpo.html"]
    assert grpo_page.svgs >= 2 and "Trainer health" in grpo_page.all_text and "Cost" in grpo_page.all_text
    # eval with a token-level backend: the cost counts tokens; the table shows each run's totals
    summary = json.loads((observed["eval_grpo"] / "summary.json").read_text())
    assert summary["cost"]["prompt_tokens"] > 0 and summary["cost"]["generated_tokens"] > 0
    assert f"{summary['cost']['prompt_tokens']:,}" in home.all_text
    # a GRPO episode page shows the rewards the trainer recorded and the update's advantage
    record = json.loads(kept[0].read_text())
    page = pages[site / "episodes" / "grpo" / f"update_000000-{kept[0].stem}.html"]
    assert "recorded by the trainer" in page.all_text and f"{record['rewards']['total']:.3f}" in page.all_text
    assert f"{record['advantage']:.3f}" in page.all_text
    # the two evaluations played the same tasks: side by side
    assert len(pages[site / "compare" / "index.html"].rows_by_table["compare"]) == 4


@pytest.mark.slow
def test_site_in_headless_chromium(observed, tmp_path):
    """The site renders in a real browser with no console error; filters change the listed episodes."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is needed (scripts/setup_system.sh installs it)"
    site = _site(observed, tmp_path / "site")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
        page.on("requestfailed", lambda r: errors.append(f"{page.url}: failed to load {r.url}"))
        page.goto((site / "index.html").as_uri())
        assert page.locator("table#runs tbody tr").count() == 3
        assert page.locator(".plot svg").count() >= 2
        assert page.locator(".plot svg").first.bounding_box()["width"] > 200  # drawn, not collapsed
        visible = page.locator("#all-episodes tbody tr:visible")
        assert visible.count() == 14
        page.select_option("#all-episodes-run", "grpo")
        assert visible.count() == 6 and page.text_content("#all-episodes-count") == "6"
        page.select_option("#all-episodes-update", "1")
        assert visible.count() == 3
        for row in range(3):
            assert visible.nth(row).get_attribute("data-update") == "1"
        page.select_option("#all-episodes-run", "")
        page.select_option("#all-episodes-update", "")
        page.select_option("#all-episodes-outcome", "won")
        won = visible.count()
        assert won == sum(1 for r in page.locator("#all-episodes tbody tr").all() if r.get_attribute("data-outcome")
                          == "won")
        page.screenshot(path=str(ARTIFACTS / "site_index.png"), full_page=True)
        # an episode page: every turn rendered, the reward table at the end
        page.select_option("#all-episodes-outcome", "")
        page.locator("#all-episodes tbody tr:visible a").first.click()
        page.wait_for_load_state()
        assert page.locator(".turn").count() >= 1 and "Reward" in page.text_content("body")
        page.screenshot(path=str(ARTIFACTS / "site_episode.png"), full_page=True)
        for name in ("runs/grpo.html", "compare/index.html", "compare/0.html"):
            page.goto((site / name).as_uri())
            assert page.locator("h1").count() == 1
        page.goto((site / "runs" / "grpo.html").as_uri())
        page.screenshot(path=str(ARTIFACTS / "site_grpo_run.png"), full_page=True)
        browser.close()
    assert not errors, errors
    assert (ARTIFACTS / "site_index.png").stat().st_size > 10_000
