"""The bank as training state: history.jsonl beside it, saves that refuse to drop another process's cycle,
and `evoharness-rl bank show|log|diff`."""

import json

import pytest

from evoharness_rl.cli import main
from evoharness_rl.experience import ExperienceBank, LLMConsolidator, consolidate
from evoharness_rl.experience.bank import BankConflict
from evoharness_rl.experience.history import append_cycle, read_history, save_cycle, start_history
from evoharness_rl.experience.operations import Operation
from tests.experience import synthetic
from tests.fakes.consolidator import Scripted

FAMILIES = ("pick_cool_then_place_in_recep", "pick_heat_then_place_in_recep")


def add_general(principle):
    return {"operations": [{"op": "add", "category": "general", "principle": principle, "task_types": list(FAMILIES),
                            "evidence": ["E1"]}]}


def cycle(bank, answer):
    return consolidate(bank, synthetic.batch(4, families=FAMILIES), LLMConsolidator(Scripted([answer]), fused=True))


def test_history_lines_survive_a_torn_write(tmp_path):
    path = tmp_path / "history.jsonl"
    append_cycle(path, {"cycle": 1, "status": "ok"})
    append_cycle(path, {"cycle": 2, "status": "failed"})
    with open(path, "a") as fh:
        fh.write('{"cycle": 3, "stat')  # a crash in the middle of the third line
    assert read_history(path) == [{"cycle": 1, "status": "ok"}, {"cycle": 2, "status": "failed"}]
    start_history(tmp_path / "next" / "history.jsonl", tmp_path / "bank.json")  # a run starting from that bank
    assert read_history(tmp_path / "next" / "history.jsonl") == read_history(path)
    assert (tmp_path / "next" / "history.jsonl").read_text().endswith("}\n")


def test_each_cycle_is_recorded_with_its_operations_and_evidence(tmp_path):
    bank = ExperienceBank()
    report = cycle(bank, add_general("verify before acting"))
    save_cycle(bank, report, tmp_path / "bank.json", update=0)
    report = cycle(bank, "not json at all")  # a garbage answer: the cycle failed, the bank kept its entries
    save_cycle(bank, report, tmp_path / "bank.json", update=1)
    first, second = read_history(tmp_path / "history.jsonl")
    assert (first["cycle"], first["update"], first["status"], second["status"]) == (1, 0, "ok", "failed")
    (op,) = first["operations"]
    assert op["op"] == op["result"] == "add" and op["entry"] == "gen-001" and op["evidence"][0].startswith("u1/e0:")
    assert first["bank_after"] == second["bank_before"] and first["episodes_seen"] == first["episodes_in_batch"] == 4
    assert second["failures"] and second["applied"]["add"] == 0 and [e.id for e in bank.active()] == ["gen-001"]


def test_two_processes_consolidating_one_bank_file_cannot_drop_each_others_cycle(tmp_path):
    path = tmp_path / "bank.json"
    ExperienceBank().save(path)
    first, second = ExperienceBank.load(path), ExperienceBank.load(path)
    save_cycle(first, cycle(first, add_general("from the first process")), path)
    saved = path.read_bytes()
    report = cycle(second, add_general("from the second process"))
    with pytest.raises(BankConflict, match="changed by another process since this bank was read.*own copy"):
        save_cycle(second, report, path)
    assert path.read_bytes() == saved  # the first process's bank, as it wrote it
    ok, failed = read_history(tmp_path / "history.jsonl")
    assert ok["status"] == "ok" and failed["status"] == "failed" and "another process" in failed["failures"][-1]
    save_cycle(first, cycle(first, add_general("the first goes on")), path)  # the owner still saves


def run_cli(args, capsys):
    capsys.readouterr()
    try:
        main(args)
        code = 0
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


def test_bank_show_log_diff(tmp_path, capsys):
    bank = ExperienceBank()
    save_cycle(bank, cycle(bank, add_general("verify before acting")), tmp_path / "a" / "bank.json")
    bank.save(tmp_path / "b" / "bank.json")
    (tmp_path / "b" / "history.jsonl").write_text((tmp_path / "a" / "history.jsonl").read_text())
    answer = {"operations": [{"op": "update", "id": "gen-001", "principle": "verify, then act"},
                             {"op": "archive", "id": "gen-404"}],
              "search_priorities": [{"object": "kettle", "locations": ["stoveburner"], "evidence": ["E2"]}]}
    save_cycle(bank, cycle(bank, answer), tmp_path / "b" / "bank.json")

    code, out, _ = run_cli(["bank", "show", str(tmp_path / "b")], capsys)
    assert code == 0 and "cycle 2" in out and "general (every family): 1 active" in out
    assert "[gen-001] verify, then act" in out and "search (every family): 1 active" in out

    code, out, _ = run_cli(["bank", "log", str(tmp_path / "b" / "bank.json")], capsys)
    lines = out.splitlines()
    assert code == 0 and "2 consolidation cycles" in lines[0]
    assert lines[1].startswith("cycle 1 ok [llm]: read 4/4 episodes; chosen add 1, update 0, archive 0, skip 0")
    assert any(line.startswith("cycle 2 partial") for line in lines)
    assert any("update gen-001: verify, then act" in line for line in lines)
    assert any("archive -> rejected gen-404" in line and "not in the bank" in line for line in lines)

    code, out, _ = run_cli(["bank", "diff", str(tmp_path / "a"), str(tmp_path / "b")], capsys)
    assert code == 0 and "added (1):" in out and "[srch-001] search: kettle" in out
    assert "~ [gen-001] principle: 'verify before acting' -> 'verify, then act'" in out


@pytest.mark.parametrize("args, message", [
    (["bank", "show", "nowhere"], "nowhere does not exist"),
    (["bank", "diff", "x"], "bank diff takes 2 SOURCEs, got 1"),
    (["bank"], "the following arguments are required: action, sources"),
    (["bank", "shwo", "x"], "invalid choice: 'shwo'"),
])
def test_bank_command_errors_are_one_line(tmp_path, capsys, args, message):
    code, _, err = run_cli(args, capsys)
    assert code == 1 and err.count("\n") == 1 and err.startswith("error:") and message in err


def test_a_hand_edited_invalid_bank_is_one_line_and_left_alone(tmp_path, capsys):
    path = tmp_path / "bank.json"
    bank = ExperienceBank()
    bank.apply([Operation("add", category="search", subject="kettle", principle="kettle: stove")], "x")
    bank.save(path)
    data = json.loads(path.read_text())
    data["entries"][0]["status"] = "deleted"
    del data["content_hash"]
    path.write_text(json.dumps(data))
    raw = path.read_bytes()
    code, _, err = run_cli(["bank", "show", str(path)], capsys)
    assert code == 1 and err.count("\n") == 1 and "entries[0].status must be 'active' or 'archived'" in err
    assert path.read_bytes() == raw
