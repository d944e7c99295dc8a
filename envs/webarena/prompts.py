"""WebArena prompts (paper Appendix L.1.3) and the environment spec.

The `adaptive` system prompt is the paper's "WebArena browser and cognitive-tools prompt";
`env_only` (the plain browser agent) drops the cognitive-tools section and `always_on`
(EvoHarness-Base) replaces it with a description of the views appended every turn. The
conversation accumulates (paper: "the full conversation is retained across rounds"), and
actions come in a triple-backtick block. `env.prompt_style=compact` uses the shared
few-line prompt (harness/protocol.py) with the browser actions named below.
"""

from __future__ import annotations

from evoharness_rl.envs.base import EnvSpec, TokenizerText

PROMPT_VERSION = "webarena-1"  # bump when any text below (or the shared history format) changes

_INTRO = """You are an autonomous intelligent agent tasked with navigating a web browser. You receive the user's objective, the current page's accessibility tree and URL, the open tabs, and the previous action.

## Browser Actions
- Page operations: click [id], type [id] [content] [0|1], hover [id], press [key], and scroll [down|up].
- Navigation: new_tab, tab_focus [i], close_tab, goto [url], go_back, and go_forward.
- Completion: stop [answer]."""

_TOOLS = """## Cognitive Tools (page-independent; each call consumes one interaction step)
- commit [subgoal]: declare the goal you are about to pursue, not a result.
- track [visited]: list previously opened pages and URLs.
- track [values]: recover numbers seen on earlier pages.
- track [objective]: recover earlier text related to the objective; any other argument is matched literally against previously observed page text.
- recall [how to do <task type>]: retrieve procedures and principles.
- recall [mistakes to avoid]: retrieve common pitfalls.
- note [insight]: save a reusable procedure, feature location, or pitfall; its content represents reusable experience rather than the current task's answer."""

_VIEWS = """## Harness Views (maintained for you every turn)
- BELIEF: the current page, the navigation trail, the active controls and the values seen on earlier pages.
- PROGRESS: completed and pending requirements of the task.
- EXPERIENCE: procedures and pitfalls from earlier episodes.
Respond with browser actions only."""

_SYNTAX_TOOLS = """## Response Syntax
A response consists of step-by-step reasoning followed by one browser or cognitive-tool action inside a triple-backtick block. stop [answer] represents task completion."""

_SYNTAX = """## Response Syntax
A response consists of step-by-step reasoning followed by one browser action inside a triple-backtick block. stop [answer] represents task completion."""

SYSTEM_PROMPTS = {
    "env_only": "\n\n".join([_INTRO, _SYNTAX]),
    "always_on": "\n\n".join([_INTRO, _VIEWS, _SYNTAX]),
    "adaptive": "\n\n".join([_INTRO, _TOOLS, _SYNTAX_TOOLS]),
}

TURN_TEMPLATE = "OBJECTIVE: {objective}\n{observation}\nPREVIOUS ACTION(S):\n{history}\n{harness_views}"

ACTIONS_LABEL = ("browser actions: click [id], type [id] [content] [0|1], hover [id], press [key], scroll [down|up], "
                 "new_tab, tab_focus [i], close_tab, goto [url], go_back, go_forward, stop [answer]")

WEBARENA_SPEC = EnvSpec(
    name="webarena",
    system_prompts=SYSTEM_PROMPTS,
    turn_template=TURN_TEMPLATE,
    action_format="fenced",
    actions_label=ACTIONS_LABEL,
    task_noun="website",
    agent_description="a web browsing agent",
    prompt_version=PROMPT_VERSION,
    default_context="accumulated",
)


def tokenizer_text() -> TokenizerText:
    """WebArena's part of `init-model`'s tokenizer text: its system prompts."""
    return TokenizerText.of_spec(WEBARENA_SPEC)
