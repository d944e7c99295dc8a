"""Shared environment fixtures: small generated ALFWorld games and one hand-written game.

Session-scoped so the engine-backed generation (a few seconds) runs once per test run.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

# A tiny kitchen written by hand in the official format: two mugs (one in a closed
# cabinet, one on the countertop), an apple in the fridge, a sink and a microwave.
HAND_PROBLEM = """(define (problem plan_hand)
    (:domain alfred)
    (:objects
        agent1 - agent
        MugType - otype
        AppleType - otype
        CounterTopType - rtype
        CabinetType - rtype
        SinkBasinType - rtype
        FridgeType - rtype
        MicrowaveType - rtype
        CounterTop_bar_01 - receptacle
        Cabinet_bar_01 - receptacle
        Sink_bar_01_bar_SinkBasin - receptacle
        Fridge_bar_01 - receptacle
        Microwave_bar_01 - receptacle
        Mug_bar_01 - object
        Mug_bar_02 - object
        Apple_bar_01 - object
        loc_bar_0 - location
        loc_bar_1 - location
        loc_bar_2 - location
        loc_bar_3 - location
        loc_bar_4 - location
        loc_bar_5 - location
    )
    (:init
        (atLocation agent1 loc_bar_0)
        (receptacleType CounterTop_bar_01 CounterTopType)
        (receptacleType Cabinet_bar_01 CabinetType)
        (receptacleType Sink_bar_01_bar_SinkBasin SinkBasinType)
        (receptacleType Fridge_bar_01 FridgeType)
        (receptacleType Microwave_bar_01 MicrowaveType)
        (receptacleAtLocation CounterTop_bar_01 loc_bar_1)
        (receptacleAtLocation Cabinet_bar_01 loc_bar_2)
        (receptacleAtLocation Sink_bar_01_bar_SinkBasin loc_bar_3)
        (receptacleAtLocation Fridge_bar_01 loc_bar_4)
        (receptacleAtLocation Microwave_bar_01 loc_bar_5)
        (openable Cabinet_bar_01)
        (openable Fridge_bar_01)
        (openable Microwave_bar_01)
        (objectType Mug_bar_01 MugType)
        (objectType Mug_bar_02 MugType)
        (objectType Apple_bar_01 AppleType)
        (inReceptacle Mug_bar_01 Cabinet_bar_01)
        (objectAtLocation Mug_bar_01 loc_bar_2)
        (inReceptacle Mug_bar_02 CounterTop_bar_01)
        (objectAtLocation Mug_bar_02 loc_bar_1)
        (inReceptacle Apple_bar_01 Fridge_bar_01)
        (objectAtLocation Apple_bar_01 loc_bar_4)
        (pickupable Mug_bar_01)
        (pickupable Mug_bar_02)
        (pickupable Apple_bar_01)
        (cleanable Mug_bar_01)
        (cleanable Mug_bar_02)
        (heatable Mug_bar_01)
        (heatable Mug_bar_02)
        (coolable Mug_bar_01)
        (coolable Mug_bar_02)
        (heatable Apple_bar_01)
        (coolable Apple_bar_01)
        (canContain CounterTopType MugType)
        (canContain CabinetType MugType)
        (canContain SinkBasinType MugType)
        (canContain MicrowaveType MugType)
        (canContain CounterTopType AppleType)
        (canContain FridgeType AppleType)
    )
    (:goal (and (exists (?r - receptacle) (exists (?o - object) (and
        (cleanable ?o) (objectType ?o MugType) (receptacleType ?r MicrowaveType) (isClean ?o) (inReceptacle ?o ?r)))))))
