"""ALFWorld adapter over the real engine: official-layout folders, engine text, bad input, data paths, prompts."""

import json
import sys

import pytest

pytest.importorskip("alfworld")

from evoharness_rl.config import EnvConfig  # noqa: E402
from evoharness_rl.envs import make_env  # noqa: E402
from evoharness_rl.envs.alfworld import gamefile  # noqa: E402
from evoharness_rl.envs.alfworld.adapter import AlfworldEnv, DataLayoutError, resolve_data_root  # noqa: E402
from evoharness_rl.envs.alfworld.prompts import SYSTEM_PROMPTS, TURN_TEMPLATE  # noqa: E402
from tests.envs.conftest import HAND_REL, HAND_SOLUTION, HAND_TASK, write_hand_game  # noqa: E402


@pytest.fixture
def hand_env(hand_root):
    env = AlfworldEnv(hand_root)
    yield env
    env.close()


def test_task_ids_are_sorted_relative_folders(alfworld_env_factory, alfworld_root):
    env = alfworld_env_factory()
    ids = env.task_ids("valid_seen")
    assert ids == sorted(ids) and len(ids) == 12
    assert all(i.startswith("valid_seen/") and (alfworld_root / i / "game.tw-pddl").is_file() for i in ids)
    assert len(env.task_ids("train")) == 6
    with pytest.raises(ValueError, match="valid_unseen"):
        env.task_ids("test")


def test_reset_shows_the_engine_intro_and_the_task(alfworld_env_factory, alfworld_root):
    env = alfworld_env_factory()
    task_id = env.task_ids("valid_unseen")[0]
    task, first = env.reset(task_id)
    traj = json.loads((alfworld_root / task_id / "traj_data.json").read_text())
    assert task.family == traj["task_type"] and task.split == "valid_unseen"
    assert first.observation.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert f"Your task is to: {task.objective}." in first.observation
    assert task.objective in [a["task_desc"] for a in traj["turk_annotations"]["anns"]]
    assert "look" in first.admissible_actions and any(a.startswith("go to ") for a in first.admissible_actions)


def test_hand_written_game_plays_to_a_win(hand_env):
    assert hand_env.task_ids("valid_seen") == [HAND_REL]
    task, first = hand_env.reset(HAND_REL)
    assert (task.objective, task.family) == (HAND_TASK, "pick_clean_then_place_in_recep")
    assert "you see a cabinet 1, a countertop 1, a fridge 1, a microwave 1, and a sinkbasin 1" in first.observation
    observations = []
    for command in HAND_SOLUTION:
        result = hand_env.step(command)
        assert not result.invalid
        observations.append(result.observation)
    assert observations[0] == "You arrive at countertop 1. On the countertop 1, you see a mug 1."
    assert observations[3] == "You clean the mug 1 using the sinkbasin 1."
    assert observations[5].startswith("You open the microwave 1. The microwave 1 is open.")
    assert (result.won, result.done, result.score) == (True, True, 1.0)


def test_unknown_commands_get_nothing_happens_and_count_invalid(hand_env):
    hand_env.reset(HAND_REL)
    hand_env.step("go to countertop 1")
    for bad in ("put mug 1 in countertop 1", "take mug 2 from countertop 1", "fly away", ""):
        result = hand_env.step(bad)
        assert result.observation == "Nothing happens." and result.invalid and not result.won
    assert not hand_env.step("take mug 1 from countertop 1").invalid  # state unchanged by the bad commands


def test_reset_restarts_the_same_game_and_keeps_sys_argv(hand_env):
    argv = list(sys.argv)
    _, first = hand_env.reset(HAND_REL)
    hand_env.step("go to countertop 1")
    hand_env.step("take mug 1 from countertop 1")
    _, again = hand_env.reset(HAND_REL, seed=5)
    assert again.observation == first.observation and again.admissible_actions == first.admissible_actions
    assert sys.argv == argv  # fast-downward's translator rewrites sys.argv; the adapter restores it


def test_step_before_reset_is_an_error(hand_root):
    env = AlfworldEnv(hand_root)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("look")
    env.close()
    env.close()


def _copy_hand_game(tmp_path):
    game_dir = write_hand_game(tmp_path)
    game = json.loads((game_dir / "game.tw-pddl").read_text())
    return game_dir, game, json.loads((game_dir / "traj_data.json").read_text())


@pytest.mark.parametrize("field", ["pddl_problem", "grammar", "solvable"])
def test_malformed_game_file_names_the_file_and_the_field(tmp_path, field):
    game_dir, game, _ = _copy_hand_game(tmp_path)
    del game[field]
    (game_dir / "game.tw-pddl").write_text(json.dumps(game))
    env = AlfworldEnv(tmp_path)
    with pytest.raises(gamefile.GameFileError, match=rf"game\.tw-pddl: missing field '{field}'"):
        env.reset(HAND_REL)


