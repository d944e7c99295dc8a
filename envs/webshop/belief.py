"""WebShop Belief: the shopping state, built from the instruction and the pages seen.

Holds the request constraints (parsed from the instruction), every candidate seen on
result pages with its price, what was learned on item pages (options offered,
attributes confirmed in the title / features / description), the current item, the
options selected on it (tracked from the clicks: WebShop's text pages do not show
them) and its price after option selection.

    track [price]       current item's price after the selected options vs the budget
    track [candidates]  products seen so far with prices and how they fit the request
    track [options]     option groups of the current item: offered, selected, required
    track [anything]    literal search over titles and texts seen so far
    render()            the comparison table (always_on mode)
    auto_progress()     each constraint, resolved or pending
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from evoharness_rl.envs.webshop.catalogue import price_text
from evoharness_rl.envs.webshop.pages import Page, Request, parse_page, parse_request
from evoharness_rl.harness.belief import Belief

if TYPE_CHECKING:  # pragma: no cover
    from evoharness_rl.envs.base import StepResult, Task

MAX_ROWS = 8  # candidates shown in the comparison table
TITLE_CHARS = 60  # titles are cut to this length in views


@dataclass
class Candidate:
    """A product seen on a results page (and possibly opened)."""

    asin: str
    title: str
    price: Optional[tuple[float, float]]
    order: int  # when it was first seen (0, 1, ...)
    opened: bool = False
    options: dict[str, list[str]] = field(default_factory=dict)  # seen on its item page
    texts: list[str] = field(default_factory=list)  # title, features, description read so far
    checked: set[str] = field(default_factory=set)  # sub pages read: features, description, reviews


def _fmt_price(price: Optional[tuple[float, float]]) -> str:
    return price_text(*price) if price else "?"


class WebShopBelief(Belief):
    """Episode-local shopping state (see module docstring)."""

    def __init__(self) -> None:
        self._clear(Request(text=""))

    def _clear(self, request: Request) -> None:
        self.request = request
        self.candidates: dict[str, Candidate] = {}
        self.queries: list[str] = []
        self.page = Page(kind="unknown")
        self.current: Optional[str] = None  # ASIN of the open item
        self.selected: dict[str, str] = {}  # options clicked on the open item
        self.current_price: Optional[tuple[float, float]] = None
        self.purchased: Optional[str] = None
        self.score: Optional[float] = None

    # -- Belief interface ----------------------------------------------------------------

    def reset(self, task: "Task", first: "StepResult") -> None:
        self._clear(parse_request(task.objective))
        self.page = parse_page(first.observation, first.admissible_actions)

    def update(self, action: str, result: "StepResult") -> None:
        if result.invalid:
            return
        previous = self.page
        self.page = page = parse_page(result.observation, result.admissible_actions)
        verb, arg = _split_action(action)
        if verb == "search":
            self.queries.append(arg)
        if page.kind == "results":
            self._fold_results(page)
            self.current, self.selected, self.current_price = None, {}, None
        elif page.kind == "item":
            self._fold_item(page, previous, arg)
        elif page.kind == "sub" and self.current:
            self.candidates[self.current].texts.extend(page.body)
            self.candidates[self.current].checked.add(arg.lower())
        elif page.kind == "search":
            self.current, self.selected, self.current_price = None, {}, None
        elif page.kind == "done":
            self.purchased, self.score = self.current, page.score

    def track(self, query: str) -> str:
        q = query.strip().lower()
        if not q:
            return self.render()
        if "price" in q or "budget" in q:
            return self.price_view()
        if "candidate" in q or "compar" in q or "product" in q:
            return self.candidates_view()
        if "option" in q or "size" in q or "color" in q or "variant" in q:
            return self.options_view()
        return self.literal_view(q)

    def render(self) -> str:
        lines = [self.request_line()]
        if self.queries:
            lines.append("SEARCHES: " + "; ".join(f'"{q}"' for q in self.queries[-3:]))
        lines.append(self.candidates_view())
        if self.current:
            lines.append(self.price_view())
        return "\n".join(lines)

    def auto_progress(self) -> list[tuple[str, bool]]:
        item = self.candidates.get(self.current) if self.current else None
        r = self.request
        items = []
        if r.product_type:
            items.append((f"product type: {r.product_type}", bool(item and self.type_ok(item))))
        items += [(f"attribute: {a}", bool(item and a in self.confirmed(item))) for a in r.attributes]
        items += [(f"option {g}: {v}", self.selected.get(g) == v) for g, v in r.options.items()]
        if r.price_upper is not None:
            items.append((f"price <= ${r.price_upper:.2f}", bool(item) and self.price_settled_within_budget()))
        items.append(("buy the verified item", self.purchased is not None))
        return items

    # -- folding pages in ----------------------------------------------------------------

    def _fold_results(self, page: Page) -> None:
        for result in page.results:
            if result.asin not in self.candidates:
                self.candidates[result.asin] = Candidate(result.asin, result.title, result.price, len(self.candidates))

    def _fold_item(self, page: Page, previous: Page, arg: str) -> None:
        if previous.kind == "results" and arg.upper() in self.candidates:
            self.current, self.selected = arg.upper(), {}
        if not self.current:
            return
        item = self.candidates[self.current]
        item.opened = True
        item.options = page.options
        if page.title and page.title not in item.texts:
            item.texts.insert(0, page.title)
        for group, values in page.options.items():
            if arg.lower() in values and previous.kind == "item":
                self.selected[group] = arg.lower()
        self.current_price = page.price

    # -- evaluation of candidates (from seen text only) ---------------------------------------

    def type_ok(self, item: Candidate) -> bool:
        words = self.request.type_words()
        title = item.title.lower()
        return all(re.search(rf"\b{re.escape(w)}\b", title) for w in words) if words else True

    def confirmed(self, item: Candidate) -> list[str]:
        """Requested attributes seen in the candidate's title or in texts read on its pages."""
        text = " ".join([item.title, *item.texts]).lower()
        return [a for a in self.request.attributes if a in text]

    def price_settled_within_budget(self) -> bool:
        """The open item's price fits the budget whatever remains to choose (or every requested option is chosen)."""
        price, ceiling = self.current_price, self.request.price_upper
        if price is None or ceiling is None:
            return False
        chosen = all(self.selected.get(g) == v for g, v in self.request.options.items())
        return (price[0] if chosen else price[1]) <= ceiling

    def missing_options(self, item: Candidate) -> list[str]:
        """Requested option values the opened item does not offer."""
        return [f"{g}={v}" for g, v in self.request.options.items() if item.opened and v not in item.options.get(g, [])]

    def verdict(self, item: Candidate) -> str:
        problems = []
        if not self.type_ok(item):
            problems.append("other product type")
        ceiling = self.request.price_upper
        if ceiling is not None and item.price and item.price[0] > ceiling:
            problems.append("over budget")
        problems += [f"no {m}" for m in self.missing_options(item)]
        missing = [a for a in self.request.attributes if a not in self.confirmed(item)]
        if missing and "features" in item.checked:
            problems.append("lacks " + ", ".join(missing))
        if problems:
            return "reject: " + "; ".join(problems)
        if missing:
            return "unverified: " + ", ".join(missing)
        return "fits so far"

    # -- views ---------------------------------------------------------------------------

    def request_line(self) -> str:
        r = self.request
        parts = [r.product_type or " ".join(r.keywords) or "?"]
        if r.attributes:
            parts.append("needs: " + ", ".join(r.attributes))
        if r.options:
            parts.append("options: " + ", ".join(f"{g}={v}" for g, v in r.options.items()))
        if r.price_upper is not None:
            parts.append(f"budget <= ${r.price_upper:.2f}")
        return "REQUEST: " + " | ".join(parts)

    def _ranked(self) -> list[Candidate]:
        def key(c: Candidate):
            v = self.verdict(c)
            return (v.startswith("reject"), -len(self.confirmed(c)), c.price[0] if c.price else 1e9, c.order)

        return sorted(self.candidates.values(), key=key)

    def candidates_view(self) -> str:
        if not self.candidates:
            return "CANDIDATES: none seen yet (search first)."
        ranked = self._ranked()
        n_attr = len(self.request.attributes)
        lines = [f"CANDIDATES ({len(ranked)} seen, best first):"]
        for c in ranked[:MAX_ROWS]:
            mark = " [current]" if c.asin == self.current else (" [opened]" if c.opened else "")
            lines.append(f"- {c.asin} | {_fmt_price(c.price)} | {c.title[:TITLE_CHARS]} | attrs "
                         f"{len(self.confirmed(c))}/{n_attr} | {self.verdict(c)}{mark}")
        if len(ranked) > MAX_ROWS:
            lines.append(f"... {len(ranked) - MAX_ROWS} more")
        return "\n".join(lines)

    def price_view(self) -> str:
        ceiling = self.request.price_upper
        budget = f"budget ${ceiling:.2f}" if ceiling is not None else "no budget given"
        if not self.current:
            seen = [c.price[0] for c in self.candidates.values() if c.price]
            low = f"; cheapest seen ${min(seen):.2f}" if seen else ""
            return f"PRICE: no item open ({budget}{low})."
        chosen = ", ".join(f"{g}={v}" for g, v in self.selected.items()) or "no options selected"
        price = self.current_price
        if price is None or ceiling is None:
            status = "unknown"
        elif price[1] <= ceiling:
            status = "within budget"
        elif price[0] > ceiling:
            status = "OVER budget"
        else:
            status = "depends on the options still to select"
        return f"PRICE: {self.current} costs {_fmt_price(price)} with {chosen} ({budget}: {status})."

    def options_view(self) -> str:
        if not self.current:
            wanted = ", ".join(f"{g}={v}" for g, v in self.request.options.items()) or "none"
            return f"OPTIONS: no item open; required: {wanted}."
        item = self.candidates[self.current]
        lines = [f"OPTIONS of {self.current}:"]
        for group, values in item.options.items():
            want = self.request.options.get(group)
            have = self.selected.get(group, "-")
            need = "" if want is None else (f"; required {want}" + ("" if want in values else " (NOT offered)"))
            lines.append(f"- {group}: selected {have}; offered {', '.join(values)}{need}")
        for group, want in self.request.options.items():
            if group not in item.options:
                lines.append(f"- {group}: required {want}, but this item has no {group} option")
        return "\n".join(lines) if len(lines) > 1 else f"OPTIONS: {self.current} has no options."

    def literal_view(self, query: str) -> str:
        words = [w for w in re.findall(r"[a-z0-9]+", query) if len(w) > 1]
        hits = []
        for c in self.candidates.values():
            for text in [c.title, *c.texts]:
                if words and all(w in text.lower() for w in words):
                    hits.append(f"- {c.asin}: {text[:120]}")
                    break
        if not hits:
            return f"No seen product mentions '{query}'. Try track [price], track [candidates] or track [options]."
        return f"SEEN '{query}':\n" + "\n".join(hits[:MAX_ROWS])


def _split_action(action: str) -> tuple[str, str]:
    match = re.match(r"^\s*(search|click)\s*\[(.*)\]\s*$", action or "", re.DOTALL | re.IGNORECASE)
    return (match.group(1).lower(), match.group(2).strip()) if match else ("", "")
