"""Prompts of the diagnostic tasks: a short system prompt per harness mode and one turn template.

The tasks are for small local models (run them with `env.prompt_style=compact`, as
`experiment=diagnostics` does); the `paper` style below says the same in a few sentences more.
"""

from __future__ import annotations

from evoharness_rl.envs.base import EnvSpec

PROMPT_VERSION = "diagnostics-2"  # bump when any text below or a task's observations change

_INTRO = ("You are an agent in a small text world. Each turn shows the OBJECTIVE, the OBSERVATION, the ACTIONS "
          "available now and your PREVIOUS ACTION(S).")
_SYNTAX = "Reply with <think>brief reasoning</think><action>one action</action>; the action is one of the ACTIONS."
_HARNESS = ("You may also call a harness tool instead of an action; each call costs one step of the same budget:\n"
            "- track [query]: what you have observed about the query (Belief)\n"
            "- commit [subgoal]: record a subgoal; the plan is shown on every later turn (Progress)\n"
            "- recall [query]: what past episodes learned (Experience)\n"
            "- note [insight]: leave an insight for future episodes")
_VIEWS = "BELIEF, PROGRESS and EXPERIENCE views are shown every turn; reply with actions only."

SYSTEM_PROMPTS = {
    "env_only": f"{_INTRO}\n{_SYNTAX}",
    "always_on": f"{_INTRO}\n{_VIEWS}\n{_SYNTAX}",
    "adaptive": f"{_INTRO}\n{_HARNESS}\n{_SYNTAX}",
}
TURN_TEMPLATE = ("OBJECTIVE: {objective}\nOBSERVATION: {observation}\nACTIONS: {actions}\n"
                 "PREVIOUS ACTION(S):\n{history}\n{harness_views}")

DIAGNOSTICS_SPEC = EnvSpec(
    name="diagnostics",
    system_prompts=SYSTEM_PROMPTS,
    turn_template=TURN_TEMPLATE,
    action_format="tags",
    actions_label="ACTIONS",
    task_noun="task",
    agent_description="an agent in a small text world",
    prompt_version=PROMPT_VERSION,
    default_context="per_turn",
    family_columns={},
)
