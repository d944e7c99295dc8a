"""ALFWorld prompts (paper Appendix L.1.1), one system prompt per harness mode.

The paper's prompt lists `put <obj> in/on <recep>`; alfworld 0.4.x renamed that command
to `move <obj> to <recep>` (the old form gets "Nothing happens."), so the prompts name
the command the engine accepts.
"""

from __future__ import annotations

import random

from evoharness_rl.envs.base import EnvSpec, TokenizerText

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


FAMILY_COLUMNS = {  # task_type -> the paper's column name (Table 1), in the paper's order
    "pick_and_place_simple": "Pick",
    "look_at_obj_in_light": "Look",
    "pick_clean_then_place_in_recep": "Clean",
    "pick_heat_then_place_in_recep": "Heat",
    "pick_cool_then_place_in_recep": "Cool",
    "pick_two_obj_and_place": "Pick2",
}


def alfworld_spec():
    """The EnvSpec of the ALFWorld adapter."""
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
        family_columns=dict(FAMILY_COLUMNS),
    )


# ----------------------------------------------------- tokenizer text (`init-model`)

# The paper's Appendix L.1.1 prompt as printed (`put <obj> in/on <recep>`). `init-model` has
# always trained its tokenizer on this text for ALFWorld; it stays so that the same seed
# builds the same tokenizer.
_PAPER_SYSTEM_PROMPT = (
    "You are an autonomous intelligent agent operating in the ALFWorld text-based household environment. The "
    "objective is task completion through interactions with objects in rooms. You will receive: OBJECTIVE, "
    "OBSERVATION, ADMISSIBLE COMMANDS, PREVIOUS ACTION(S).\n## Environment Actions (listed in ADMISSIBLE COMMANDS)\n"
    "- go to <recep>, take <obj> from <recep>, put <obj> in/on <recep>\n- open/close <recep>, heat/cool/clean <obj> "
    "with <appliance>, use <tool>\n- examine/look/inventory\n## Harness Actions (cognitive tools; each call costs one "
    "step)\n### Plan\n- commit [subgoal]: Register the current subgoal. e.g. commit [find egg]\n### Perception\n"
    "- track [object]: Query a specific object's last location, state, and visited locations. e.g. track [egg]\n"
    "### Experience\n- recall [query]: Retrieve past experience. What you get depends on the query:\n  recall [where "
    "to find X] -> search hints (object->location)\n  recall [how to do Y task] -> procedures, general skills, common "
    "mistakes\n  recall [mistakes to avoid] -> common pitfalls and fixes\n- note [insight]: Record a generalizable "
    "discovery for future episodes. e.g. note [food usually in fridge or countertop]\n## Response Syntax\n<think>Brief "
    "reasoning in 1-2 sentences.</think>\n<action>your action here</action>\nEach response contains one action. "
    "Environment-action strings come from ADMISSIBLE COMMANDS."
)

_OBJECTS = ("mug", "apple", "egg", "book", "cellphone", "keychain", "pen", "plate", "potato", "tomato", "bowl",
            "knife", "spoon", "cd", "pillow", "vase", "creditcard", "soapbar", "towel", "lettuce", "bread", "cup")
_RECEPTACLES = ("cabinet", "countertop", "drawer", "shelf", "fridge", "microwave", "sinkbasin", "desk", "bed",
                "sofa", "garbagecan", "stoveburner", "dresser", "sidetable", "coffeemachine", "toilet", "safe")
_TASKS = ("put a {o} in {r}", "put a clean {o} in {r}", "put a hot {o} in {r}", "put a cool {o} in {r}",
          "look at {o} under the desklamp", "put two {o} in {r}")


def _tokenizer_turn(rng: random.Random) -> tuple[str, str, list[str], list[str]]:
    obj, rec = rng.choice(_OBJECTS), rng.choice(_RECEPTACLES)
    here = [f"{rng.choice(_RECEPTACLES)} {rng.randint(1, 4)}" for _ in range(rng.randint(3, 8))]
    seen = ", ".join(f"a {rng.choice(_OBJECTS)} {rng.randint(1, 3)}" for _ in range(rng.randint(1, 4)))
    observation = (f"You are in the middle of a room. Looking quickly around you, you see {', '.join(here)}. "
                   f"You arrive at {here[0]}. On the {here[0]}, you see {seen}.")
    actions = [f"go to {r}" for r in here] + [f"take {obj} 1 from {here[0]}", f"move {obj} 1 to {rec} 1",
                                              "inventory", "look", f"examine {here[0]}", f"open {here[-1]}"]
    thoughts = (f"I need to find the {obj} first.", f"The {obj} is usually on a {rec}.", "Next I should check it.")
    responses = [f"<think>{rng.choice(thoughts)}</think><action>{rng.choice(actions)}</action>",
                 f"<think>Record the plan.</think><action>commit [find {obj}]</action>",
                 f"<think>Where did I see it?</think><action>track [{obj}]</action>",
                 f"<think>Check experience.</think><action>recall [where to find {obj}]</action>",
                 f"<think>Worth remembering.</think><action>note [{obj} is often in {rec}]</action>"]
    return rng.choice(_TASKS).format(o=obj, r=rec), observation, actions, responses


def tokenizer_text() -> TokenizerText:
    """ALFWorld's part of `init-model`'s tokenizer text: the paper's prompt with every turn."""
    return TokenizerText(_PAPER_SYSTEM_PROMPT, TURN_TEMPLATE, (_PAPER_SYSTEM_PROMPT,), _tokenizer_turn)
