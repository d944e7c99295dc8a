"""ALFWorld on the real ALFWorld/TextWorld engine, with games generated offline.

- `adapter.AlfworldEnv`: the environment (official data or generated games);
- `generator` / `prepare.prepare(env_cfg)`: deterministic game generation and caching;
- `belief.AlfworldBelief`: the Belief tracker; `teacher.AlfworldTeacher`: the scripted expert;
- `rooms`: room templates and the placement priors (`PLACEMENT_PRIORS`, `object_type`),
  also used by the Experience heuristics.
"""

from evoharness_rl.envs.alfworld.rooms import PLACEMENT_PRIORS, object_type, placement_priors

__all__ = ["PLACEMENT_PRIORS", "object_type", "placement_priors"]
