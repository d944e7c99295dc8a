"""scripts/peer_check.py: both trainers run from the shared warm start and the JSON has one success per update."""

from __future__ import annotations

import json

import pytest

from tests.fakes.scripts import load_script


@pytest.mark.slow  # a warm start and two updates of each trainer: minutes on two busy cores
def test_both_trainers_run_and_the_json_has_one_success_per_update(tmp_path, capsys):
    out = tmp_path / "peer.json"
    load_script("peer_check").main(["--updates", "2", "--seeds", "0", "--json", str(out)])

    runs = json.loads(out.read_text())["runs"]
    assert sorted((r["impl"], r["seed"]) for r in runs) == [("ours", 0), ("trl", 0)]
    for run in runs:
        assert len(run["success"]) == 2 and all(0.0 <= x <= 1.0 for x in run["success"]), run
        assert run["success"][0] < 0.6, run  # the warm start guesses one button in three
        assert run["seconds_per_update"] > 0.0
    assert "success: ours" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--updates", "3"], "the following arguments are required: --json"),
    (["--json", "x.json", "--updates", "0"], "--updates 0 must be at least 1"),
    (["--json", "x.json", "--seeds", "one"], "invalid int value: 'one'"),
])
def test_a_bad_argument_is_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        load_script("peer_check").main(argv)
    text = str(exit_.value.code)
    assert message in text and "\n" not in text
    assert capsys.readouterr().err == ""
