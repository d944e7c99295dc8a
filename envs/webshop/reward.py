"""WebShop's purchase reward (Yao et al., 2022; `web_agent_site/engine/goal.py`).

    reward = r_type * (matched attributes + matched options + 1[price <= ceiling])
                    / (n_attributes + n_options + 1)

A purchase succeeds when reward == 1.0; the benchmark's score is mean reward x 100.

Matching rules (as in WebShop unless noted):
- attribute: matched if some product attribute has rapidfuzz `token_set_ratio` > 85
  with it (WebShop uses thefuzz with its default preprocessing: lowercase, punctuation
  to spaces; we pass rapidfuzz's `default_process`, which does the same), or if the goal
  attribute appears verbatim in the title, bullet points or description.
- option: options in the `size` group match exactly, other groups fuzzily (> 85).
  WebShop loops over the *purchased* options, so one choice could count twice; we loop
  over the *goal* options and count each at most once (reward never exceeds 1).
  WebShop also credits a purchased value that appears in the product text; our
  catalogue never writes option values into product text, so that rule is omitted.
- type: WebShop compares spaCy nouns of the purchased and the target titles. Without
  spaCy we compare words: the target's product-type words (e.g. {button, down, shirt})
  against the words of the purchased title and type. title_score = share of type words
  found; then exactly WebShop's thresholds: r_type = 1 if (same type or >= 2 shared
  breadcrumb levels or title_score > 0.2), else 0.5; 0.1 if title_score < 0.1;
  0 if title_score == 0.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from rapidfuzz import fuzz, utils

FUZZY_THRESHOLD = 85  # a fuzzy match needs token_set_ratio strictly above this (WebShop: > 85)
EXACT_MATCH_GROUPS = ("size",)  # option groups compared exactly (WebShop's EXACT_MATCH_OPTS)
_WORD = re.compile(r"[a-z0-9]+")
_TYPE_STOPWORDS = frozenset({"a", "an", "and", "the", "for", "of", "with", "de", "set"})


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
    """WebShop's fuzzy equality of two short phrases."""
    return fuzz.token_set_ratio(a, b, processor=utils.default_process) > FUZZY_THRESHOLD


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _TYPE_STOPWORDS}


def type_reward(product: dict, goal: dict) -> tuple[float, float, bool, bool]:
    """-> (r_type, title_score, query_match, category_match)."""
    query_match = product["product_type"] == goal["product_type"]
    bought_path = {x.strip() for x in product["product_category"].split("›")}
    goal_path = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(bought_path & goal_path) >= 2
    wanted = _words(goal["product_type"])
    seen = _words(product["name"]) | _words(product["product_type"])
    title_score = len(wanted & seen) / len(wanted) if wanted else 0.2
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


def option_matches(goal_options: dict[str, str], selected: dict[str, str]) -> int:
    """How many goal options the selected options satisfy (each counted once)."""
    matched = 0
    for goal_group, wanted in goal_options.items():
        for group, value in selected.items():
            exact = goal_group in EXACT_MATCH_GROUPS or group in EXACT_MATCH_GROUPS
            if (value == wanted) if exact else fuzzy_match(value, wanted):
                matched += 1
                break
    return matched


def purchase_reward(product: dict, goal: dict, selected: dict[str, str], price: float) -> RewardBreakdown:
    """WebShop's reward for buying `product` with `selected` options at `price`."""
    r_type, title_score, query_match, category_match = type_reward(product, goal)
    n_attr = attribute_matches(product, goal["attributes"])
    n_opt = option_matches(goal["goal_options"], selected)
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
