"""Schedule ablations: each control does what it says, deterministically, and the episode loop obeys it."""

from __future__ import annotations

from collections import Counter

import pytest

from evoharness_rl.harness.schedule import (REFUSAL, ScheduledCall, SourceEpisode, build_schedule, episode_key,
                                            save_schedule)
from evoharness_rl.rollout.episode import Episode, EpisodeSettings
from tests.fakes.keys import KeyEnv, StaticExperience

VERBS = ("track", "commit", "recall", "note")


def _sources(n: int = 40) -> dict[str, SourceEpisode]:
    """Episodes of 6..15 steps with 0..4 calls each, mixed verbs, some single-verb episodes."""
    out = {}
    for i in range(n):
        length = 6 + i % 10
        steps = sorted({(3 * i + 5 * j) % length for j in range(i % 5)})
        calls = tuple(ScheduledCall(s, VERBS[(i + j) % 4] if i % 3 else "recall", f"arg {i}.{j}")
                      for j, s in enumerate(steps))
        won = i % 4 == 0 and (not steps or steps[-1] < length - 1)  # a won episode ends with its winning action
        out[episode_key(f"task/{i}", 0)] = SourceEpisode(length, calls, f"objective {i}", won)
    return out


def test_timing_shuffle_keeps_verbs_and_arguments_and_moves_them_to_other_steps_of_the_episode():
    sources = _sources()
    table = build_schedule("timing_shuffle", sources, seed=0)
    moved = 0
    for key, src in sources.items():
        calls = table[key]
        assert [(c.verb, c.arg) for c in calls] == [(c.verb, c.arg) for c in src.calls]  # same calls, same order
        steps = [c.step for c in calls]
        assert steps == sorted(set(steps)) and all(0 <= s < src.length - src.won for s in steps)
        if 0 < len(calls) < src.length - src.won:
            assert steps != [c.step for c in src.calls]  # another placement always exists, and is taken
            moved += 1
    assert moved > 20


def test_type_shuffle_keeps_the_steps_and_permutes_the_verbs_of_the_run():
    sources = _sources()
    table = build_schedule("type_shuffle", sources, seed=0)
    before = Counter(c.verb for s in sources.values() for c in s.calls)
    after = Counter(c.verb for calls in table.values() for c in calls)
    assert after == before  # a permutation: the run's verb mix is the source's
    changed = 0
    for key, src in sources.items():
        assert [c.step for c in table[key]] == [c.step for c in src.calls]
        for old, new in zip(src.calls, table[key]):
            assert new.arg == (old.arg if new.verb == old.verb else src.objective)  # a new verb: the task's default
            changed += new.verb != old.verb
    assert changed > len(before) and changed > sum(before.values()) // 3


def test_frequency_matched_draws_as_many_calls_per_episode_at_random_steps():
    sources = _sources()
    table = build_schedule("frequency_matched", sources, seed=0, verbs=("commit", "recall"))
    for key, src in sources.items():
        calls = table[key]
        assert len(calls) == len(src.calls)
        assert all(0 <= c.step < src.length - src.won and c.verb in ("commit", "recall") and c.arg == src.objective
                   for c in calls)
    assert {c.verb for calls in table.values() for c in calls} == {"commit", "recall"}


@pytest.mark.parametrize("kind", ["timing_shuffle", "type_shuffle", "frequency_matched"])
def test_a_schedule_depends_only_on_the_seed_and_the_source(kind):
    sources = _sources()
    assert build_schedule(kind, sources, seed=1) == build_schedule(kind, dict(reversed(sources.items())), seed=1)
    assert build_schedule(kind, sources, seed=1) != build_schedule(kind, sources, seed=2)


def test_a_verb_this_run_disables_is_refused():
    with pytest.raises(ValueError, match="track"):
        build_schedule("timing_shuffle", _sources(), seed=0, verbs=("commit", "recall", "note"))


# ------------------------------------------------------------------------- the episode loop


def _episode(tmp_path, calls, retries=2, context="per_turn", max_steps=6):
    path = tmp_path / "schedule.json"
    save_schedule(path, "timing_shuffle", "src", 0, {episode_key("valid_seen/2", 0): tuple(calls)})
    settings = EpisodeSettings(mode="adaptive", schedule=str(path), schedule_retries=retries, context=context,
                               max_steps=max_steps)
    episode = Episode(KeyEnv(), settings, StaticExperience())
    episode.reset("valid_seen/2", 0)
    return episode


def _text(episode) -> str:
    return "\n".join(m["content"] for m in episode.prompt())


@pytest.mark.parametrize("context", ["per_turn", "accumulated"])
def test_a_scheduled_call_replaces_the_response_and_costs_its_step(tmp_path, context):
    ep = _episode(tmp_path, [ScheduledCall(1, "commit", "open every box")], context=context)
    ep.step("<action>open box 0</action>")
    turn = ep.step("<action>open box 1</action>")  # step 1 is the schedule's: this response is discarded
    assert (turn.schedule, turn.action_kind, turn.verb, turn.action) == ("injected", "harness", "commit",
                                                                         "open every box")
    assert turn.response == "<action>open box 1</action>" and "PLAN:\n[ ] open every box" in _text(ep)
    assert ep.record.steps == 2 and ep.record.harness_calls == {"commit": 1}
    assert ep.record.scheduled_calls == [[1, "commit", "open every box"]]


@pytest.mark.parametrize("context", ["per_turn", "accumulated"])
def test_an_off_schedule_harness_call_is_refused_without_a_step_then_invalid(tmp_path, context):
    ep = _episode(tmp_path, [], retries=2, context=context)
    first = ep.step("<action>recall [where is the key]</action>")
    assert first.schedule == "refused" and first.action_kind == "invalid" and first.invalid_reason == REFUSAL
    assert ep.record.steps == 0 and ep.record.harness_calls == {} and REFUSAL in _text(ep)  # told why
    ep.step("<action>track [boxes]</action>")
    third = ep.step("<action>recall [where is the key]</action>")  # retries spent: an invalid step
    assert third.schedule == "" and third.action_kind == "invalid" and third.invalid_reason == REFUSAL
    assert ep.record.steps == 1 and ep.record.invalid_count == 1 and ep.record.refused_calls == 2
    env_turn = ep.step("<action>open box 2</action>")  # environment actions go through as always
    assert env_turn.action_kind == "env" and ep.record.steps == 2
    assert [t.index for t in ep.record.turns] == [0, 1, 2, 3]


def test_the_budget_counts_injected_calls_but_not_refusals(tmp_path):
    calls = [ScheduledCall(0, "recall", "key"), ScheduledCall(1, "note", "boxes")]
    ep = _episode(tmp_path, calls, retries=5, max_steps=3)
    ep.step("<action>open box 2</action>")  # discarded: recall injected
    ep.step("<action>open box 2</action>")  # discarded: note injected
    for _ in range(5):
        ep.step("<action>commit [x]</action>")  # refused five times, no step
    assert not ep.done and ep.record.steps == 2
    ep.step("<action>open box 0</action>")  # the third and last step
    assert ep.done and ep.record.truncated and ep.record.harness_calls == {"recall": 1, "note": 1}


def test_an_episode_missing_from_the_schedule_is_an_error(tmp_path):
    path = tmp_path / "schedule.json"
    save_schedule(path, "type_shuffle", "src", 0, {episode_key("valid_seen/1", 0): ()})
    episode = Episode(KeyEnv(), EpisodeSettings(mode="adaptive", schedule=str(path)), StaticExperience())
    with pytest.raises(KeyError, match="valid_seen/2#0"):
        episode.reset("valid_seen/2", 0)
