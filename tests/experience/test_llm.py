"""LLM consolidation: robust parsing, every operation from scripted output, garbage leaves the bank unchanged."""

import json
import time

import pytest

from evoharness_rl.experience import ExperienceBank, LLMConsolidator, consolidate, parse_last_json
from evoharness_rl.experience.operations import Operation
from tests.experience import synthetic
from tests.fakes.consolidator import Scripted

# ------------------------------------------------------------------------- parse_last_json


@pytest.mark.parametrize("text, expected", [
    ('{"a": 1}', {"a": 1}),
    ('Let me think. {"draft": true} ... final:\n{"a": 2}', {"a": 2}),
    ('<think>use {braces} and [brackets]</think>\n```json\n{"a": [1, {"b": "}"}]}\n```', {"a": [1, {"b": "}"}]}),
    ('{"a": "quote \\" and } inside"}', {"a": 'quote " and } inside'}),
    ('[1, 2] then [3]', [3]),
    ('{"ok": 1} then a truncated {"operations": [{"op": "add"', {"ok": 1}),
    ('{"operations": [{"op": "add", "principle": "x"}, {"op": "upd', {"op": "add", "principle": "x"}),
    ("no json here", None),
    ("", None),
    ("}}}]]] {{{ [[[", None),
    ("{'single': 'quotes'}", None),
    (None, None),
    (12, None),
])
def test_parse_last_json(text, expected):
    assert parse_last_json(text) == expected


@pytest.mark.parametrize("garbage", ["[" * 100_000, "{" * 100_000, '{"a":' * 30_000, "[1," * 30_000,
                                     '[{"a":[' * 20_000, '{"a": "' + "x" * 100_000, "]" * 100_000])
def test_parse_is_fast_on_adversarial_input(garbage):
    start = time.perf_counter()
    assert parse_last_json(garbage) is None
    assert time.perf_counter() - start < 2.0


# --------------------------------------------------------------------------- scripted model


def seeded_bank():
    bank = ExperienceBank()
    bank.update_index = 1
    bank.apply([Operation("add", category="general", principle="old general advice", task_types=("a", "b")),
                Operation("add", category="task:pick_cool_then_place_in_recep", family="pick_cool_then_place_in_recep",
                          principle="put the object in the fridge"),
                Operation("add", category="mistakes", principle="stale mistake", task_types=("a", "b"))], "seed")
    return bank


def episodes():
    trajs = synthetic.batch(4, families=("pick_cool_then_place_in_recep", "pick_heat_then_place_in_recep"))
    trajs[0].notes = ["kettle was on stoveburner 1"]
    return trajs


COOL, HEAT = "pick_cool_then_place_in_recep", "pick_heat_then_place_in_recep"


def staged_answers(prompt):
    if "task-experience abstractor" in prompt:
        family = COOL if COOL in prompt.split("SUCCESSFUL EPISODES")[0] else HEAT
        return {"skills": [{"id": "s1", "principle": f"cool while holding ({family})", "evidence": ["E1"]}],
                "mistakes": [], "search_priorities": [{"object": "kettle", "locations": ["stoveburner", "countertop"], "evidence": ["E1"]}]}
    if "general-experience abstractor" in prompt:
        return {"skills": [{"id": "g1", "principle": "take, transform, then move", "task_types": [COOL, HEAT], "evidence": ["E1", "E3"]},
                           {"id": "g2", "principle": "only one family", "task_types": [COOL]}],
                "mistakes": [{"id": "gm1", "principle": "invented family", "task_types": [COOL, "unknown_family"]}]}
    if "STAGE: global" in prompt:
        return {"operations": [{"op": "add", "category": "general", "candidate": "g1", "principle": "take, transform, then move"},
                               {"op": "archive", "id": "err-001", "reason": "stale"},
                               {"op": "update", "id": "gen-001", "principle": "new general advice", "evidence": ["E2", "E99"]}]}
    if "STAGE: local (pick_cool" in prompt:
        return {"operations": [{"op": "update", "id": "task-001", "principle": "hold it and cool it with the fridge", "evidence": ["N1"]},
                               {"op": "skip", "candidate": "s1", "reason": "redundant"}],
                "search_priorities": [{"object": "kettle", "locations": ["stoveburner", "countertop"], "evidence": ["E1"]}]}
    if "STAGE: local (pick_heat" in prompt:
        return {"operations": [{"op": "add", "category": "task", "principle": "heat with the microwave while holding it"},
                               {"op": "add", "category": "mistakes", "principle": "heating in the fridge", "how_to_avoid": "use the microwave"}]}
    raise AssertionError(f"unexpected prompt: {prompt[:200]}")


def test_staged_pipeline_exercises_every_operation():
    bank, model = seeded_bank(), Scripted(staged_answers)
    report = consolidate(bank, episodes(), LLMConsolidator(model, "an embodied household agent"))
    # 2 task abstractions + 1 general + 1 global + 2 local reconciliations
    assert report.llm_calls == 6 and report.failures == []
    assert report.ops == {"add": 4, "update": 2, "archive": 1, "skip": 1}
    assert bank.entries["gen-001"].principle == "new general advice"
    assert bank.entries["gen-002"].task_types == sorted([COOL, HEAT])
    assert bank.entries["task-001"].principle == "hold it and cool it with the fridge"
    assert bank.entries["task-001"].evidence[-1].endswith("#note0")  # N1 mapped to the note's stable reference
    assert bank.entries["err-001"].status == "archived"
    assert bank.entries["task-002"].family == HEAT and bank.entries["err-002"].family == HEAT
    assert bank.find("search", "kettle").principle == "kettle: look first at stoveburner; then countertop"
    assert any("E99" in w for w in report.warnings)
    assert any("g2 dropped" in w for w in report.warnings) and any("gm1 dropped" in w for w in report.warnings)
    global_prompt = next(p for p in model.prompts if "STAGE: global" in p)
    assert "[gen-001] old general advice" in global_prompt and "take, transform, then move" in global_prompt


