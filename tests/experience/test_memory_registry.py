"""A memory method registered from outside the package runs an eval end to end: config validation accepts it, its
memory learns per window and goes into later prompts, and its bank.json reloads as a frozen memory."""

from __future__ import annotations

import json
from typing import Any, Optional

import pytest

from evoharness_rl.config import Config, ConfigError, validate
from evoharness_rl.experience import baselines, load_bank, memory_names, register_memory
from evoharness_rl.experience.memory import MemorySnapshot, MemoryStore
from tests.eval.fake_eval import run

HEADING = "NOTES FROM PAST WINDOWS"


class NotesMemory(MemoryStore):
    """One note per window: how many of its episodes were won."""

    method = "notes"
    LISTS = ("notes",)

    def snapshot(self) -> "NotesSnapshot":
        return NotesSnapshot(tuple((n["id"], n["text"]) for n in self.notes), self.content_hash(), self.update_index)


class NotesSnapshot(MemorySnapshot):
    def __init__(self, notes: tuple[tuple[str, str], ...], content_hash: str, cycle: int):
        super().__init__(content_hash, cycle)
        self.notes = notes

    def prompt_context(self, objective: str, family: str) -> tuple[str, list[str]]:
        if not self.notes:
            return "", []
        return HEADING + ":\n" + "\n".join(text for _, text in self.notes), [note_id for note_id, _ in self.notes]


class NotesUpdater:
    def __init__(self, grounding: Any, generate: Optional[Any], name: str, max_chars: int):
        self.name = name

    def update(self, store: NotesMemory, evidence: Any, proposal: Any) -> None:
        won = sum(t.won for t in evidence.episodes)
        note = {"id": store.new_id("N"), "text": f"window {evidence.update_index}: {won}/{len(evidence.episodes)} won"}
        store.notes.append(note)
        proposal.operations.append({"op": "add", "result": "applied", "id": note["id"], "source": self.name})
        proposal.episodes_seen = len(evidence.episodes)


@pytest.fixture
def notes(monkeypatch):
    """`experience.method=notes` for this test only."""
    monkeypatch.setattr(baselines, "_REGISTRY", dict(baselines._REGISTRY))
    register_memory("notes", NotesMemory, NotesUpdater)
    return "notes"


def settings(**overrides) -> dict:
    return {"experience.method": "notes", "harness.mode": "env_only", "experience.evolve": "online",
            "experience.window": 4, "experience.consolidator": "heuristic", **overrides}


def records(out) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "trajectories").glob("*.json"))]


def system_prompt(record: dict) -> str:
    return record["turns"][0]["messages"][0]["content"]


def test_config_validation_reads_the_registry(notes):
    assert memory_names()[:3] == ("evoharness", "expel", "reasoningbank") and "notes" in memory_names()
    cfg = Config(out_dir="unused")
    cfg.experience.method, cfg.harness.mode = "notes", "env_only"
    assert validate(cfg).experience.method == "notes"
    cfg.experience.method = "nope"
    with pytest.raises(ConfigError, match="experience.method='nope' is not valid; allowed values: .*notes"):
        validate(cfg)


def test_an_unregistered_method_is_refused_in_one_line():
    cfg = Config(out_dir="unused")
    cfg.experience.method, cfg.harness.mode = "notes", "env_only"
    with pytest.raises(ConfigError, match="allowed values: evoharness, expel, reasoningbank$"):
        validate(cfg)


def test_a_registered_memory_method_runs_an_eval_end_to_end(notes, tmp_path):
    out = tmp_path / "online"
    summary = run(out, **settings())
    assert summary["errors"] == 0 and summary["experience"]["method"] == "notes"
    played = records(out)
    windows = -(-len(played) // 4)
    assert windows >= 2
    bank = json.loads((out / "bank.json").read_text())
    assert bank["method"] == "notes" and bank["cycle"] == windows and len(bank["notes"]) == windows
    assert bank["notes"][0]["text"].startswith("window 1: ")
    first = [r for r in played if r["bank_cycle"] == 0]
    later = [r for r in played if r["bank_cycle"] > 0]
    assert first and later
    assert all(HEADING not in system_prompt(r) for r in first)
    assert all(HEADING in system_prompt(r) and r["recalled_ids"] for r in later)

    frozen = run(tmp_path / "frozen", **settings(**{"experience.evolve": "frozen", "experience.bank": str(out / "bank.json")}))
    assert frozen["experience"]["bank_hash"] == bank["content_hash"]
    assert all(f"window {windows}: " in system_prompt(r) for r in records(tmp_path / "frozen"))


def test_one_loader_for_the_bank_and_every_memory(notes, tmp_path):
    cfg = Config(out_dir="unused").experience
    cfg.capacity = 7
    assert load_bank(cfg).capacity == 7 and load_bank(cfg).entries == {}  # evoharness: an empty bank
    assert load_bank(cfg, empty=False) is None  # a frozen eval without a bank
    cfg.method = "notes"
    memory = load_bank(cfg, empty=False)  # a baseline's store always exists
    assert isinstance(memory, NotesMemory) and memory.view["k"] == cfg.memory_k
    memory.notes.append({"id": "N1", "text": "kept"})
    memory.save(tmp_path / "notes.json")
    assert load_bank(cfg, path=tmp_path / "notes.json").notes == [{"id": "N1", "text": "kept"}]
    cfg.method = "evoharness"
    with pytest.raises(ValueError, match="notes.json is not an Experience bank"):
        load_bank(cfg, path=tmp_path / "notes.json")  # the bank's own check names the foreign file
