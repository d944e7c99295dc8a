"""ALFWorld prompts (paper Appendix L.1.1), one system prompt per harness mode.

The paper's prompt lists `put <obj> in/on <recep>`; alfworld 0.4.x renamed that command
to `move <obj> to <recep>` (the old form gets "Nothing happens."), so the prompts name
the command the engine accepts.
"""

from __future__ import annotations

PROMPT_VERSION = "alfworld-2"  # bump when any text below (or the shared history format) changes

_INTRO = (
    "You are an autonomous intelligent agent operating in the ALFWorld text-based household environment. "
    "The objective is task completion through interactions with objects in rooms.\n\n"
    "You will receive: OBJECTIVE, OBSERVATION, ADMISSIBLE COMMANDS, PREVIOUS ACTION(S)."
)

_ENV_ACTIONS = (
    "## Environment Actions (listed in ADMISSIBLE COMMANDS)\n"
    "- go to <recep>, take <obj> from <recep>, move <obj> to <recep>\n"
    "- open/close <recep>, heat/cool/clean <obj> with <appliance>, use <tool>\n"
    "- examine/look/inventory"
)

_HARNESS_ACTIONS = (
    "## Harness Actions (cognitive tools; each call costs one step)\n"
    "### Plan\n"
    "- commit [subgoal]: Register the current subgoal. e.g. commit [find egg]\n"
    "### Perception\n"
    "- track [object]: Query a specific object's last location, state, and visited locations. e.g. track [egg]\n"
    "### Experience\n"
    "- recall [query]: Retrieve past experience. What you get depends on the query:\n"
    "  recall [where to find X] -> search hints (object->location)\n"
    "  recall [how to do Y task] -> procedures, general skills, common mistakes\n"
    "  recall [mistakes to avoid] -> common pitfalls and fixes\n"
    "- note [insight]: Record a generalizable discovery for future episodes. "
    "e.g. note [food usually in fridge or countertop]"
)

_VIEWS = (
    "## Harness Views (shown automatically after PREVIOUS ACTION(S))\n"
    "- BELIEF: objects, locations and states you have observed, receptacles searched so far\n"
    "- PROGRESS: the subgoals of the task and which are done\n"
    "- EXPERIENCE: hints from past episodes (search locations, procedures, mistakes to avoid)\n"
    "Use them to plan; they are not actions. Respond with environment actions only."
)

_SYNTAX = (
    "## Response Syntax\n"
    "<think>Brief reasoning in 1-2 sentences.</think>\n"
    "<action>your action here</action>\n\n"
    "Each response contains one action. Environment-action strings come from ADMISSIBLE COMMANDS."
)

SYSTEM_PROMPTS: dict[str, str] = {
    "env_only": "\n\n".join([_INTRO, _ENV_ACTIONS, _SYNTAX]),
    "always_on": "\n\n".join([_INTRO, _ENV_ACTIONS, _VIEWS, _SYNTAX]),
    "adaptive": "\n\n".join([_INTRO, _ENV_ACTIONS, _HARNESS_ACTIONS, _SYNTAX]),
}

TURN_TEMPLATE = (
    "OBJECTIVE: {objective}\n"
    "OBSERVATION: {observation}\n"
    "ADMISSIBLE COMMANDS: {actions}\n"
    "PREVIOUS ACTION(S):\n{history}\n"
    "{harness_views}"
)


def alfworld_spec():
    """The EnvSpec of the ALFWorld adapter."""
    from evoharness_rl.envs.base import EnvSpec

    return EnvSpec(
        name="alfworld",
        system_prompts=dict(SYSTEM_PROMPTS),
        turn_template=TURN_TEMPLATE,
        action_format="tags",
        actions_label="ADMISSIBLE COMMANDS",
        task_noun="task type",
        agent_description="a household agent in the ALFWorld text environment",
        prompt_version=PROMPT_VERSION,
        default_context="per_turn",
    )
