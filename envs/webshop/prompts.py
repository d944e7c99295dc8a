"""WebShop prompts (paper Appendix L.1.2) and the environment spec.

The `adaptive` system prompt is the paper's WebShop RL policy prompt. The paper prints
only that one; `env_only` (ReAct baseline) drops the harness section, and `always_on`
(EvoHarness-Base) replaces it with a description of the views rendered every turn.
"""

from __future__ import annotations

from evoharness_rl.envs.base import EnvSpec

PROMPT_VERSION = "webshop-2"  # bump when any text below (or the shared history format) changes

_INTRO = """You are an autonomous intelligent agent operating in the WebShop e-commerce environment. The objective is to buy the product that best matches the instruction, including its options and price ceiling.
You will receive: OBJECTIVE, OBSERVATION, AVAILABLE ACTIONS, PREVIOUS ACTION(S).

## Environment Actions (listed in AVAILABLE ACTIONS)
- search[<query>] on the search page.
- click[<button>] for a product, option, navigation control, or Buy Now."""

_HARNESS = """## Harness Actions (each call costs one step)
- commit [subgoal]: register the current shopping subgoal.
- track [price]: compare the current price with the budget.
- track [candidates]: list previously seen products and prices.
- track [options]: show selected options on the current item.
- recall [query]: retrieve effective searches, purchase procedures, or mistakes to avoid.
- note [insight]: save a reusable search phrasing or a shopping pitfall."""

_VIEWS = """## Harness Views (maintained for you every turn)
- BELIEF: the request constraints, products seen with their prices, the current item, its selected options and price.
- PROGRESS: which constraints are resolved and which are still pending.
- EXPERIENCE: effective searches, purchase procedures and mistakes to avoid from earlier episodes.
Respond with environment actions only."""

_SYNTAX = """## Response Syntax
<think>Brief reasoning in 1-2 sentences.</think>
<action>your action here</action>
Each response contains one action. Environment-action strings come from AVAILABLE ACTIONS."""

SYSTEM_PROMPTS = {
    "env_only": "\n\n".join([_INTRO, _SYNTAX]),
    "always_on": "\n\n".join([_INTRO, _VIEWS, _SYNTAX]),
    "adaptive": "\n\n".join([_INTRO, _HARNESS, _SYNTAX]),
}

TURN_TEMPLATE = (
    "OBJECTIVE: {objective}\nOBSERVATION: {observation}\nAVAILABLE ACTIONS: {actions}\n"
    "PREVIOUS ACTION(S):\n{history}\n{harness_views}"
)

WEBSHOP_SPEC = EnvSpec(
    name="webshop",
    system_prompts=SYSTEM_PROMPTS,
    turn_template=TURN_TEMPLATE,
    action_format="tags",
    actions_label="AVAILABLE ACTIONS",
    task_noun="product category",
    agent_description="a web shopping agent",
    prompt_version=PROMPT_VERSION,
    default_context="per_turn",
)
