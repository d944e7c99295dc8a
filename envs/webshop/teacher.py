"""Scripted shopper: the WebShop teacher / `scripted` policy.

It reads only what the policy reads: the instruction and each page's text and
available actions (through its own `WebShopBelief`), never the goal. Its procedure:

1. search for the requested attributes, product type and non-size option values;
2. on a results page, open the unrejected result whose title names the product type,
   whose lowest price fits the budget and whose title shows the most requested
   attributes, trying near copies of a rejected listing last (up to 2 pages per query,
   then a shorter query);
3. on an item page, go back if the type, an option value or the price rules it out;
   read Features (Description if there are none) when an attribute is not in the title
   and go back if it is still missing; select the requested options; re-check the price after
   selection; Buy Now.
When the step budget is nearly spent it buys the best item at hand instead.

In `adaptive` mode it interleaves BPE actions at a rate scaled by `harness_rate`:
commit (shopping subgoals), recall (search phrasing, at the start), track [candidates]
(after rejecting an item), track [options] / track [price] (before buying) and note (a
search phrasing that worked). With no enabled verbs it uses environment actions only.
"""

from __future__ import annotations

import random
from typing import Optional

from evoharness_rl.envs.base import Environment, Teacher
from evoharness_rl.envs.webshop.belief import Candidate, WebShopBelief
from evoharness_rl.envs.webshop.pages import Page, Result
from evoharness_rl.harness.protocol import format_response


DEFAULT_BUDGET = 20  # WebShop's step budget (paper: 20 for training and evaluation)
PAGES_PER_QUERY = 2  # result pages read before trying another query
HARNESS_RESERVE = 3  # spare steps kept free of harness actions
MAX_QUERY_CHARS = 200  # queries are cut to this length (the adapter rejects very long ones)


