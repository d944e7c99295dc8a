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


def test_progress_bars_write_one_line_to_the_progress_file_and_log_lines_without_a_terminal(tmp_path, monkeypatch,
                                                                                          capsys):
    from evoharness_rl import runlog

    target = tmp_path / "job.progress"
    monkeypatch.setenv(runlog.PROGRESS_FILE_ENV, str(target))
    monkeypatch.setattr(runlog, "_FILE_EVERY_S", 0.0)
    monkeypatch.setattr(runlog, "LOG_EVERY_S", 0.0)
    monkeypatch.setattr(runlog, "_last_log_line", 1.0)  # a line was logged before: the next one is due
    monkeypatch.setattr(runlog, "_PROGRESS_ENABLED", True)
    with runlog.ProgressBar(10, "grpo updates", completed=4) as updates:
        assert target.read_text() == "grpo updates 4/10 (40%)\n"
        for i in runlog.progress(range(3), description="episodes"):
            assert target.read_text().startswith(f"grpo updates 4/10 (40%) | episodes {i}/3 ({100 * i / 3:.0f}%)")
        assert target.read_text() == "grpo updates 4/10 (40%)\n"  # the inner bar closed
        updates.advance(info="success 0.50")
        assert target.read_text().startswith("grpo updates 5/10 (50%) · success 0.50 · ")  # then the time left
        assert target.read_text().endswith(" left\n")
    assert target.read_text() == "\n"  # no bar open
    logged = capsys.readouterr().err.splitlines()
    assert "[progress] grpo updates 4/10 (40%) | episodes 2/3 (67%) · 0s left" in logged
    assert all(line.startswith("[progress] ") for line in logged)
