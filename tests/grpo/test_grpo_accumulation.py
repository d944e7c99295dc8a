"""Gradient accumulation under DDP (two gloo processes on CPU): one optimizer step per mini-batch as the batch
plan says, no gradient all-reduce before the last micro-batch, and the gradients one process gets by
accumulating every sample itself (tests/grpo/accumulation.py does the work in both settings)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.grpo.accumulation import main as run_single

ROOT = Path(__file__).parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # two torch processes start and import transformers: about a minute on two cores
def test_ddp_accumulation_steps_as_planned_and_matches_one_process(tiny_model_dir, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(_free_port()), str(ROOT / "tests/grpo/accumulation.py"), str(tiny_model_dir),
                           str(tmp_path)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    run_single(str(tiny_model_dir), str(tmp_path))  # the same samples, all in this one process

    for rank in (0, 1):
        ddp = json.loads((tmp_path / f"summary_world2_rank{rank}.json").read_text())
        assert ddp["steps_per_update"] == ddp["plan_steps"] == ddp["logged_steps"] == ddp["state_steps"] == 2
        assert max(ddp["micro_batches"]) > 1  # several micro-batches per optimizer step
        # every gradient all-reduce ran in a backward accelerate marked as the end of the accumulation
        assert ddp["sync_flags"] and all(ddp["sync_flags"]) and all(ddp["update_sync_flags"])
    single = json.loads((tmp_path / "summary_world1_rank0.json").read_text())
    assert single["steps_per_update"] == single["plan_steps"] == 2

    ddp_grads = torch.load(tmp_path / "grads_world2.pt")
    one_grads = torch.load(tmp_path / "grads_world1.pt")
    assert len(ddp_grads) == len(one_grads) == 2  # one optimizer step per mini-batch
    for step, (ddp_step, one_step) in enumerate(zip(ddp_grads, one_grads)):
        scale = max(float(g.abs().max()) for g in one_step)
        assert scale > 0
        worst = max(float((a - b).abs().max()) for a, b in zip(ddp_step, one_step))
        assert worst <= 1e-5 * scale + 1e-7, (step, worst, scale)


def _deepspeed_accelerator(stage: int):
    """What `configure_deepspeed` reads of an accelerator launched with a DeepSpeed config (deepspeed itself is not
    needed to check the settings)."""
    from types import SimpleNamespace

    from accelerate.utils import DistributedType

    plugin = SimpleNamespace(zero_stage=stage, deepspeed_config={
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto", "zero_optimization": {"stage": stage}})
    return SimpleNamespace(distributed_type=DistributedType.DEEPSPEED, state=SimpleNamespace(deepspeed_plugin=plugin))


def test_deepspeed_settings_come_from_the_grpo_config_and_zero3_with_a_reference_is_refused():
    from evoharness_rl.config import Config, ConfigError
    from evoharness_rl.grpo.batch import make_plan
    from evoharness_rl.grpo.build import configure_deepspeed

    cfg = Config()
    cfg.grpo.micro_batch_samples, cfg.grpo.max_grad_norm = 4, 0.5
    acc = _deepspeed_accelerator(stage=2)
    configure_deepspeed(cfg, acc, make_plan(cfg.grpo, 1))
    ds = acc.state.deepspeed_plugin.deepspeed_config
    assert (ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"], ds["gradient_clipping"]) == \
        (4, 1, 0.5) and "train_batch_size" not in ds

    with pytest.raises(ConfigError, match="ZeRO-3 partitions the separately loaded reference model.*grpo.lora=true"):
        configure_deepspeed(cfg, _deepspeed_accelerator(stage=3), make_plan(cfg.grpo, 1))
    for fix in ({"lora": True}, {"kl_coef": 0.0}):  # either fix makes ZeRO-3 acceptable
        fixed = Config()
        for key, value in fix.items():
            setattr(fixed.grpo, key, value)
        configure_deepspeed(fixed, _deepspeed_accelerator(stage=3), make_plan(fixed.grpo, 1))
