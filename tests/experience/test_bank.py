"""The bank: ids, capacity pruning, archive + provenance, validation, persistence."""

import json
import os

import pytest

from evoharness_rl.experience.bank import SCHEMA_VERSION, BankFormatError, ExperienceBank
from evoharness_rl.experience.operations import OpLimits, Operation
from evoharness_rl.rollout.trajectory import Trajectory

TWO = ("pick_and_place_simple", "pick_two_obj_and_place")


def general(text, **kw):
    return Operation("add", category="general", principle=text, task_types=TWO, **kw)


def recalled(*ids, won=True, family="f"):
    return Trajectory(task_id="t", family=family, env="x", recalled_ids=list(ids), won=won)


def cycle(bank, ops, source="test", limits=None):
    bank.update_index += 1
    return bank.apply(ops, source, limits)


def test_ids_are_per_category_counters_and_never_reused():
    bank = ExperienceBank()
    cycle(bank, [general("a"), general("b"), Operation("add", category="task:cool", family="cool", principle="c"),
                 Operation("add", category="mistakes", principle="d", task_types=TWO),
                 Operation("add", category="search", subject="mug", principle="mug: cabinet")])
    assert sorted(bank.entries) == ["err-001", "gen-001", "gen-002", "srch-001", "task-001"]
    cycle(bank, [Operation("archive", id="gen-002", reason="stale")])
    cycle(bank, [general("e")])
    assert "gen-003" in bank.entries and bank.entries["gen-002"].status == "archived"


def test_capacity_prunes_least_used_first_and_new_entries_last():
    bank = ExperienceBank(capacity=3)
    cycle(bank, [general("a"), general("b"), general("c")])  # update 1
    bank.record_usage([recalled("gen-001", "gen-001", "gen-001", "gen-001", "gen-001"), recalled("gen-003", "gen-003")])
    result = cycle(bank, [general("d"), general("e")])  # update 2: 5 active > 3
    # Old entries go first, lowest usage first: gen-002 (0 uses), then gen-003 (2 uses).
    # gen-001 (5 uses) survives, and so do the two entries added in this update.
    assert result.pruned == 2
    assert [e.id for e in bank.active("general")] == ["gen-001", "gen-004", "gen-005"]
    pruned = bank.entries["gen-002"]
    assert pruned.status == "archived" and pruned.history[-1]["op"] == "prune" and pruned.updated == 2


def test_capacity_applies_to_each_task_family_separately():
    bank = ExperienceBank(capacity=2)
    ops = [Operation("add", category=f"task:{fam}", family=fam, principle=f"{fam} {i}") for fam in ("a", "b", "c") for i in range(2)]
    result = cycle(bank, ops)
    assert result.pruned == 0 and bank.composition()["task"] == 6


def test_update_keeps_previous_values_in_history_and_archive_keeps_the_entry():
    bank = ExperienceBank()
    cycle(bank, [Operation("add", category="task:cool", family="cool", principle="put it in the fridge", evidence=("u1/e0:t",))])
    bank.record_usage([recalled("task-001", family="cool")] * 3)
    cycle(bank, [Operation("update", id="task-001", principle="cool it with the fridge while holding it",
                           evidence=("u2/e4:t",), reason="insertion never cools")])
    entry = bank.entries["task-001"]
    assert entry.principle == "cool it with the fridge while holding it"
    assert entry.usage == 3  # an update preserves usage (paper, Appendix H)
    assert entry.outcomes == {"won": 0, "lost": 0}  # ... but its advice is judged afresh
    assert entry.history[-1]["before"] == {"principle": "put it in the fridge"}
    assert entry.evidence == ["u1/e0:t", "u2/e4:t"] and (entry.created, entry.updated) == (1, 2)
    cycle(bank, [Operation("archive", id="task-001", reason="misleading")])
    entry = bank.entries["task-001"]  # apply() replaces the entry objects (it edits a copy)
    assert [h["op"] for h in entry.history] == ["add", "update", "archive"]
    assert bank.entries["task-001"].status == "archived" and bank.active() == []
    assert bank.snapshot().recall("cool fridge", "cool", 3)[1] == []


def test_adds_that_duplicate_become_skips_and_same_subject_becomes_update():
    bank = ExperienceBank()
    cycle(bank, [Operation("add", category="search", subject="mug", principle="mug: cabinet first"), general("Look before you leap.")])
    result = cycle(bank, [general("look before you leap"), Operation("add", category="search", subject="Mug", principle="mug: countertop first")])
    assert result.counts == {"add": 0, "update": 1, "archive": 0, "skip": 1}
    assert bank.entries["srch-001"].principle == "mug: countertop first"


@pytest.mark.parametrize("op, reason", [
    (Operation("update", id="gen-404", principle="x"), "not in the bank"),
    (Operation("archive", id="gen-001"), None),
    (Operation("add", category="task:", principle="x"), "category"),
    (Operation("add", category="secrets", principle="x"), "category"),
    (Operation("add", category="general", principle="x" * 100_000, task_types=TWO), "100000 characters"),
    (Operation("add", category="general", principle="   ", task_types=TWO), "non-empty principle"),
    (Operation("add", category="general", principle="x", task_types=("a",)), ">= 2 supporting"),
    (Operation("add", category="search", principle="x"), "subject"),
    (Operation("add", category="task:cool", family="heat", principle="x"), "scoped"),
    (Operation("update", id="gen-001"), "changes no field"),
    (Operation("delete", id="gen-001"), "unknown operation"),
])
def test_invalid_operations_are_rejected_and_leave_the_bank_unchanged(op, reason):
    bank = ExperienceBank()
    cycle(bank, [general("keep me")])
    before = bank.content_hash()
    if reason is None:  # archiving twice: the second is invalid
        cycle(bank, [op])
        before, reason = bank.content_hash(), "already archived"
    result = cycle(bank, [op])
    assert len(result.rejected) == 1 and reason in result.rejected[0]
    bank.update_index -= 1  # the hash covers the update index; compare content only
    assert bank.content_hash() == before