class ScriptedShopper(Teacher):
    """The scripted shopper for one episode (see module docstring)."""

    def __init__(self, env: Environment, enabled_verbs: tuple[str, ...], harness_rate: float, rng: random.Random,
                 budget: int = DEFAULT_BUDGET):
        self.env = env  # the WebShop adapter: its current `task` and `last_result` are read
        self.verbs = set(enabled_verbs)
        self.rate = harness_rate
        self.rng = rng
        self.budget = budget
        self.steps = 0
        self.belief = WebShopBelief()
        self.belief.reset(env.task, env.last_result)
        self.queries = self._query_plan()
        self.query_index = -1
        self.rejected: set[str] = set()
        self.harness_done: set[str] = set()
        self.tracked_rejections = 0

    # -- Teacher interface ---------------------------------------------------------------

    def respond(self) -> str:
        think, action = self._harness_move() or self._env_move()
        self.steps += 1
        return format_response("tags", think, action)

    def observe(self, action_kind: str, action: str, result: str) -> None:
        if action_kind == "env":
            self.belief.update(action, self.env.last_result)

    # -- environment actions ---------------------------------------------------------------

    @property
    def steps_left(self) -> int:
        return self.budget - self.steps

    def _env_move(self) -> tuple[str, str]:
        page = self.belief.page
        if page.kind == "search":
            return self._search()
        if page.kind == "results":
            return self._on_results(page)
        if page.kind == "item":
            return self._on_item(page)
        if page.kind == "sub":
            return "Back to the item page.", "click[< prev]"
        # A page the parser cannot read (e.g. an unfamiliar real-WebShop layout): restart from search.
        actions = self.env.last_result.admissible_actions
        if "click[back to search]" in actions or not actions:
            return "I cannot read this page; start over from the search page.", "click[back to search]"
        return "I cannot read this page; take the first available action.", actions[0]

    def _query_plan(self) -> list[str]:
        r = self.belief.request
        plan = [r.search_query()]
        if r.product_type:
            plan += [" ".join(r.attributes[:1] + [r.product_type]), r.product_type]
        return list(dict.fromkeys(q for q in plan if q))

    def _search(self) -> tuple[str, str]:
        self.query_index = min(self.query_index + 1, len(self.queries) - 1)
        query = (self.queries[self.query_index] if self.queries else self.belief.request.text)[:MAX_QUERY_CHARS]
        r = self.belief.request
        wanted = r.product_type or "the product"
        return f"I need {wanted}{_with(r.attributes)}; search for it.", f"search[{query}]"

    def _on_results(self, page: Page) -> tuple[str, str]:
        pick = self._pick(page.results, strict=self.steps_left > self._finish_cost() + 3)
        if pick is not None:
            price = pick.price_text or "an unknown price"
            return f"{pick.asin} looks like the requested product at {price}; open it.", f"click[{pick.asin.lower()}]"
        if page.can_click("next >") and page.page_no < PAGES_PER_QUERY:
            return "Nothing on this page fits; look at the next page.", "click[next >]"
        if self.query_index + 1 < len(self.queries):
            return "These results do not fit; try a broader search.", "click[back to search]"
        pick = self._pick(page.results, strict=False)
        if pick is not None:
            return f"No better option left; open {pick.asin}.", f"click[{pick.asin.lower()}]"
        return "No results; go back to the search page.", "click[back to search]"

    def _pick(self, results: list[Result], strict: bool) -> Optional[Result]:
        """The most promising unrejected result (strict: type and budget must fit)."""
        belief, ceiling = self.belief, self.belief.request.price_upper
        rejected_titles = {belief.candidates[a].title for a in self.rejected}
        best, best_key = None, None
        for rank, result in enumerate(results):
            candidate = belief.candidates.get(result.asin)
            if candidate is None or result.asin in self.rejected:
                continue
            type_ok = belief.type_ok(candidate)
            affordable = ceiling is None or result.price is None or result.price[0] <= ceiling
            if strict and not (type_ok and affordable):
                continue
            fresh = candidate.title not in rejected_titles  # near copies of a rejected listing come last
            key = (type_ok, affordable, fresh, len(belief.confirmed(candidate)), -rank)
            if best_key is None or key > best_key:
                best, best_key = result, key
        return best

    def _finish_cost(self) -> int:
        """Environment steps needed to buy once an item is open: options + Buy Now."""
        return len(self.belief.request.options) + 1

    def _on_item(self, page: Page) -> tuple[str, str]:
        belief = self.belief
        item = belief.candidates[belief.current]
        desperate = self.steps_left <= self._finish_cost() - len(belief.selected) + 1
        problems = self._problems(item, page)
        if problems and not desperate:
            self.rejected.add(item.asin)
            return f"{item.asin} does not fit ({'; '.join(problems)}); back to the results.", "click[< prev]"
        unread = self._unread_source(item)
        if unread and not desperate:
            missing = [a for a in belief.request.attributes if a not in belief.confirmed(item)]
            return f"The title does not say {_join(missing)}; read the {unread}.", f"click[{unread}]"
        for group, value in belief.request.options.items():
            if belief.selected.get(group) != value and value in page.options.get(group, []):
                return f"Select {group} {value} as requested.", f"click[{value}]"
        return f"{item.asin} meets the request at {page.price_text or 'the shown price'}; buy it.", "click[buy now]"

    def _problems(self, item: Candidate, page: Page) -> list[str]:
        """Constraints the open item visibly violates."""
        belief, request = self.belief, self.belief.request
        problems = [] if belief.type_ok(item) else [f"not a {request.product_type}"]
        problems += [f"no {v} option" for g, v in request.options.items() if v not in page.options.get(g, [])]
        ceiling = request.price_upper
        if ceiling is not None and page.price and page.price[0] > ceiling:
            problems.append(f"costs {page.price_text} > ${ceiling:.2f}")
        missing = [a for a in request.attributes if a not in belief.confirmed(item)]
        if missing and self._unread_source(item) is None:
            problems.append(f"lacks {_join(missing)}")
        return problems

    def _unread_source(self, item: Candidate) -> Optional[str]:
        """The sub page to read for unconfirmed attributes: Features, or Description if it has none."""
        if all(a in self.belief.confirmed(item) for a in self.belief.request.attributes):
            return None
        if "features" not in item.checked:
            return "features"
        if "description" not in item.checked and "No Features" in item.texts:
            return "description"
        return None

    # -- harness actions -------------------------------------------------------------------

    def _harness_move(self) -> Optional[tuple[str, str]]:
        if not self.verbs or self.steps_left <= self._finish_cost() + HARNESS_RESERVE:
            return None
        page, belief, r = self.belief.page, self.belief, self.belief.request
        wanted = f"{r.product_type or 'the product'}{_with(r.attributes)}"
        if page.kind == "search" and not belief.queries:
            return (self._maybe("commit", "start", 1.0, f"find {wanted}", "Plan the purchase first.")
                    or self._maybe("recall", "start", 0.6, f"search phrasing for {r.product_type or 'this product'}",
                                   "Check what searches worked before."))
        if page.kind == "results" and len(self.rejected) > self.tracked_rejections:
            self.tracked_rejections = len(self.rejected)
            return self._maybe("track", f"cands{len(self.rejected)}", 0.6, "candidates",
                               "Compare the products seen so far before opening another.")
        if page.kind == "item" and belief.current:
            return self._item_harness(page, belief.current)
        return None

    def _item_harness(self, page: Page, asin: str) -> Optional[tuple[str, str]]:
        r, selected = self.belief.request, self.belief.selected
        if not selected and not self._problems(self.belief.candidates[asin], page):
            options = ", ".join(f"{g} {v}" for g, v in r.options.items()) or "the listed options"
            return self._maybe("commit", f"item-{asin}", 0.4, f"verify {asin}: select {options} and check the price",
                               "This item looks right; plan the checks.")
        if not all(selected.get(g) == v for g, v in r.options.items()) or self._problems(
                self.belief.candidates[asin], page) or self._unread_source(self.belief.candidates[asin]):
            return None
        return (self._maybe("track", f"options-{asin}", 0.4, "options", "Confirm the selected options.")
                or self._maybe("track", f"price-{asin}", 0.9, "price", "Check the price after selecting options.")
                or self._maybe("note", f"note-{asin}", 0.5,
                               f"searching '{self.belief.queries[-1] if self.belief.queries else r.text}' found a "
                               f"matching {r.product_type or 'product'}; check features and the price after options",
                               "Save the search phrasing that worked."))

    def _maybe(self, verb: str, key: str, weight: float, argument: str, think: str) -> Optional[tuple[str, str]]:
        """Use `verb` once per `key`, with probability weight * harness_rate."""
        tag = f"{verb}:{key}"
        if verb not in self.verbs or tag in self.harness_done:
            return None
        self.harness_done.add(tag)
        if self.rng.random() >= weight * self.rate:
            return None
        return think, f"{verb} [{argument}]"


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _with(attributes: list[str]) -> str:
    return f" that is {_join(attributes)}" if attributes else ""
