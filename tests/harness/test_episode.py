"""The episode loop: budget, counters, modes and both context styles."""

import random

import pytest

from evoharness_rl.harness.workspace import HarnessSwitches
from evoharness_rl.rollout.episode import Episode, EpisodeSettings
from tests.fakes.keys import KeyEnv, StaticExperience


def _episode(**kw):
    return Episode(KeyEnv(), EpisodeSettings(**kw), StaticExperience())


def test_teacher_solves_and_every_action_costs_a_step():
    ep = _episode(mode="adaptive")
    ep.reset("valid_seen/1")
    while not ep.done:
        ep.step(ep.teacher_response(1.0, random.Random(0)))
    rec = ep.record
    assert rec.won and rec.steps == 3 and rec.harness_calls == {"commit": 1}
    assert [t.action_kind for t in rec.turns] == ["harness", "env", "env"]


def test_env_only_teacher_uses_no_harness_and_verbs_are_invalid():
    ep = _episode(mode="env_only")
    ep.reset("valid_seen/2")
    turn = ep.step("<action>commit [x]</action>")
    assert turn.action_kind == "invalid" and "not available" in turn.invalid_reason
    assert "SYS env_only" in ep.prompt()[0]["content"]


def test_budget_truncation_is_never_success():
    ep = _episode(max_steps=2)
    ep.reset("valid_seen/0")
    ep.step("<action>open box 0</action>")  # finds the key
    ep.step("<action>open box 0</action>")  # budget spent before `done`
    assert ep.done and ep.record.truncated and not ep.record.won


def test_invalid_and_repeat_counters():
    ep = _episode()
    ep.reset("valid_seen/0")
    ep.step("garbage")
    ep.step("<action>dance</action>")  # env rejects: invalid with the env's feedback
    ep.step("<action>open box 1</action>")
    ep.step("<action>open box 1</action>")
    ep.step("<action>open box 1</action>")
    rec = ep.record
    assert rec.invalid_count == 2 and rec.repeat_count == 2
    assert rec.turns[1].observation == "Nothing happens." and rec.turns[1].action_kind == "invalid"


def test_per_turn_prompt_shows_history_views_and_latest_observation():
    ep = _episode(history_length=1)
    ep.reset("valid_seen/2")
    ep.step("<action>open box 0</action>")
    ep.step("<action>commit [check box 2]</action>")
    user = ep.prompt()[1]["content"]
    assert "OBSERVATION: Box 0 is empty." in user
    assert "2. commit [check box 2]" in user and "1. open box 0" not in user
    assert "PLAN:\n[ ] check box 2" in user


def test_accumulated_context_grows_one_conversation():
    ep = _episode(context="accumulated")
    ep.reset("valid_seen/2")
    assert [m["role"] for m in ep.prompt()] == ["system", "user"]
    ep.step("<action>track [box]</action>")
    assert [m["role"] for m in ep.new_messages()] == ["assistant", "user"]
    assert "opened boxes: none" in ep.new_messages()[1]["content"]
    ep.step("<action>open box 2</action>")
    assert [m["role"] for m in ep.prompt()] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert ep.record.turns[1].messages == ep.prompt()[2:4]


def test_disabled_modules_are_announced_in_the_system_prompt():
    ep = Episode(KeyEnv(), EpisodeSettings(switches=HarnessSwitches(belief=False)))
    ep.reset("train/0")
    assert "track" in ep.prompt()[0]["content"].split("Not available")[1]


def test_finished_episode_refuses_more_steps_and_records_notes():
    ep = _episode()
    ep.reset("valid_seen/0")
    ep.step("<action>note [key in box 0]</action>")
    ep.step("<action>open box 0</action>")
    ep.step("<action>done</action>")
    assert ep.record.notes == ["key in box 0"] and ep.record.won
    with pytest.raises(RuntimeError, match="finished"):
        ep.step("<action>done</action>")


def test_compact_prompt_style_lists_enabled_verbs_and_versions_the_record():
    ep = _episode(mode="adaptive", prompt_style="compact", switches=HarnessSwitches(belief=False))
    ep.reset("valid_seen/1")
    system = ep.prompt()[0]["content"]
    assert "SYS" not in system and "<action>" in system
    assert "commit [subgoal]" in system and "track" not in system  # Belief is off: its verb is not offered
    assert ep.record.prompt_version == f"{ep.spec.prompt_version}+compact"
    env_only = _episode(mode="env_only", prompt_style="compact")
    env_only.reset("valid_seen/1")
    assert "harness" not in env_only.prompt()[0]["content"]
    assert env_only.record.prompt_version == f"{ep.spec.prompt_version}+compact"
    paper = _episode(mode="adaptive")
    paper.reset("valid_seen/1")
    assert paper.record.prompt_version == paper.spec.prompt_version


def test_teacher_slip_is_a_rejected_action_the_teacher_never_sees():
    ep = _episode(mode="env_only")
    ep.reset("valid_seen/1")
    rng = random.Random(0)
    slip = ep.teacher_response(1.0, rng, slip_rate=1.0)
    assert slip == "<think>the key is surely in box 9</think><action>open box 9</action>"
    turn = ep.step(slip)
    assert turn.action_kind == "invalid" and ep._teacher.seen == []  # the teacher's state is unchanged
    assert "open box 9 (invalid) -> Nothing happens." in ep.prompt()[1]["content"]  # the history shows the attempt
    while not ep.done:
        ep.step(ep.teacher_response(1.0, rng))
    assert ep.record.won and ep.record.invalid_count == 1 and [k for k, _ in ep._teacher.seen] == ["env", "env"]


@pytest.mark.parametrize("style", ["paper", "compact"])
def test_stripped_prompt_drops_the_harness_instructions_but_not_the_verbs(style):
    full = _episode(mode="adaptive", prompt_style=style)
    full.reset("valid_seen/2")
    stripped = _episode(mode="adaptive", prompt_style=style, prompt_variant="stripped")
    stripped.reset("valid_seen/2")
    env_only = _episode(mode="env_only", prompt_style=style)
    env_only.reset("valid_seen/2")
    assert stripped.prompt()[0]["content"] == env_only.prompt()[0]["content"] != full.prompt()[0]["content"]
    turn = stripped.step("<action>commit [check box 2]</action>")  # the verbs are still actions
    assert turn.action_kind == "harness" and stripped.record.harness_calls == {"commit": 1}
    assert "PLAN:\n[ ] check box 2" in stripped.prompt()[1]["content"]  # and their views still show
