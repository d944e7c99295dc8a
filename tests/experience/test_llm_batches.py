"""LLM consolidation reads every episode: complete renderings, chunks that fit the prompt budget, a final
reconciliation of the chunks' proposals, and the counts that say so (episodes seen, calls, prompt size)."""

import pytest

from evoharness_rl.experience import ExperienceBank, LLMConsolidator, consolidate
from evoharness_rl.experience.consolidation import Evidence, json_cut_off
from evoharness_rl.experience.llm import Reply
from evoharness_rl.experience.prompts import EvidenceView, render_episode
from tests.experience import synthetic
from tests.fakes.consolidator import Scripted

FAMILIES = ("pick_cool_then_place_in_recep", "pick_heat_then_place_in_recep")


def long_batch(n=24):
    """Episodes with very long observations in the middle and a distinctive last step."""
    trajs = synthetic.batch(n, families=FAMILIES, mistakes={FAMILIES[0]: "wander"})
    for i, traj in enumerate(trajs):
        traj.turns[len(traj.turns) // 2].observation = f"episode {i} middle " + "x" * 5_000
        traj.turns[-1].observation = f"the very end of episode {i}"
    return trajs


def test_an_episode_is_rendered_whole_and_long_observations_are_cut_with_a_marker():
    (traj,) = long_batch(1)
    traj.turns += [type(traj.turns[0])(index=len(traj.turns) + k, messages=[], response="", action_kind="env",
                                       action="look", observation="Nothing happens.") for k in range(5)]
    traj.turns[-1].observation = "the real end"
    text = render_episode(traj, "E1")
    assert "chars cut]" in text and "x" * 200 not in text  # the 5,000-character observation is cut
    assert text.count("look -> Nothing happens.") == 1 and "(the same 4 times)" in text  # a run of repeats folds
    assert "look -> the real end" in text and text.endswith(f"end: OUT OF STEPS after {traj.steps} steps")
    for turn in traj.turns[:-6]:  # every other action is there
        assert turn.action in text


@pytest.mark.parametrize("fused", [False, True])
def test_a_batch_four_times_the_budget_is_read_whole_in_chunks(fused):
    trajs = long_batch()
    evidence = Evidence.from_trajectories(trajs, 1)
    view = EvidenceView(evidence)
    total = sum(view.size(p) for p in range(len(evidence.episodes)))
    budget = total // 4
    model = Scripted(lambda prompt: {"operations": [], "skills": [], "mistakes": [], "search_priorities": []}
                     if "reconcile" not in prompt.lower() else {"operations": []})
    report = consolidate(ExperienceBank(), trajs, LLMConsolidator(model, fused=fused, max_prompt_chars=budget))

    for p in range(len(evidence.episodes)):  # every episode, complete, in some prompt
        assert any(view.render_episode(p) in prompt for prompt in model.prompts), f"E{p + 1} never shown"
    parts = [q for q in model.prompts if "BATCH PART" in q]
    assert len(parts) >= 4 * (1 if fused else 2) - 1  # fused: >= 4 chunks; staged: per family + general
    for prompt in parts:  # each part holds at most the budget of evidence
        evidence_text = prompt.split("SUCCESSFUL EPISODES:")[1].split("Return a JSON object")[0].split("EXISTING STORE")[0]
        assert len(evidence_text) <= budget + 200
    assert report.episodes == report.episodes_seen == len(trajs)
    metrics = report.metrics()
    assert metrics["experience/episodes_seen"] == metrics["experience/episodes_in_batch"] == len(trajs)
    assert metrics["experience/llm_calls"] == len(model.prompts)
    assert metrics["experience/prompt_chars"] == sum(map(len, model.prompts))


def test_fused_chunks_are_reconciled_in_a_final_call():
    trajs = long_batch(12)
    view = EvidenceView(Evidence.from_trajectories(trajs, 1))
    budget = sum(view.size(p) for p in range(12)) // 3

    def answer(prompt):
        if "PROPOSED EDITS" in prompt:  # the final call: one merged edit
            assert prompt.count("part 1: add") == 1 and "part 3: add" in prompt
            return {"operations": [{"op": "add", "category": "general", "principle": "merged advice",
                                    "task_types": list(FAMILIES), "evidence": ["E1", "E12"]}]}
        part = prompt.split("BATCH PART ")[1].split(" ")[0]
        return {"operations": [{"op": "add", "category": "general", "principle": f"advice of part {part}",
                                "task_types": list(FAMILIES), "evidence": ["E1"]}]}

    model = Scripted(answer)
    bank = ExperienceBank()
    report = consolidate(bank, trajs, LLMConsolidator(model, fused=True, max_prompt_chars=budget))
    assert "PROPOSED EDITS" in model.prompts[-1] and report.llm_calls == len(model.prompts) >= 4
    assert [e.principle for e in bank.active()] == ["merged advice"]  # only the final call's edits apply
    assert bank.active()[0].evidence == [Evidence.from_trajectories(trajs, 1).ref(0), Evidence.from_trajectories(trajs, 1).ref(11)]


def test_staged_chunk_candidates_meet_in_one_reconciliation_per_stage():
    trajs = long_batch(16)
    view = EvidenceView(Evidence.from_trajectories(trajs, 1))
    budget = sum(view.size(p) for p in range(16)) // 4

    def answer(prompt):
        if "STAGE: local" in prompt:
            assert "[p1.s1]" in prompt and "[p2.s1]" in prompt  # both chunks' candidates, ids kept apart
            return {"operations": [{"op": "skip", "candidate": "p1.s1"}]}
        if "task-experience abstractor" in prompt:
            return {"skills": [{"id": "s1", "principle": "a skill", "evidence": ["E1"]}], "mistakes": []}
        return {"skills": [], "mistakes": [], "operations": []}

    model = Scripted(answer)
    report = consolidate(ExperienceBank(), trajs, LLMConsolidator(model, max_prompt_chars=budget))
    assert sum("STAGE: local" in p for p in model.prompts) == 2 and report.chosen["skip"] == 2


def test_token_counts_and_a_cut_off_answer():
    trajs = synthetic.batch(4, families=FAMILIES)
    model = lambda messages: Reply('{"operations": []}', prompt_tokens=100, completion_tokens=7, finish_reason="stop")
    report = consolidate(ExperienceBank(), trajs, LLMConsolidator(model, fused=True))
    assert (report.prompt_tokens, report.completion_tokens, report.status) == (100, 7, "ok")

    truncated = '{"operations": [{"op": "add", "category": "general", "principle": "x"}, {"op": "upd'
    assert json_cut_off(truncated) and not json_cut_off('think {a} then {"operations": []}')
    for reply in (truncated, Reply('{"operations": []}', finish_reason="length")):
        bank = ExperienceBank()
        report = consolidate(bank, trajs, LLMConsolidator(lambda m: reply, fused=True))
        assert report.status == "failed" and "cut off" in report.failures[0] and "max_new_tokens" in report.failures[0]
        assert not bank.entries


def test_operations_are_counted_as_the_consolidator_decided_and_redirections_apart():
    bank = ExperienceBank()
    bank.apply([synthetic_search_add("kettle", "kettle: stoveburner")], "seed")
    answer = {"operations": [], "search_priorities": [
        {"object": "kettle", "locations": ["countertop"], "evidence": ["E1"]},  # an add the bank makes an update
        {"object": "mug", "locations": ["cabinet"], "evidence": ["E2"]}]}  # a real add
    model = Scripted([answer, {"operations": [{"op": "update", "id": "srch-001", "principle": "kettle: look first at countertop"}]}])
    report = consolidate(bank, synthetic.batch(4, families=FAMILIES), LLMConsolidator(model, fused=True))
    assert report.chosen == {"add": 2, "update": 0, "archive": 0, "skip": 0}
    assert report.ops == {"add": 1, "update": 1, "archive": 0, "skip": 0}
    assert report.redirected == {"add_to_update": 1, "add_to_skip": 0, "update_to_skip": 0}
    metrics = report.metrics()
    assert metrics["experience/chosen/add"] == 2 and metrics["experience/applied/update"] == 1
    assert metrics["experience/redirected/add_to_update"] == 1
    kettle = next(o for o in report.operations if o.get("subject") == "kettle")
    assert kettle["op"] == "add" and kettle["result"] == "update" and kettle["entry"] == "srch-001"
    assert kettle["evidence"] == [Evidence.from_trajectories(synthetic.batch(4, families=FAMILIES), 1).ref(0)]

    second = consolidate(bank, synthetic.batch(4, families=FAMILIES), LLMConsolidator(model, fused=True))
    assert second.chosen["update"] == 1 and second.redirected["update_to_skip"] == 1  # it changed nothing


def synthetic_search_add(subject, principle):
    from evoharness_rl.experience.operations import Operation

    return Operation("add", category="search", subject=subject, principle=principle)
