"""Fixtures for SFT tests: a local tiny checkpoint and teacher-like trajectories.

The trajectories are built by hand (the env adapters are tested elsewhere): ALFWorld's
Appendix L system prompt, a per-turn user message, and `<think>..</think><action>..</action>`
responses, including harness verbs and one invalid turn, as a scripted teacher writes them.
"""

from __future__ import annotations


import pytest

from evoharness_rl.envs.base import EnvSpec
from evoharness_rl.models import env_prompt_texts, init_model
from evoharness_rl.rollout.trajectory import Trajectory, Turn

SYSTEM = env_prompt_texts()["alfworld"][0]
PLAN = [("harness", "commit", "find the mug"), ("env", None, "go to shelf {i}"), ("invalid", None, "fly away"),
        ("harness", "track", "mug"), ("env", None, "take mug {i} from shelf {i}"), ("env", None, "go to desk 1"),
        ("env", None, "move mug {i} to desk 1")]


def _response(kind: str, verb, action: str) -> str:
    act = f"{verb} [{action}]" if verb else action
    return f"<think>Step towards the goal: {action}.</think><action>{act}</action>"


def make_trajectory(i: int, context: str = "per_turn", won: bool = True, prompt_version: str = "1",
                    env: str = "alfworld") -> Trajectory:
    """Episode `i`: put mug i on the desk, one turn per PLAN entry."""
    objective = f"put mug {i} on desk 1"
    traj = Trajectory(task_id=f"train/pick_and_place/{i}", family="pick_and_place", env=env, split="train",
                      objective=objective, context=context, prompt_version=prompt_version, won=won)
    observation = f"You are in the middle of a room. You see shelf {i}, desk 1."
    for index, (kind, verb, action) in enumerate(PLAN):
        action = action.format(i=i)
        user = {"role": "user", "content": f"OBJECTIVE: {objective}\nOBSERVATION: {observation}\n"
                                           f"ADMISSIBLE COMMANDS: go to shelf {i}, go to desk 1"}
        if context == "per_turn":
            messages = [{"role": "system", "content": SYSTEM}, user]
        elif index == 0:
            messages = [{"role": "system", "content": SYSTEM}, user]
        else:
            messages = [{"role": "assistant", "content": traj.turns[-1].response}, user]
        traj.turns.append(Turn(index=index, messages=messages, response=_response(kind, verb, action),
                               action_kind=kind, action=action if kind != "invalid" else "", verb=verb,
                               observation=f"result of {action}"))
        observation = f"result of {action}"
    traj.steps = len(traj.turns)
    return traj


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return str(init_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=0))


FAKE_ENV = "sftfake"


@pytest.fixture
def fake_env(monkeypatch):
    """Registers the env `sftfake`, whose EnvSpec has prompt_version "1" (for run_sft's version check)."""
    import evoharness_rl.envs as envs

    spec = EnvSpec(name=FAKE_ENV, system_prompts={"adaptive": SYSTEM}, turn_template="{observation}", prompt_version="1")
    monkeypatch.setitem(envs._REGISTRY, FAKE_ENV, envs.EnvEntry(builder=_never_built, spec=spec))
    return FAKE_ENV


def _never_built(env_cfg):
    raise AssertionError("SFT reads the prompt version from the registered spec; it never builds the env")
