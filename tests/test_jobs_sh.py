"""scripts/jobs.sh, the job slots of `make demo` and `make diagnostics`: `after` lets a job start as soon as the
job it needs is done, and stops the script when that job failed."""

from __future__ import annotations

import subprocess
from pathlib import Path

JOBS = Path(__file__).resolve().parents[1] / "scripts" / "jobs.sh"

# Three "sft" jobs on two slots, the third taking longer, then one "grpo" job per seed that needs its seed's
# sft file. Every job appends "<start|end> <name>" to $D/order.
SCRIPT = """
set -euo pipefail
D=$1; FAIL=${2:-}
source "$JOBS"
work() {  # work <name> <seconds> <file to write or ->
  echo "start $1" >> "$D/order"; sleep "$2"
  [ "$1" = "$FAIL" ] && { echo "end $1" >> "$D/order"; return 1; }
  [ "$3" = - ] || touch "$3"
  echo "end $1" >> "$D/order"
}
launch sft0 work sft0 0.2 "$D/sft0"
launch sft1 work sft1 0.2 "$D/sft1"
launch sft2 work sft2 1.5 "$D/sft2"
for seed in 0 1 2; do
  after "$D/sft$seed" "sft$seed"
  launch "grpo$seed" work "grpo$seed" 0.1 -
done
finished
"""


def _run(tmp_path: Path, fail: str = "") -> tuple[int, list[str]]:
    done = subprocess.run(["bash", "-c", SCRIPT, "jobs-test", str(tmp_path), fail], capture_output=True, text=True,
                          env={"JOBS": str(JOBS), "PATH": "/usr/bin:/bin"}, timeout=60)
    order = (tmp_path / "order").read_text().split("\n") if (tmp_path / "order").exists() else []
    return done.returncode, [line for line in order if line]


def test_a_job_starts_as_soon_as_the_job_it_needs_is_done(tmp_path):
    rc, order = _run(tmp_path)
    assert rc == 0
    # seeds 0 and 1 train their GRPO while seed 2's SFT still runs; seed 2's waits for it
    assert order.index("start grpo0") < order.index("end sft2")
    assert order.index("start grpo1") < order.index("end sft2")
    assert order.index("start grpo2") > order.index("end sft2")
    assert sorted(order) == sorted(f"{when} {name}" for name in ("sft0", "sft1", "sft2", "grpo0", "grpo1", "grpo2")
                                   for when in ("start", "end"))


def test_a_failed_job_stops_the_jobs_that_need_it(tmp_path):
    rc, order = _run(tmp_path, fail="sft1")
    assert rc == 1
    assert (tmp_path / "logs" / "sft1.failed").exists()
    assert "start grpo1" not in order and "start grpo2" not in order


def test_a_job_that_ends_without_its_file_is_an_error_not_a_hang(tmp_path):
    script = 'set -euo pipefail; D=$1; source "$JOBS"; launch sft true; after "$D/never" sft; echo reached'
    done = subprocess.run(["bash", "-c", script, "jobs-test", str(tmp_path)], capture_output=True, text=True,
                          env={"JOBS": str(JOBS), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert done.returncode == 1 and "reached" not in done.stdout
    assert f"sft finished without writing {tmp_path}/never" in done.stderr
