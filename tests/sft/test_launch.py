"""configs/accelerate/*.yaml parse as accelerate configs; scripts/sft.sh names the choices on a bad ACCEL."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = {"single_gpu": "NO", "ddp": "MULTI_GPU", "fsdp": "FSDP", "deepspeed_zero3": "DEEPSPEED"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_accelerate_config_loads(name):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(ROOT / "configs" / "accelerate" / f"{name}.yaml"))
    assert str(config.distributed_type).split(".")[-1] == EXPECTED[name]
    assert config.mixed_precision == "bf16" and config.num_machines == 1 and config.machine_rank == 0
    if name == "fsdp":
        assert config.fsdp_config["fsdp_state_dict_type"] == "FULL_STATE_DICT"
    if name == "deepspeed_zero3":
        assert config.deepspeed_config["zero_stage"] == 3 and config.deepspeed_config["zero3_save_16bit_model"]


def test_sft_sh_rejects_unknown_accelerate_config():
    result = subprocess.run([str(ROOT / "scripts" / "sft.sh"), "out_dir=unused"], capture_output=True, text=True,
                            env={**os.environ, "ACCEL": "bogus"}, timeout=30)
    assert result.returncode == 2
    assert "ACCEL=bogus" in result.stderr and "single_gpu" in result.stderr and "fsdp" in result.stderr
