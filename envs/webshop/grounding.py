"""WebShop text for the heuristic Experience consolidator (see evoharness_rl/experience/grounding.py).

Actions are `search[<query>]` and `click[<button>]` (WebShop's format). For Experience:
- search priorities map a task family (product category) to the search phrasings that led
  to a successful purchase, e.g. "short query (1-3 words), no price";
- procedure skeletons abstract queries, product ids and option values:
  "search[QUERY] > click[ITEM] > click[OPTION] > click[buy now]";
- paging and page-tab clicks (Next >, < Prev, Back to Search, Description, ...) are not
  procedure steps.
"""

from __future__ import annotations

import re

from evoharness_rl.rollout.trajectory import Trajectory

_ACTION = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)
_ITEM_ID = re.compile(r"^[a-z0-9]{10}$")
_PRICE = re.compile(r"\$|\bdollars?\b|\bprice\b|\d+\.\d\d")
_WORD = re.compile(r"[a-z0-9]+")
NAVIGATION = frozenset({"next >", "< prev", "back to search", "description", "features", "reviews", "attributes"})
BUTTONS = NAVIGATION | {"buy now"}


def query_phrasing(query: str) -> str:
    """A coarse class of a search query: its length and whether it states the price."""
    words = _WORD.findall(query.lower())
    size = "short query (1-3 words)" if len(words) <= 3 else "medium query (4-7 words)" if len(words) <= 7 else "long query (8+ words)"
    return size + (", with the price" if _PRICE.search(query.lower()) else ", no price")


class WebShopGrounding:
    name = "webshop"
    agent_description = "a web shopping agent in WebShop"
    task_noun = "product category"
    search_per_family = True  # a phrasing that works for one category says little about another

    def search_facts(self, traj: Trajectory) -> list[tuple[str, str]]:
        """(task family, phrasing of the last search before a successful purchase)."""
        if not traj.won:
            return []
        queries = [m.group(2) for t in traj.turns if t.action_kind == "env" for m in [_ACTION.match(t.action)]
                   if m and m.group(1).lower() == "search"]
        return [(traj.family, query_phrasing(queries[-1]))] if queries and traj.family else []

    def skeleton(self, action: str) -> str:
        match = _ACTION.match(action)
        if not match:
            return " ".join(action.lower().split())[:80]
        kind, arg = match.group(1).lower(), " ".join(match.group(2).lower().split())
        if kind == "search":
            return "search[QUERY]"
        if arg in BUTTONS:
            return f"click[{arg}]"
        if _ITEM_ID.match(arg) and any(ch.isdigit() for ch in arg):
            return "click[ITEM]"
        return "click[OPTION]"

    def key_step(self, skeleton: str) -> bool:
        return bool(skeleton) and skeleton[len("click["):-1] not in NAVIGATION

    def describe_search(self, subject: str, ranked: list[str]) -> str:
        text = f"Searching for {subject}: a {ranked[0]} worked best"
        return text + (f"; next: {'; '.join(ranked[1:])}" if ranked[1:] else "")

    def mistake_advice(self, pattern: str) -> tuple[str, str] | None:
        if pattern.startswith("invalid:click["):
            return ("clicking a button that is not on the current page",
                    "click only buttons listed in AVAILABLE ACTIONS; use 'Back to Search' to start over")
        if pattern == "invalid:search[QUERY]":
            return ("searching from a page without a search bar", "click 'Back to Search' first, then search")
        if pattern == "budget":
            return ("running out of steps before buying",
                    "search once with the product type and key attributes, open a matching item, set its options, buy")
        if pattern == "revisit":
            return ("opening the same page or search again and again",
                    "track candidates already seen and compare them instead of re-opening them")
        return None


def make_grounding() -> WebShopGrounding:
    return WebShopGrounding()
