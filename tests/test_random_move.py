"""scripts/random_move.py: a random move reaches the KL asked for, and --measure reads it back."""

from __future__ import annotations

import json
import random

import pytest

from tests.fakes.scripts import load_script


def _script():
    return load_script("random_move")


def test_a_random_move_has_the_kl_asked_for_and_measure_reads_it_back(tmp_path, capsys):
    from evoharness_rl.models import init_model

    start = init_model("tiny", tmp_path / "start", seed=0)
    run = tmp_path / "eval_run" / "trajectories"
    run.mkdir(parents=True)
    rng = random.Random(0)
    for e in range(3):  # the eval record fields the script reads
        turns = [{"prompt_ids": [rng.randrange(10, 200) for _ in range(12)],
                  "completion_ids": [rng.randrange(10, 200) for _ in range(5)]} for _ in range(2)]
        (run / f"ep{e}.json").write_text(json.dumps({"turns": turns}))

    script = _script()
    script.main(["--start", str(start), "--turns", str(run.parent), "--kl", "0.02", "--seed", "3",
                 "--out", str(tmp_path / "moved"), "--temperature", "1.0"])
    script.main(["--start", str(start), "--turns", str(run.parent), "--measure", str(tmp_path / "moved"),
                 "--temperature", "1.0"])
    measured = float(capsys.readouterr().out.strip().splitlines()[-1].split("=")[1].split()[0])
    assert measured == pytest.approx(0.02, rel=0.05)

    with pytest.raises(SystemExit, match="no turns with token ids"):
        script.main(["--start", str(start), "--turns", str(tmp_path / "start"), "--kl", "0.01", "--out", str(tmp_path / "x")])
