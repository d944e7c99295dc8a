"""scripts/gpu_check.sh runs as is: tiny shapes on CPU give a sane JSON report (the GPU run is the same code)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_tiny_on_cpu_writes_a_sane_report(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["bash", str(ROOT / "scripts/gpu_check.sh"), "--tiny", "--device", "cpu", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["errors"] == {}
    assert report["environment"]["device"] == "cpu" and report["settings"]["sizes"] == ["tiny"]

    import torch

    from evoharness_rl.models import count_parameters
    from tests.fakes.scripts import load_script

    gpu_check = load_script("gpu_check")
    row = report["models"]["tiny"]
    assert row["params"] == count_parameters(gpu_check.build_model("tiny", "cpu", torch.float32))
    assert row["tokens_per_step"] == report["settings"]["batch"] * report["settings"]["seq"]
    for kind in ("plain", "grpo_update", "grpo_ref"):
        rate = row[kind]["tokens_per_s"]
        assert math.isfinite(rate) and rate > 0 and row[kind]["mfu"] is None  # no GPU peak to divide by
        assert abs(row[kind]["s_per_step"] * rate - row["tokens_per_step"]) < 1e-6 * row["tokens_per_step"]
    assert row["grpo_update_vs_plain"] == row["grpo_update"]["tokens_per_s"] / row["plain"]["tokens_per_s"]
    assert row["hf_generate"]["new_tokens_per_s"] > 0 and row["hf_generate"]["backend_new_tokens_per_s"] > 0
    assert report["sft"]["tokens_per_s"] > 0
    # what could not run here is named with the reason, never silently missing
    assert set(report["skipped"]) == {"mfu", "vllm", "deepspeed"}
    assert all("GPU" in why for why in report["skipped"].values())
    assert "plain" in done.stdout and "skipped deepspeed: no GPU" in done.stdout