"""
HAND_TASK = "clean some mug and put it in microwave"
HAND_REL = "valid_seen/pick_clean_then_place_in_recep-Mug-None-Microwave-1/trial_hand"
# Mug_bar_02 sorts after Mug_bar_01; the engine numbers sorted ids from the top, so it is "mug 1".
HAND_SOLUTION = ["go to countertop 1", "take mug 1 from countertop 1", "go to sinkbasin 1",
                 "clean mug 1 with sinkbasin 1", "go to microwave 1", "open microwave 1", "move mug 1 to microwave 1"]


def write_hand_game(root: Path) -> Path:
    """Write the hand-made game under `root` in the official layout; returns its folder."""
    from evoharness_rl.envs.alfworld.gamefile import domain_and_grammar

    domain, grammar = domain_and_grammar()
    game_dir = root / HAND_REL
    game_dir.mkdir(parents=True, exist_ok=True)
    traj = {"task_type": "pick_clean_then_place_in_recep",
            "pddl_params": {"object_target": "Mug", "parent_target": "Microwave", "toggle_target": "",
                            "mrecep_target": "", "object_sliced": False},
            "turk_annotations": {"anns": [{"task_desc": HAND_TASK}]}}
    game = {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", HAND_TASK),
            "pddl_problem": HAND_PROBLEM, "solvable": True}
    (game_dir / "traj_data.json").write_text(json.dumps(traj))
    (game_dir / "game.tw-pddl").write_text(json.dumps(game))
    return game_dir


@pytest.fixture(scope="session")
def alfworld_root(tmp_path_factory) -> Path:
    """30 small generated games (train 6, valid_seen 12, valid_unseen 12), verified by the planner."""
    pytest.importorskip("alfworld")
    from evoharness_rl.envs.alfworld import generator

    root = tmp_path_factory.mktemp("alfworld_games")
    generator.write_splits(root, {"train": 6, "valid_seen": 12, "valid_unseen": 12}, size="small", seed=0, workers=1)
    return root


@pytest.fixture(scope="session")
def hand_root(tmp_path_factory) -> Path:
    """A data folder holding only the hand-written game."""
    pytest.importorskip("alfworld")
    root = tmp_path_factory.mktemp("alfworld_hand")
    write_hand_game(root)
    return root


@pytest.fixture
def alfworld_env_factory(alfworld_root):
    """Factory of AlfworldEnv over the generated games (closed after the test)."""
    from evoharness_rl.envs.alfworld.adapter import AlfworldEnv

    envs = []

    def make():
        envs.append(AlfworldEnv(alfworld_root))
        return envs[-1]

    make.picklable = functools.partial(AlfworldEnv, alfworld_root)  # what a pool worker builds
    yield make
    for env in envs:
        env.close()


@pytest.fixture
def webshop_env_factory(tmp_path):
    """Factory of the WebShop environment on a small generated catalogue."""
    from evoharness_rl.config import EnvConfig
    from evoharness_rl.envs.webshop import adapter

    cfg = EnvConfig(name="webshop", data_dir=str(tmp_path))
    cfg.webshop.num_products, cfg.webshop.num_goals, cfg.webshop.test_goals = 600, 40, 20
    envs = []

    def make():
        envs.append(adapter.make_webshop_env(cfg))
        return envs[-1]

    make.picklable = functools.partial(adapter.make_webshop_env, cfg)
    yield make
    for env in envs:
        env.close()


@pytest.fixture(scope="session")
def webarena_data(tmp_path_factory) -> str:
    """The data folder of the WebArena local sites (seeded once per session)."""
    from evoharness_rl.config import EnvConfig
    from evoharness_rl.envs.webarena.data import prepare

    root = tmp_path_factory.mktemp("webarena_data")
    prepare(EnvConfig(name="webarena", data_dir=str(root)))
    return str(root)


@pytest.fixture
def webarena_env_factory(webarena_data):
    """Factory of the WebArena environment on the local sites (real headless Chromium; closed after the test)."""
    from evoharness_rl.config import EnvConfig
    from evoharness_rl.envs import env_factory, make_env

    envs = []

    def make():
        envs.append(make_env(EnvConfig(name="webarena", data_dir=webarena_data)))
        return envs[-1]

    make.picklable = env_factory(EnvConfig(name="webarena", data_dir=webarena_data))
    yield make
    for env in envs:
        env.close()


def _registered(name: str):
    """Factory of a registered environment at its config defaults (also what a pool worker builds)."""
    from evoharness_rl.config import EnvConfig
    from evoharness_rl.envs import env_factory

    make = env_factory(EnvConfig(name=name))
    make.picklable = make
    return make


@pytest.fixture
def diagnostics_env_factory():
    """The diagnostic tasks at their defaults (pure Python state machines)."""
    return _registered("diagnostics")


@pytest.fixture
def choice_env_factory():
    """The `choice` environment of the default config (three colours)."""
    return _registered("choice")
