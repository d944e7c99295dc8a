"""The SLURM launchers: the Hydra sweep launcher config composes; the sbatch script builds the right launch."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_slurm_sweep_launcher_composes():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from hydra import compose, initialize_config_dir
    from hydra.core.config_store import ConfigStore

    from evoharness_rl.config import Config

    ConfigStore.instance().store(name="base_config", node=Config)
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True,
                      overrides=["command=grpo", "hydra/launcher=slurm", "hydra.launcher.partition=gpu",
                                 "reward.lambda_eff=0"])
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.partition, launcher.tasks_per_node, launcher.gpus_per_node) == ("gpu", 1, 1)
    assert cfg.reward.lambda_eff == 0


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_sbatch_launches_one_accelerate_per_node_with_resume(tmp_path):
    _fake(tmp_path, "scontrol", 'printf "gpu-a\\ngpu-b\\n"\n')
    _fake(tmp_path, "srun", 'echo "srun $1"; SLURM_NODEID=1 "${@:2}"\n')  # run the per-node command as node 1
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "SLURM_NNODES": "2",
           "SLURM_JOB_NODELIST": "gpu-[a-b]", "SLURM_SUBMIT_DIR": str(tmp_path), "PYTHON": "echo"}
    for name in ("scripts", "configs"):  # the job runs in its submit directory, a checkout
        (tmp_path / name).symlink_to(ROOT / name)
    out = subprocess.run(["bash", str(ROOT / "scripts/slurm/grpo.sbatch"), "env=alfworld", "out_dir=runs/a b"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    launch = out.stdout.splitlines()[-1]  # PYTHON=echo prints the accelerate command line of node 1
    assert "-m accelerate.commands.launch --config_file" in launch and "configs/accelerate/ddp.yaml" in launch
    for part in ("--num_machines 2", "--num_processes 16", "--machine_rank 1", "--main_process_ip gpu-a",
                 "-m evoharness_rl grpo env=alfworld out_dir=runs/a b resume=true"):
        assert part in launch, (part, launch)
