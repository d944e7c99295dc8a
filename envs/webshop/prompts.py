"""WebShop prompts (paper Appendix L.1.2) and the environment spec.

The `adaptive` system prompt is the paper's WebShop RL policy prompt. The paper prints
only that one; `env_only` (ReAct baseline) drops the harness section, and `always_on`
(EvoHarness-Base) replaces it with a description of the views rendered every turn.
"""

from __future__ import annotations

import random

from evoharness_rl.envs.base import EnvSpec, TokenizerText

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


# ----------------------------------------------------- tokenizer text (`init-model`)

_PRODUCTS = ("shoes", "t-shirt", "shampoo", "headphones", "coffee", "jeans", "lamp", "backpack", "tea", "socks")
_ATTRIBUTES = ("men's", "women's", "organic", "wireless", "waterproof", "long lasting", "gluten free", "cotton")


def _tokenizer_turn(rng: random.Random) -> tuple[str, str, list[str], list[str]]:
    product, attribute = rng.choice(_PRODUCTS), rng.choice(_ATTRIBUTES)
    price = rng.randint(10, 90)
    objective = f"i need {attribute} {product}, and price lower than {price}.00 dollars"
    items = [f"B0{rng.randint(10**7, 10**8 - 1)}" for _ in range(3)]
    results = " [SEP] ".join(f"{item} [SEP] {attribute.title()} {product.title()} [SEP] ${rng.randint(5, 99)}.99"
                             for item in items)
    observation = f"Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] {results}"
    actions = ["click[back to search]", "click[next >]"] + [f"click[{item.lower()}]" for item in items]
    responses = [f"<think>Search first.</think><action>search[{attribute} {product}]</action>",
                 f"<think>This one matches.</think><action>{rng.choice(actions)}</action>",
                 "<think>Check the budget.</think><action>track [price]</action>",
                 f"<think>Plan.</think><action>commit [buy {product} under {price} dollars]</action>",
                 "<think>Done.</think><action>click[buy now]</action>"]
    return objective, observation, actions, responses


def tokenizer_text() -> TokenizerText:
    """WebShop's part of `init-model`'s tokenizer text: its adaptive prompt with every turn, then all three."""
    return TokenizerText(SYSTEM_PROMPTS["adaptive"], TURN_TEMPLATE, tuple(SYSTEM_PROMPTS.values()), _tokenizer_turn)
