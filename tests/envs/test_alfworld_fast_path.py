"""The ALFWorld fast path gives the engine's own text, byte for byte (envs/alfworld/fast_path.py)."""

import logging
import random

import pytest

pytest.importorskip("alfworld")

from evoharness_rl.envs.alfworld import fast_path, rooms  # noqa: E402
from evoharness_rl.envs.alfworld.adapter import AlfworldEnv  # noqa: E402
from evoharness_rl.rollout.episode import Episode, EpisodeSettings  # noqa: E402

NONSENSE = ["put mug 1 in cabinet 1", "go to the moon", "take mug 1", "open", "Look", "look ", "heat apple 1 with"]


def transcript(root, fast: bool, min_steps: int) -> list[tuple]:
    """Every engine result of seeded episodes over every game of `root`, with resets in between.

    Each turn is the teacher's move (with slips the engine rejects), a random admissible command or an
    inadmissible one, chosen by a generator seeded per episode, so both runs make the same choices as long
    as the engine answers the same.
    """
    env = AlfworldEnv(root, fast_path=fast)
    games = [t for split in ("train", "valid_seen", "valid_unseen") for t in env.task_ids(split)]
    rows: list[tuple] = []
    engine_step = env.step

    def recorded_step(action):
        result = engine_step(action)
        rows.append((action, result.observation, sorted(result.admissible_actions), result.won, result.score,
                     result.invalid))
        return result

    env.step = recorded_step
    episode_index = 0
    while len(rows) < min_steps:
        task_id = games[episode_index % len(games)]
        rng = random.Random(episode_index)
        episode = Episode(env, EpisodeSettings(mode="env_only", max_steps=rng.choice([15, 30, 45])))
        episode.reset(task_id, seed=episode_index)
        first = episode.last_env
        rows.append(("reset " + task_id, first.observation, sorted(first.admissible_actions), first.won, first.score))
        while not episode.done:
            kind = rng.random()
            if kind < 0.5:
                response = episode.teacher_response(0.0, rng, slip_rate=0.2)
            elif kind < 0.85:
                response = f"<action>{rng.choice(episode.last_env.admissible_actions)}</action>"
            else:
                response = f"<action>{rng.choice(NONSENSE)}</action>"
            episode.step(response)
        episode_index += 1
    env.close()
    return rows


@pytest.mark.slow
def test_fast_path_transcripts_are_byte_identical_to_the_engine(alfworld_root):
    fast_path.clear_caches()
    engine = transcript(alfworld_root, fast=False, min_steps=2000)
    fast = transcript(alfworld_root, fast=True, min_steps=2000)
    assert len(engine) == len(fast) >= 2000
    for i, (a, b) in enumerate(zip(engine, fast)):
        assert a == b, f"row {i} differs: engine {a!r}, fast path {b!r}"
    steps = [row for row in engine if not row[0].startswith("reset ")]
    assert sum(row[5] for row in steps) > 100  # inadmissible commands were tried
    assert sum(row[3] for row in steps) > 20  # and games were won
    families = {AlfworldEnv(alfworld_root).task_family(row[0].split(" ", 1)[1]) for row in engine
                if row[0].startswith("reset ")}
    assert families == set(rooms.FAMILIES)


def test_fast_path_patches_only_while_active_and_nests():
    from textworld.envs.pddl import textgen

    original = textgen._parse_and_convert
    with fast_path.active(True) as on:
        assert on and textgen._parse_and_convert is not original
        with fast_path.active(False) as inner:
            assert not inner and textgen._parse_and_convert is original
        assert textgen._parse_and_convert is not original
        with fast_path.active(True):
            pass
        assert textgen._parse_and_convert is not original  # the outer block still holds it
    assert textgen._parse_and_convert is original


def test_fast_path_turns_itself_off_for_other_engine_versions(monkeypatch, caplog):
    from textworld.envs.pddl import textgen

    monkeypatch.setitem(fast_path.PINNED, "tatsu", "0.0.1")
    monkeypatch.setattr(fast_path, "_supported", None)
    original = textgen._parse_and_convert
    with caplog.at_level(logging.WARNING, logger=fast_path.__name__):
        with fast_path.active(True) as on:
            assert not on and textgen._parse_and_convert is original
        with fast_path.active(True):
            pass
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "tatsu 5.8.3 (pinned 0.0.1)" in warnings[0]
    monkeypatch.setattr(fast_path, "_supported", None)


def test_fast_path_is_a_config_switch(alfworld_root):
    from evoharness_rl.config import EnvConfig

    cfg = EnvConfig(name="alfworld", data_path=str(alfworld_root))
    assert AlfworldEnv.from_config(cfg).fast_path is True
    cfg.alfworld.fast_path = False
    assert AlfworldEnv.from_config(cfg).fast_path is False