def test_a_broken_pddl_problem_is_reported_against_the_file(tmp_path):
    game_dir, game, _ = _copy_hand_game(tmp_path)
    game["pddl_problem"] = "(define (problem broken) (:domain alfred) (:init (atLocation agent1"
    (game_dir / "game.tw-pddl").write_text(json.dumps(game))
    with pytest.raises(gamefile.GameFileError, match=r"game\.tw-pddl: the engine cannot load this game"):
        AlfworldEnv(tmp_path).reset(HAND_REL)


def test_malformed_traj_data_and_bad_json_are_named(tmp_path):
    game_dir, _, traj = _copy_hand_game(tmp_path)
    del traj["task_type"]
    (game_dir / "traj_data.json").write_text(json.dumps(traj))
    env = AlfworldEnv(tmp_path)
    with pytest.raises(gamefile.GameFileError, match=r"traj_data\.json: missing field 'task_type'"):
        env.reset(HAND_REL)
    (game_dir / "traj_data.json").write_text("{not json")
    with pytest.raises(gamefile.GameFileError, match=r"traj_data\.json: not valid JSON"):
        env.reset(HAND_REL)


def test_unsolvable_games_are_skipped_like_alfworld_does(tmp_path):
    game_dir, game, _ = _copy_hand_game(tmp_path)
    game["solvable"] = False
    (game_dir / "game.tw-pddl").write_text(json.dumps(game))
    assert AlfworldEnv(tmp_path).task_ids("valid_seen") == []


def test_wrong_layout_says_what_is_expected(tmp_path):
    with pytest.raises(DataLayoutError, match="does not exist"):
        AlfworldEnv(tmp_path / "missing")
    write_hand_game(tmp_path)
    expected = r"expected <root>/\{train,valid_seen,valid_unseen\}.*point at its parent"
    with pytest.raises(DataLayoutError, match=expected):
        AlfworldEnv(tmp_path / "valid_seen")
    (tmp_path / "flat").mkdir()
    with pytest.raises(DataLayoutError, match="no train/valid_seen/valid_unseen folder"):
        AlfworldEnv(tmp_path / "flat")
    with pytest.raises(DataLayoutError, match=r"valid_unseen does not exist; expected"):
        AlfworldEnv(tmp_path).task_ids("valid_unseen")


def test_data_path_resolution(tmp_path, monkeypatch, hand_root):
    cfg = EnvConfig(data_dir=str(tmp_path / "data"))
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(DataLayoutError, match="evoharness-rl prepare env=alfworld"):
        resolve_data_root(cfg)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "official"))
    assert resolve_data_root(cfg) == tmp_path / "official" / "json_2.1.1"
    cfg.data_path = str(hand_root)
    assert resolve_data_root(cfg) == hand_root
    env = make_env(cfg)
    assert isinstance(env, AlfworldEnv) and env.task_ids("valid_seen") == [HAND_REL]


def test_alfworld_default_cache_is_not_taken_for_user_data(tmp_path, monkeypatch):
    """`import alfworld` sets ALFWORLD_DATA=~/.cache/alfworld when unset; that alone must not win."""
    monkeypatch.setenv("HOME", str(tmp_path))
    import evoharness_rl.envs.alfworld.adapter as adapter

    monkeypatch.setattr(adapter, "_ALFWORLD_DEFAULT_CACHE", tmp_path / ".cache" / "alfworld")
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / ".cache" / "alfworld"))
    assert adapter._user_alfworld_data() is None
    (tmp_path / ".cache" / "alfworld" / "json_2.1.1").mkdir(parents=True)
    assert adapter._user_alfworld_data() == str(tmp_path / ".cache" / "alfworld")


def test_prompts_per_mode_match_the_engine_commands(hand_env):
    spec = hand_env.spec
    assert spec.turn_template == TURN_TEMPLATE and spec.prompt_version
    assert spec.turn_template.startswith("OBJECTIVE: {objective}\nOBSERVATION: {observation}\nADMISSIBLE COMMANDS:")
    for mode, prompt in SYSTEM_PROMPTS.items():
        assert spec.system_prompts[mode] == prompt
        assert "move <obj> to <recep>" in prompt and "put <obj> in/on" not in prompt
        assert "<think>" in prompt and "<action>" in prompt
    adaptive, env_only, always_on = (SYSTEM_PROMPTS[m] for m in ("adaptive", "env_only", "always_on"))
    for verb in ("commit [", "track [", "recall [", "note ["):
        assert verb in adaptive and verb not in env_only and verb not in always_on
    assert "recall [where to find X]" in adaptive and "recall [mistakes to avoid]" in adaptive
    assert "Harness" not in env_only
    assert "shown automatically" in always_on and "environment actions only" in always_on
