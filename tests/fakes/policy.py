"""A warm-started tiny policy: a few supervised steps that teach the response format (envs/choice/warm.py)."""

from evoharness_rl.envs.choice.warm import warm_start

__all__ = ["warm_start"]