def test_fused_single_call():
    bank = seeded_bank()
    answer = {"operations": [
        {"op": "add", "category": "general", "principle": "verify hints", "task_types": [COOL, HEAT]},
        {"op": "add", "category": f"task:{COOL}", "principle": "cool while holding"},
        {"op": "add", "category": "mistakes", "family": HEAT, "principle": "fridge does not heat"},
        {"op": "archive", "id": "task-001"}, {"op": "Skip", "reason": "dup"}]}
    model = Scripted([answer])
    report = consolidate(bank, episodes(), LLMConsolidator(model, fused=True))
    assert report.llm_calls == 1 and report.ops == {"add": 3, "update": 0, "archive": 1, "skip": 1}
    assert "EXISTING STORE" in model.prompts[0] and "[task-001] put the object in the fridge" in model.prompts[0]


GARBAGE = [
    "", "I cannot help with that.", "{not json}", '{"operations": [{"op": "add", "category": "general", "princ',
    "```json\n{\"operations\": \n```", "\x00\x01\x02 binary", "[" * 50_000, '{"operations": "all of them"}', "42",
]


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("garbage", GARBAGE)
def test_garbage_output_leaves_the_bank_unchanged_and_is_counted(garbage, fused):
    bank = seeded_bank()
    entries_before = json.dumps([e.__dict__ for e in bank.entries.values()], sort_keys=True)
    report = consolidate(bank, episodes(), LLMConsolidator(Scripted(lambda p: garbage), fused=fused))
    assert report.failure_count >= 1
    assert sum(report.ops.values()) == 0
    after = json.loads(json.dumps([e.__dict__ for e in bank.entries.values()], sort_keys=True))
    for entry in after:  # only usage bookkeeping may change: the episodes did not recall anything here
        entry.pop("usage"), entry.pop("outcomes")
    before = json.loads(entries_before)
    for entry in before:
        entry.pop("usage"), entry.pop("outcomes")
    assert after == before
    assert bank.ops_history[-1]["failures"] == report.failure_count
    assert report.status == "failed" and report.metrics()["experience/failed"] == 1.0


@pytest.mark.parametrize("bad_op, fragment", [
    ({"op": "update", "id": "gen-999", "principle": "x"}, "not in the bank"),
    ({"op": "archive", "id": ""}, "needs the id"),
    ({"op": "add", "category": "general", "principle": "x" * 100_000, "task_types": [COOL, HEAT]}, "100000 characters"),
    ({"op": "add", "category": "general", "principle": "one family", "task_types": [COOL]}, ">= 2 supporting"),
    ({"op": "add", "category": "task", "family": "no_such_family", "principle": "x"}, "neither in this batch"),
    ({"op": "add", "category": "root", "principle": "x"}, "not allowed"),
    ({"op": "update", "id": "gen-001", "principle": ["list"]}, "must be a string"),
    ({"op": "explode"}, "unknown op"),
    ("not an object", "expected an object"),
])
def test_adversarial_operations_are_rejected_others_still_apply(bad_op, fragment):
    bank = seeded_bank()
    good = {"op": "add", "category": "general", "principle": "a good one", "task_types": [COOL, HEAT]}
    report = consolidate(bank, episodes(), LLMConsolidator(Scripted([{"operations": [bad_op, good]}]), fused=True))
    assert report.ops["add"] == 1 and len(report.rejected) == 1 and fragment in report.rejected[0]
    assert any(e.principle == "a good one" for e in bank.active("general"))


def test_a_failing_endpoint_is_a_counted_failure_not_a_crash():
    bank = seeded_bank()
    model = Scripted(lambda p: ConnectionError("server down"))
    report = consolidate(bank, episodes(), LLMConsolidator(model))
    assert report.llm_calls == 3 and len(report.failures) == 3  # 2 task + 1 general abstraction; nothing to reconcile
    assert "server down" in report.failures[0] and report.ops["add"] == 0


def test_prompts_follow_the_paper_and_cite_episodes():
    model = Scripted(lambda p: {"skills": [], "mistakes": [], "search_priorities": []})
    consolidate(seeded_bank(), episodes(), LLMConsolidator(model, "an embodied household agent"))
    task_prompt = model.prompts[0]
    assert task_prompt.startswith("You are the task-experience abstractor for an embodied household agent.")
    assert "TASK TYPE: pick_cool_then_place_in_recep" in task_prompt and "[E1]" in task_prompt
    assert "[N1] (E1, SUCCESS) kettle was on stoveburner 1" in task_prompt
    general_prompt = model.prompts[2]
    assert "at least two task types support it" in general_prompt


def test_an_operation_on_an_unknown_id_alone_fails_the_cycle_and_changes_no_entry():
    bank = seeded_bank()
    before = {i: (e.principle, e.status) for i, e in bank.entries.items()}
    answer = {"operations": [{"op": "update", "id": "gen-404", "principle": "x"}, {"op": "archive", "id": "task-777"}]}
    report = consolidate(bank, episodes(), LLMConsolidator(Scripted([answer]), fused=True))
    assert report.status == "failed" and report.chosen == {"add": 0, "update": 1, "archive": 1, "skip": 0}
    assert [r.split(":")[0] for r in report.rejected] == ["update gen-404", "archive task-777"]
    assert "'gen-404', which is not in the bank" in report.rejected[0]
    assert {i: (e.principle, e.status) for i, e in bank.entries.items()} == before
