"""WebShop's purchase reward (Yao et al., 2022; `get_reward` in `web_agent_site/engine/goal.py`).

    reward = r_type * (matched attributes + matched options + 1[price <= ceiling])
                    / (n_attributes + n_options + 1)

A purchase succeeds when reward == 1.0; the benchmark's score is mean reward x 100.

Matching rules, as in WebShop's released code (branch `master`, the one its results use):
- fuzzy match: thefuzz `token_set_ratio` > 85 on the score rounded to an integer, after
  thefuzz's default preprocessing (lowercase, punctuation to spaces). We use rapidfuzz
  with `default_process`, which does the same preprocessing; thefuzz 0.19 scored with
  difflib, which gives the same decisions on every attribute and option pair of our
  vocabulary (checked).
- attribute: matched if some product attribute fuzzy-matches it, or if the goal
  attribute appears verbatim in the title, bullet points or description.
- option: a goal option value is matched if some selected value, of any group, fuzzy-
  matches it; each goal option counts at most once. Sizes are fuzzy too, so near sizes
  count: "1 fl oz" or "8 fl oz" for "1.7 fl oz", "large" for "x-large". WebShop first
  maps every value to the first colour word it contains (`normalize_color`); on our
  vocabulary's option values that changes no decision, so it is left out.
  `exact_size=True` compares the `size` group exactly instead. That stricter rule is the
  `EXACT_MATCH_OPTS` of WebShop's unreleased `v2` branch, not of the released reward.
- type: query_match = same product type (WebShop's `query`); category_match = the two
  breadcrumbs share >= 2 levels; title_score = the share of the goal title's nouns that
  are also nouns of the purchased title (repeats counted in the denominator, as in
  WebShop; 0.2 if the goal title has none). WebShop finds nouns with spaCy; without it we
  take every alphabetic word of both titles (`title_words`), a substitute that changed 4
  of 1,500 rewards in a comparison with spaCy. Then WebShop's thresholds: r_type = 1 if
  (query_match or category_match or title_score > 0.2), else 0.5; 0.1 if
  title_score < 0.1; 0 if title_score == 0.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from rapidfuzz import fuzz, utils

FUZZY_THRESHOLD = 85  # a fuzzy match needs a rounded token_set_ratio strictly above this (WebShop: > 85)
EXACT_MATCH_GROUPS = ("size",)  # option groups compared exactly with `exact_size=True`
# Letter-only words; the "s" of "Men's" is left out, as spaCy splits off "'s" and it is no noun.
_TITLE_WORD = re.compile(r"(?<!['’])\b[^\W\d_]+\b")


@dataclass(frozen=True)
class RewardBreakdown:
    """The reward and the terms it was computed from."""

    reward: float
    r_type: float
    title_score: float
    query_match: bool
    category_match: bool
    attributes_matched: int
    attributes_total: int
    options_matched: int
    options_total: int
    price_ok: bool

    def to_dict(self) -> dict:
        return asdict(self)


def fuzzy_match(a: str, b: str) -> bool:
    """WebShop's fuzzy equality of two short phrases (thefuzz rounds the score before comparing)."""
    return round(fuzz.token_set_ratio(a, b, processor=utils.default_process)) > FUZZY_THRESHOLD


def title_words(title: str) -> list[str]:
    """Our stand-in for the nouns spaCy finds in a title: its alphabetic words, lowercased, repeats kept."""
    return _TITLE_WORD.findall(title.lower())


def type_reward(product: dict, goal: dict) -> tuple[float, float, bool, bool]:
    """-> (r_type, title_score, query_match, category_match), from the goal's and the product's titles (`name`)."""
    query_match = product["product_type"] == goal["product_type"]
    bought_path = {x.strip() for x in product["product_category"].split("›")}
    goal_path = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(bought_path & goal_path) >= 2
    wanted = title_words(goal["name"])
    shared = set(wanted) & set(title_words(product["name"]))
    title_score = len(shared) / len(wanted) if wanted else 0.2
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, title_score, query_match, category_match


def attribute_matches(product: dict, goal_attributes: list[str]) -> int:
    """How many goal attributes the product has (list match, else verbatim in its text)."""
    text = " ".join([product["name"], " ".join(product["small_description"]), product["full_description"]]).lower()
    matched = 0
    for wanted in goal_attributes:
        if any(fuzzy_match(have, wanted) for have in product["attributes"]) or wanted.lower() in text:
            matched += 1
    return matched


def option_matches(goal_options: dict[str, str], selected: dict[str, str], exact_size: bool = False) -> int:
    """How many goal options the selected options satisfy (each counted once).

    Values are compared whatever their group, as WebShop does; with `exact_size`, a
    `size` value must be equal (case included).
    """
    matched = 0
    for goal_group, wanted in goal_options.items():
        for group, value in selected.items():
            exact = exact_size and (goal_group in EXACT_MATCH_GROUPS or group in EXACT_MATCH_GROUPS)
            if (value == wanted) if exact else fuzzy_match(value, wanted):
                matched += 1
                break
    return matched


def purchase_reward(product: dict, goal: dict, selected: dict[str, str], price: float,
                    exact_size: bool = False) -> RewardBreakdown:
    """WebShop's reward for buying `product` with `selected` options at `price`.

    `exact_size=True` is the stricter variant that gives no credit for a near size.
    """
    r_type, title_score, query_match, category_match = type_reward(product, goal)
    n_attr = attribute_matches(product, goal["attributes"])
    n_opt = option_matches(goal["goal_options"], selected, exact_size)
    price_ok = price <= goal["price_upper"]
    total = len(goal["attributes"]) + len(goal["goal_options"]) + 1
    reward = r_type * (n_attr + n_opt + int(price_ok)) / total
    return RewardBreakdown(
        reward=reward,
        r_type=r_type,
        title_score=title_score,
        query_match=query_match,
        category_match=category_match,
        attributes_matched=n_attr,
        attributes_total=len(goal["attributes"]),
        options_matched=n_opt,
        options_total=len(goal["goal_options"]),
        price_ok=price_ok,
    )