def test_field_limit_comes_from_the_config():
    bank = ExperienceBank()
    result = cycle(bank, [general("x" * 301)], limits=OpLimits(max_field_chars=300))
    assert result.counts["add"] == 0 and "at most 300" in result.rejected[0]


def test_usage_counts_are_independent_of_trajectory_order():
    ops = [general("a"), general("b")]
    orders = [[recalled("gen-001", "gen-002"), recalled("gen-001", won=False), recalled("nope")],
              [recalled("nope"), recalled("gen-001", won=False), recalled("gen-001", "gen-002")]]
    hashes = set()
    for order in orders:
        bank = ExperienceBank()
        cycle(bank, ops)
        assert bank.record_usage(order) == {"gen-001": 2, "gen-002": 1}
        assert bank.entries["gen-001"].outcomes == {"won": 1, "lost": 1}
        hashes.add(bank.content_hash())
    assert len(hashes) == 1


# ---------------------------------------------------------------------- persistence


def saved_bank(tmp_path):
    bank = ExperienceBank()
    cycle(bank, [general("a"), Operation("add", category="search", subject="kettle", principle="kettle: stoveburner")])
    path = bank.save(tmp_path / "bank.json")
    return bank, path


def test_save_load_round_trip_keeps_content_and_hash(tmp_path):
    bank, path = saved_bank(tmp_path)
    loaded = ExperienceBank.load(path)
    assert loaded.content_hash() == bank.content_hash()
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION
    assert loaded.snapshot().recall("where is the kettle", "any", 3)[1] == ["srch-001"]


def test_newer_schema_fails_clearly_and_the_file_is_untouched(tmp_path):
    _, path = saved_bank(tmp_path)
    data = json.loads(path.read_text())
    data["schema_version"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(data))
    raw = path.read_bytes()
    with pytest.raises(BankFormatError, match="newer than this EvoHarness-RL supports"):
        ExperienceBank.load(path)
    with pytest.raises(BankFormatError, match="refusing to overwrite"):
        ExperienceBank().save(path)
    assert path.read_bytes() == raw


def test_bank_truncated_by_a_crash_is_reported_and_the_previous_version_survives(tmp_path):
    bank, path = saved_bank(tmp_path)
    v1 = bank.content_hash()
    cycle(bank, [general("b")])
    bank.save(path)  # v1 moves to bank.json.bak
    text = path.read_text()
    path.write_text(text[: len(text) // 2])  # a crash mid-write of a non-atomic copy
    with pytest.raises(BankFormatError, match=r"not valid JSON.*bank\.json\.bak"):
        ExperienceBank.load(path)
    assert ExperienceBank.load(tmp_path / "bank.json.bak").content_hash() == v1


def test_a_crash_during_save_leaves_the_previous_bank_intact(tmp_path, monkeypatch):
    bank, path = saved_bank(tmp_path)
    before = path.read_bytes()
    cycle(bank, [general("new")])

    def crash(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)  # dies after writing the temporary file, before the rename
    with pytest.raises(OSError, match="disk full"):
        bank.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before and "gen-002" not in ExperienceBank.load(path).entries
    bank.save(path)  # the next save succeeds and replaces it
    assert "gen-002" in ExperienceBank.load(path).entries


def test_a_stray_temporary_file_from_an_interrupted_save_is_ignored(tmp_path):
    bank, path = saved_bank(tmp_path)
    (tmp_path / f".bank.json.tmp.{os.getpid() + 1}").write_text('{"format": "evoharness-rl exp')
    assert ExperienceBank.load(path).content_hash() == bank.content_hash()


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["entries"][0].update(principle="edited"), "content hash mismatch"),
    (lambda d: d["entries"][0].update(usage="many"), "usage must be a int"),
    (lambda d: d["entries"].append(dict(d["entries"][0])), "appears twice"),
    (lambda d: d["entries"][0].update(category="bogus"), "category 'bogus' is not valid"),
    (lambda d: d.update(format="something else"), "not an Experience bank"),
])
def test_broken_banks_fail_with_a_message_naming_the_problem(tmp_path, mutate, message):
    _, path = saved_bank(tmp_path)
    data = json.loads(path.read_text())
    mutate(data)
    if message != "content hash mismatch":
        data.pop("content_hash")
    path.write_text(json.dumps(data))
    with pytest.raises(BankFormatError, match=message):
        ExperienceBank.load(path)


def test_a_hand_edit_is_accepted_once_the_hash_is_removed(tmp_path):
    _, path = saved_bank(tmp_path)
    data = json.loads(path.read_text())
    data["entries"][0]["principle"] = "edited by hand"
    del data["content_hash"]
    path.write_text(json.dumps(data))
    assert ExperienceBank.load(path).entries["gen-001"].principle == "edited by hand"


def test_open_creates_an_empty_bank_only_when_the_file_is_missing(tmp_path):
    bank = ExperienceBank.open(tmp_path / "new.json", capacity=5)
    assert bank.capacity == 5 and not bank.entries
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ExperienceBank.load(tmp_path / "missing.json")
