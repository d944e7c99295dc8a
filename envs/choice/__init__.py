"""`choice`: the smallest environment in which a policy can learn something from reward.

Task "choice/<k>" asks for one colour ("press the green button"); the observation shows
three buttons in an order drawn from k, the admissible actions are "press <colour>" for
each. Pressing a button ends the episode: won when it was the asked-for colour; anything
else is invalid. The family is the asked-for colour. Task k asks for
`env.choice.targets[k % len(targets)]`; every split holds the same `env.choice.tasks` tasks.

With the three colours (the default) the policy must read the colour from the objective;
with one target the objective says nothing the policy needs (the easier task the CI proof
of learning uses). `warm.py` gives a model the response format with a uniformly random
colour, so it starts at chance and any rise is what GRPO taught it.

Files:
- adapter.py  the Environment, its EnvSpec, an empty Belief and the scripted presser
- warm.py     the warm start: a few supervised steps of the response format
"""

from typing import Any

from evoharness_rl.envs.choice.adapter import COLOURS, ChoiceEnv
from evoharness_rl.errors import UserError

__all__ = ["COLOURS", "ChoiceEnv", "make_choice_env"]


def make_choice_env(env_cfg: Any = None) -> ChoiceEnv:
    """Build the `choice` environment of an `EnvConfig` (its `env.choice` section; the schema defaults without one)."""
    if env_cfg is None:
        from evoharness_rl.config import ChoiceConfig

        settings = ChoiceConfig()
    else:
        settings = env_cfg.choice
    targets = tuple(settings.targets)
    unknown = [t for t in targets if t not in COLOURS]
    if not targets or unknown:
        raise UserError(f"env.choice.targets={list(targets)} must name one or more of the button colours "
                        f"{', '.join(COLOURS)}")
    return ChoiceEnv(settings.tasks, targets)
