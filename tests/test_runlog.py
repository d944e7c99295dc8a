"""Run directories: secrets never reach disk; metrics are JSON lines."""

import json
import subprocess
import sys
from pathlib import Path

from evoharness_rl.runlog import REDACTED, RunLogger, read_metrics, redact


def test_redact_removes_secret_fields_and_env_values(monkeypatch):
    monkeypatch.setenv("MY_API_KEY", "sk-very-secret")
    data = {"api_key": "abc", "api_key_env": "OPENAI_API_KEY", "nested": {"password": "p", "url": "http://x?k=sk-very-secret"},
            "token": None, "items": ["sk-very-secret"]}
    out = redact(data)
    assert out["api_key"] == REDACTED and out["nested"]["password"] == REDACTED
    assert out["api_key_env"] == "OPENAI_API_KEY" and out["token"] is None
    assert "sk-very-secret" not in json.dumps(out)


def test_metrics_and_log_file(tmp_path):
    log = RunLogger(tmp_path)
    log.info("hello")
    log.metrics(step=1, loss=0.5)
    log.metrics(step=2, loss=0.25)
    log.close()
    assert [m["loss"] for m in read_metrics(tmp_path)] == [0.5, 0.25]
    assert "hello" in (tmp_path / "run.log").read_text()


def test_config_docs_are_up_to_date():
    script = Path(__file__).resolve().parents[1] / "scripts" / "gen_config_docs.py"
    proc = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
