"""Test doubles shared by the test packages: environments, backends, warm-started policies.

- `choice.py`  press the asked-for button: the environment in which GRPO is shown to learn
- `count.py`   count steps ("step 1", "step 2", ...), with the warm start and tiny configs of the GRPO tests
- `steps.py`   count steps, with tasks that crash, hang or raise, and scripted/list backends (rollout, eval)
- `keys.py`    find the key in a box: the harness unit tests' environment, Belief and Teacher
- `consolidator.py`  a scripted consolidator model that records the prompts it is sent
- `chat_server.py`  the same behind a real OpenAI-compatible HTTP endpoint (the `openai` consolidator)
- `policy.py`  a few SFT steps that teach a tiny model the response format
- `synced.py`  a rollout engine with its own copy of the weights that takes LoRA adapters by directory (sync checks)

Pool workers import these modules by name, so they live here and not in a conftest.py.
"""

from __future__ import annotations

from evoharness_rl.envs.base import EnvSpec


def harness_spec(name: str, system: str, turn_template: str) -> EnvSpec:
    """An EnvSpec whose three harness modes share `system`, each saying what the mode adds."""
    return EnvSpec(
        name=name,
        system_prompts={
            "env_only": system,
            "always_on": system + " Harness views are shown every turn.",
            "adaptive": system + " You may also use track [q], commit [subgoal], recall [q], note [insight].",
        },
        turn_template=turn_template,
    )
