"""Diagnostic tasks: one harness capability each, a difficulty knob, and a paired control.

ALFWorld at CPU scale cannot tell whether RL teaches a policy *when* a harness call is worth its
step (the effect drowns in seed noise). These tasks can: each needs exactly one BPE verb at one
decision point, and each has a control variant in which the needed fact stays visible, so any
harness call there is a wasted step (bsuite's one-capability tasks; POPGym's and LMRL-Gym's
paired fully / partially observed twins).

| task | verb | what is needed | knob (`env.diagnostics`) |
|---|---|---|---|
| `memory` | `track` (Belief) | a code shown once, asked for after `memory_delay` corridor steps | `memory_delay`, `memory_codes` |
| `progress` | `commit` (Progress) | `progress_switches` switches, each turned on once in any order; a switch turned on twice trips the breaker, and which ones are on leaves the window after `progress_gap` steps | `progress_switches`, `progress_gap` |
| `experience` | `recall` (Experience) | which of `experience_doors` doors opens: fixed per vault (the task family), never shown; one try after a recall, two without (`experience_tries=1`: one either way) | `experience_doors`, `experience_tries`, `experience_vaults` |

Task ids are `<task>/<variant>/<split>/<index>` (variant `needed` or `control`). Each task sets its
own step budget (`Task.info["max_steps"]`): the moves it takes, the calls it needs and one more
(memory: the track at the keypad; progress: a commit after every switch but the last; experience:
none more, since a spare step would be a second door). One wasted call costs efficiency reward;
a second one costs the episode.

The scripted teacher (`teacher.py`) knows every answer and calls the task's verb **at random**
(`policy.harness_rate` per turn, wherever it has a step to spare), at the decision point and
elsewhere alike: SFT on its traces teaches the format and how to copy from a view, not when to
call. `decision_point` says which turns are the decision points, for the report.
"""

from evoharness_rl.envs.diagnostics.tasks import (DiagnosticsEnv, decision_point, make_diagnostics_env, split_task_id,
                                                  TASKS, VARIANTS, VERB_OF)

__all__ = ["DiagnosticsEnv", "decision_point", "make_diagnostics_env", "split_task_id", "TASKS", "VARIANTS", "VERB_OF"]
