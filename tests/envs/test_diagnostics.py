"""The diagnostic tasks (envs/diagnostics): each needs its verb exactly where the design says, and only there."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from evoharness_rl.config import Config, ConfigError, DiagnosticsConfig, EnvConfig, validate
from evoharness_rl.envs import make_env
from evoharness_rl.envs.diagnostics import decision_point
from evoharness_rl.envs.diagnostics.report import summarise, updates_to_threshold
from evoharness_rl.envs.diagnostics.tasks import CODES, DOORS, SWITCHES, VAULTS, DiagnosticsEnv, vault_door, world_vaults
from evoharness_rl.envs.diagnostics.teacher import RECALL_QUERY
from evoharness_rl.errors import UserError
from evoharness_rl.rollout.episode import Episode, EpisodeSettings


def play(env, task_id: str, responses=None, mode="adaptive", rate=0.0, seed=0):
    """One episode: the given responses in order, else the teacher at `rate`."""
    episode = Episode(env, EpisodeSettings(mode=mode, max_steps=30, history_length=1, prompt_style="compact"))
    episode.reset(task_id)
    rng, prompts = random.Random(seed), []
    responses = list(responses or [])
    while not episode.done:
        prompts.append(episode.prompt()[1]["content"])
        text = responses.pop(0) if responses else episode.teacher_response(rate, rng)
        episode.step(text)
    return episode.record, prompts


def act(action: str) -> str:
    return f"<action>{action}</action>"


@pytest.fixture
def env():
    return DiagnosticsEnv()


@pytest.mark.parametrize("rate", [0.0, 0.5, 1.0])
def test_the_teacher_wins_every_task_within_its_budget(env, rate):
    budgets = {"memory": 5, "progress": 5, "experience": 2}
    for task_id in env.task_ids("valid_seen"):
        record, _ = play(env, task_id, rate=rate, seed=hash(task_id) % 1000)
        assert record.won, task_id
        assert record.max_steps == budgets[task_id.split("/")[0]]
        if rate == 0.0:
            assert not record.harness_calls
    assert len(env.task_ids("valid_seen")) == 3 * 2 * DiagnosticsConfig().valid_tasks


def test_memory_needs_track_at_the_keypad_and_the_control_shows_the_code(env):
    record, prompts = play(env, "memory/needed/valid_seen/3", [act("continue"), act("continue"), act("track [code]")],
                           rate=0.0)
    code = record.turns[-1].action.split()[-1]
    assert record.won and f"TRACK [code]:\nThe note showed the code {code}." in prompts[-1]
    assert code not in prompts[2].split("OBSERVATION:")[1].split("ACTIONS:")[0]  # the keypad does not show it
    assert decision_point(DiagnosticsEnv(), record.task_id, record.turns) == [False, False, True, True]
    _, control = play(env, "memory/control/valid_seen/3", [act("continue"), act("continue")], rate=0.0)
    assert f"The note beside it says {env.game.code}." in control[2]
    # One wasted call costs a step; two leave no step for the code after the track at the keypad.
    once, _ = play(env, "memory/needed/valid_seen/3", [act("track [code]"), act("continue"), act("continue"),
                                                       act("track [code]"), act(f"enter {code}")])
    assert once.won and once.steps == 5
    twice, _ = play(env, "memory/needed/valid_seen/3", [act("track [code]"), act("continue"), act("commit [x]"),
                                                        act("continue"), act("track [code]"), act(f"enter {code}")])
    assert not twice.won and twice.truncated and twice.steps == 5


def test_progress_needs_commit_after_a_switch_and_the_control_lists_them(env):
    task_id = "progress/needed/valid_seen/5"
    env.reset(task_id)
    (first,) = env.game.offer  # the first panel offers one switch, at random
    (second,) = [s for s in env.game.switches if s != first]
    record, prompts = play(env, task_id, [act(f"turn on {first}"), act(f"commit [turn on {second}]"),
                                          act("continue")], rate=0.0)
    assert f"Still off: {second}. Switch {first} is now on;" in prompts[1]  # the decision point names what is left
    assert record.won and f"[ ] turn on {second}" in prompts[-1] and "Still off" not in prompts[-1]
    assert "Still off" not in prompts[-1].split("PREVIOUS ACTION(S):")[1].split("PLAN:")[0]  # gone from the history
    assert decision_point(DiagnosticsEnv(), task_id, record.turns) == [False, True, True, False]
    again, _ = play(env, task_id, [act(f"turn on {first}"), act("continue"), act(f"turn on {first}")])
    assert not again.won and again.turns[-1].observation.endswith("the breaker trips.")
    env.reset("progress/control/valid_seen/5")
    (first,) = env.game.offer
    (second,) = [s for s in env.game.switches if s != first]
    _, control = play(env, "progress/control/valid_seen/5", [act(f"turn on {first}"), act("continue")], rate=0.0)
    assert f"Still off: {second}." in control[2]


def test_progress_panels_change_with_the_reset_seed_and_the_other_tasks_do_not(env):
    """GRPO resets every update's group with another seed: a progress task's panels must not be learnable by heart."""
    def firsts(task_id):
        return {env.reset(task_id, seed)[1].observation for seed in range(12)}

    assert len(firsts("progress/needed/train/3")) > 1
    assert len(firsts("memory/needed/train/3")) == 1 and len(firsts("experience/needed/train/3")) == 1
    assert env.reset("progress/needed/train/3", 7)[1] == env.reset("progress/needed/train/3", 7)[1]
    seed = next(seed for seed in range(1, 50) if env.reset("progress/needed/train/3", seed)[1].observation
                != env.reset("progress/needed/train/3", 0)[1].observation)
    episode = Episode(env, EpisodeSettings(mode="adaptive", max_steps=30, history_length=1, prompt_style="compact"))
    episode.reset("progress/needed/train/3", seed)
    first = env.game.offer[0]
    for text in (act(f"turn on {first}"), act("commit [the rest]"), act("continue")):
        episode.step(text)
    turns = episode.record.turns
    assert decision_point(DiagnosticsEnv(), "progress/needed/train/3", turns, seed) == [False, True, True]


def test_experience_door_is_fixed_per_vault_and_world_and_hidden_unless_control():
    one, other = DiagnosticsConfig(experience_world=0, experience_vaults=16), DiagnosticsConfig(experience_world=1)
    assert not set(world_vaults(one)) & set(world_vaults(other))
    env = DiagnosticsEnv(other)
    doors = {}
    for task_id in env.task_ids("train"):
        if task_id.startswith("experience/"):
            task, first = env.reset(task_id)
            door = vault_door(other, env.game.vault)
            assert doors.setdefault(task.family, door) == door
            assert (f"the {door} door opens" in first.observation) == ("/control/" in task_id)
    assert len(doors) == other.experience_vaults and len(set(doors.values())) > 1


@pytest.mark.parametrize("task", ["memory", "progress", "experience"])
def test_a_control_looks_different_from_its_needed_twin_at_the_decision_point(task):
    # A policy can only learn to skip the call in the control if the turn where it would call tells the two apart
    # (progress's decision turn read the same in both until its control named the sign ahead).
    seen = {}
    for variant in ("needed", "control"):
        env = DiagnosticsEnv()
        _, result = env.reset(f"{task}/{variant}/train/0")
        while not env.at_decision():
            result = env.step(env.game.answer())
        names = set(CODES) | set(SWITCHES) | set(DOORS) | set(VAULTS)  # what differs between any two episodes
        seen[variant] = re.sub(r"[\w-]+", lambda m: "_" if m.group(0) in names else m.group(0), result.observation)
    assert seen["control"] != seen["needed"]


def test_every_door_opens_equally_many_of_a_worlds_vaults():
    # With doors drawn per vault, world 1 hid oak or stone behind 22 of its 32 vaults: a fixed order of two doors won
    # 0.69 of them, about what env_only GRPO reached greedily (0.71) without knowing any vault.
    for world in (0, 1):
        settings = DiagnosticsConfig(experience_world=world, experience_vaults=32, experience_doors=4)
        counts = Counter(vault_door(settings, vault) for vault in world_vaults(settings))
        assert sorted(counts.values()) == [8, 8, 8, 8], (world, counts)


def test_random_guessing_is_at_chance_on_needed_and_perfect_on_controls():
    env = DiagnosticsEnv(DiagnosticsConfig(valid_tasks=200))
    rng = random.Random(0)
    wins: dict[str, list[bool]] = {}
    for task_id in env.task_ids("valid_seen"):
        task, result = env.reset(task_id)
        for _ in range(task.info["max_steps"]):
            result = env.step(rng.choice(result.admissible_actions))
            if result.done:
                break
        key = "/".join(task_id.split("/")[:2])
        wins.setdefault(key, []).append(result.won)
    rate = {k: sum(v) / len(v) for k, v in wins.items()}
    assert 0.15 < rate["memory/needed"] < 0.35  # one code in four
    assert 0.35 < rate["progress/needed"] < 0.65  # the other switch, one time in two
    assert 0.35 < rate["experience/needed"] < 0.65  # two doors of four (no recall: two tries)



def test_one_try_seals_the_vault_after_a_wrong_door_and_a_recall_keeps_its_door():
    env = DiagnosticsEnv(DiagnosticsConfig(experience_tries=1, experience_vaults=32))
    task, first = env.reset("experience/needed/train/5")
    door = env.game.door
    wrong = next(d for d in DOORS[:4] if d != door)
    sealed = env.step(f"open {wrong} door")
    assert sealed.done and not sealed.won and "seals" in sealed.observation
    env.reset("experience/needed/train/5")
    assert env.step(f"open {door} door").won
    # Without a recall the budget's second step is no second try: chance falls from two doors in four to one.
    record, _ = play(env, "experience/needed/train/5", [act(f"open {wrong} door"), act(f"open {door} door")])
    assert not record.won and record.steps == 1
    with pytest.raises(ConfigError, match="experience_tries=3"):
        validate(Config(env=EnvConfig(name="diagnostics", diagnostics=DiagnosticsConfig(experience_tries=3))))

def test_bad_actions_are_invalid_and_the_state_stays(env):
    task, first = env.reset("memory/needed/train/0")
    bad = env.step("enter red")
    assert bad.invalid and bad.admissible_actions == ["continue"] and not bad.done
    assert env.step("continue").admissible_actions == ["continue"]
    with pytest.raises(UserError, match="not a diagnostics task id"):
        env.reset("memory/sometimes/train/0")


def test_the_bank_learns_each_vaults_door_from_teacher_episodes_and_recall_finds_it():
    from evoharness_rl.experience import ExperienceBank
    from evoharness_rl.experience.consolidation import consolidate
    from evoharness_rl.experience.grounding import load_grounding
    from evoharness_rl.experience.heuristic import HeuristicConsolidator

    env = DiagnosticsEnv()
    tasks = [t for t in env.task_ids("train") if t.startswith("experience/")]
    episodes = [play(env, t)[0] for t in tasks]
    # Policies that try a locked door twice teach the bank a general mistake that names doors too.
    for task_id in tasks[:8]:
        env.reset(task_id)
        wrong = next(d for d in DOORS[:4] if d != vault_door(env.settings, env.game.vault))
        episodes.append(play(env, task_id, [act(f"open {wrong} door")] * 2)[0])
    bank = ExperienceBank()
    consolidate(bank, episodes, HeuristicConsolidator(load_grounding("diagnostics")), update_index=1)
    assert any("door" in e.principle for e in bank.active("mistakes"))
    snapshot = bank.snapshot()
    for vault in world_vaults(env.settings):
        text, ids = snapshot.recall(RECALL_QUERY, f"vault-{vault}", 1)
        assert ids and text.endswith(f"vault-{vault}: the {vault_door(env.settings, vault)} door opens")


def test_summary_counts_calls_at_the_decision_point(env):
    runs = [play(env, "memory/needed/valid_seen/0", [act("continue"), act("continue"), act("track [code]")]),
            play(env, "memory/needed/valid_seen/1", [act("track [code]"), act("continue"), act("continue"),
                                                     act("enter red")])]
    stats = summarise([record.to_dict() for record, _ in runs], DiagnosticsEnv())[("memory", "needed")]
    assert stats["episodes"] == 2 and stats["harness_calls"] == 1.0
    assert stats["decision_point_calls"] == 1 and stats["decision_point_share"] == 0.5
    assert stats["harness_calls_by_verb"] == {"track": 1.0}


def test_updates_to_threshold_uses_a_running_mean_of_the_needed_variants():
    curve = [{"update": u, "variant": v, "success": s} for u, s in enumerate([0.2, 0.9, 0.5, 0.9, 0.9, 0.9])
             for v in ("needed",)] + [{"update": 0, "variant": "control", "success": 1.0}]
    # Running means 0.2, 0.55, 0.53, 0.77, 0.77, 0.9: the lone 0.9 at update 1 does not count, update 5 does.
    assert updates_to_threshold(curve, 0.8, window=3) == 5
    assert updates_to_threshold(curve, 0.95) is None


@pytest.mark.parametrize("override, message", [
    ({"tasks": ["memory", "recall"]}, "env.diagnostics.tasks"),
    ({"variants": []}, "env.diagnostics.variants"),
    ({"memory_codes": 9}, "env.diagnostics.memory_codes=9 must be >= 2 and <= 8"),
    ({"progress_gap": 0}, "env.diagnostics.progress_gap=0 must be >= 1"),
])
def test_bad_knobs_are_one_line_config_errors(override, message):
    cfg = Config(env=EnvConfig(name="diagnostics", diagnostics=DiagnosticsConfig(**override)))
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        validate(cfg)


def test_the_registry_builds_it_from_the_config():
    env = make_env(EnvConfig(name="diagnostics", diagnostics=DiagnosticsConfig(tasks=["progress"], valid_tasks=2,
                                                                               progress_switches=3)))
    assert env.task_ids("valid_seen") == ["progress/needed/valid_seen/0", "progress/control/valid_seen/0",
                                          "progress/needed/valid_seen/1", "progress/control/valid_seen/1"]
    task, _ = env.reset("progress/needed/valid_seen/0")
    assert task.info["max_steps"] == 3 + 2 + 3
