"""scripts/bench_rollout.py runs as documented and writes the JSON docs/benchmarks.md reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fakes.scripts import SCRIPTS


@pytest.mark.slow
def test_bench_rollout_writes_median_rounds_and_their_bounds(tmp_path):
    out = tmp_path / "bench_rollout.json"
    args = ["--backends", "hf", "--no-scaling", "--tasks", "2", "--samples", "2", "--repeats", "3",
            "--model-steps", "2", "--max-new-tokens", "8", "--data-dir", str(tmp_path / "data"), "--json", str(out)]
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_rollout.py"), *args], cwd=tmp_path, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["tasks"] == report["samples"] == 2
    assert [r["schedule"] for r in report["models"]] == ["pipelined", "lockstep"]
    for row in report["models"]:
        # the keys, and the row is the median of its three rounds
        assert row["engine_tokens_per_s"] == row["generated_tokens"] / row["engine_wall_s"] > 0
        assert row["backend_alone_tokens_per_s"] == row["generated_tokens"] / row["backend_alone_s"]
        assert row["engine_vs_bound"] == max(row["backend_alone_s"], row["env_alone_s"]) / row["engine_wall_s"]
        assert row["engine_vs_bound"] == sorted(row["engine_vs_bound_rounds"])[1]
        assert len(row["rounds"]) == 3 and row["turns"] == 2 * 2 * 2  # 4 episodes of 2 turns each
        # each side is the mean of its two runs in the round (engine, env, backend, env, engine)
        assert len(row["engine_walls_s"]) == len(row["env_alone_walls_s"]) == 2
        assert row["engine_wall_s"] == sum(row["engine_walls_s"]) / 2
        assert row["env_alone_s"] == sum(row["env_alone_walls_s"]) / 2
        assert 0 < row["last_reset_s"] <= row["engine_walls_s"][0]
    assert "engine_vs_bound" in done.stdout and "rounds" in done.stdout
