"""The openai consolidator against a real vLLM OpenAI-compatible server on a tiny local model (slow).

The tiny model is random, so its output is garbage: the bank must stay unchanged and every
failed stage must be counted. (Every operation through the same client path is covered
with scripted answers in test_llm_server.py.)
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from evoharness_rl.config import ExperienceConfig
from evoharness_rl.experience import ExperienceBank, consolidate, make_consolidator
from evoharness_rl.experience.operations import Operation
from tests.experience import synthetic

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory):
    pytest.importorskip("vllm")
    import httpx

    from evoharness_rl.models import init_model

    model_dir = init_model("tiny", tmp_path_factory.mktemp("model") / "tiny")
    port, log_path = _free_port(), tmp_path_factory.mktemp("server") / "vllm.log"
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
               "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
               "--enforce-eager", "--max-model-len", "8192"]
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1"))
    try:
        deadline = time.monotonic() + 300
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"vLLM server exited with {server.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM server not healthy after 300 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


@pytest.mark.parametrize("fused", [True, False])
def test_tiny_model_garbage_leaves_the_bank_unchanged_and_is_counted(vllm_url, fused):
    bank = ExperienceBank()
    bank.update_index = 1
    bank.apply([Operation("add", category="general", principle="keep me", task_types=("a", "b"))], "seed")
    cfg = ExperienceConfig(consolidator="openai", base_url=vllm_url, model_name="tiny", fused=fused,
                           max_new_tokens=64, max_prompt_chars=3000, api_key_env="EVOHARNESS_TEST_NO_KEY")
    trajectories = synthetic.batch(4, families=("pick_cool_then_place_in_recep", "pick_heat_then_place_in_recep"))
    report = consolidate(bank, trajectories, make_consolidator(cfg, "alfworld"))
    assert report.llm_calls == (1 if fused else 3)
    assert report.failure_count >= 1 and sum(report.ops.values()) == 0, report.to_dict()
    assert [e.principle for e in bank.active()] == ["keep me"]
    assert bank.ops_history[-1]["failures"] == report.failure_count
