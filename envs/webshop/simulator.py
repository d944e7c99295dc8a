"""An in-process WebShop: page flow, text observations and reward over our catalogue.

`WebShopTextSim` offers the interface of WebShop's `WebAgentTextEnv` in text mode
(`reset(session=i)`, `step(action) -> (obs, reward, done, info)`,
`get_available_actions() -> {has_search_bar, clickables}`, `instruction_text`), so one
adapter drives either it or a real WebShop checkout.

Pages, as in WebShop (visible text joined with " [SEP] "):

    search page   WebShop [SEP] Instruction: [SEP] <instruction> [SEP] Search
    results       Instruction: [SEP] <instr> [SEP] Back to Search [SEP] Page 1 (Total results: 50)
                  [SEP] Next > [SEP] <ASIN> [SEP] <title> [SEP] <price> ...   (10 per page, at most 50)
    item page     ... Back to Search [SEP] < Prev [SEP] <group> [SEP] <value> ... [SEP] <title>
                  [SEP] Price: <price> [SEP] Rating: <r> [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now
    sub page      ... Back to Search [SEP] < Prev [SEP] <description | bullet points | reviews>
    done          Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] <reward>

Clickables are lowercased button texts, lowercased ASINs and option values; `click` and
`search` arguments are lowercased (WebShop does the same). Transitions follow WebShop's
SimServer: "< Prev" goes item -> results (clearing options), sub page -> item (keeping
options), results page n -> n-1. One difference: the item page shows the price of the
options selected so far (a range until every priced option is chosen).

Search: BM25 (bm25s, English stopwords) over title, description, bullet points and
option values; top 50 hits with a positive score, ties broken by catalogue order. The
index is built once per catalogue per process.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import numpy as np

from evoharness_rl.envs.webshop.catalogue import Catalogue, price_bounds, price_text, variant_price
from evoharness_rl.envs.webshop.reward import purchase_reward

SEP = " [SEP] "
SEARCH_RETURN_N = 50  # WebShop returns at most 50 hits per query
BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE, BUY_NOW = "Back to Search", "Next >", "< Prev", "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")
_TOKEN = re.compile(r"(?u)\b\w\w+\b")  # bm25s' default token pattern
_ACTION = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.DOTALL | re.IGNORECASE)


def parse_action(action: str) -> tuple[Optional[str], Optional[str]]:
    """'search[x]' -> ('search', 'x'); anything else -> (None, None)."""
    match = _ACTION.match(action or "")
    if not match:
        return None, None
    return match.group(1).lower(), match.group(2).strip()


def document_text(product: dict) -> str:
    options = " ".join(o["value"] for opts in product["customization_options"].values() for o in opts)
    return " ".join([product["name"], product["full_description"], " ".join(product["small_description"]), options])


class SearchIndex:
    """BM25 over the catalogue (bm25s)."""

    def __init__(self, products: list[dict]):
        from evoharness_rl.bm25 import import_bm25s

        bm25s = import_bm25s()

        self._stopwords = set(bm25s.stopwords.STOPWORDS_EN)
        tokens = bm25s.tokenize([document_text(p) for p in products], stopwords="en", show_progress=False)
        self._retriever = bm25s.BM25()
        self._retriever.index(tokens, show_progress=False)
        self._vocab = tokens.vocab
        self._asins = np.array([p["asin"] for p in products])

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """ASINs of the best `k` matches (positive score only), best first."""
        words = [w for w in _TOKEN.findall(query.lower()) if w not in self._stopwords and w in self._vocab]
        if not words:
            return []
        scores = self._retriever.get_scores(words)
        hits = np.flatnonzero(scores > 0)
        order = hits[np.lexsort((hits, -scores[hits]))][:k]  # score desc, then catalogue order
        return self._asins[order].tolist()


def search_index(catalogue: Catalogue) -> SearchIndex:
    """The catalogue's search index (built on first use, then kept on the catalogue)."""
    if catalogue.search_index is None:
        catalogue.search_index = SearchIndex(catalogue.products)
    return catalogue.search_index


class WebShopTextSim:
    """One shopper session over a catalogue, with WebAgentTextEnv's text-mode interface."""

    def __init__(self, catalogue: Catalogue, results_per_page: int = 10):
        self.catalogue = catalogue
        self.goals = catalogue.goals
        self.index = search_index(catalogue)
        self.results_per_page = results_per_page
        self.instruction_text = ""
        self.goal: dict = {}
        self.reset(session=0)

    # -- WebAgentTextEnv interface -----------------------------------------------------

    def reset(self, session: int = 0, instruction_text: Optional[str] = None) -> tuple[str, None]:
        self.goal = self.goals[session]
        self.instruction_text = instruction_text or self.goal["instruction_text"]
        self.page = "search"
        self.query, self.results, self.page_no = "", [], 1
        self.asin: Optional[str] = None
        self.options: dict[str, str] = {}
        self.sub_page = ""
        self.reward_info: dict = {}
        self.reward = 0.0
        return self.observation, None

    @property
    def observation(self) -> str:
        return SEP.join(getattr(self, f"_{self.page}_page")())

    def get_available_actions(self) -> dict[str, Any]:
        return {"has_search_bar": self.page == "search", "clickables": list(self._clickables())}

    def step(self, action: str) -> tuple[str, float, bool, Optional[dict]]:
        """Apply one action; an action that is not available does nothing (as in WebShop)."""
        name, arg = parse_action(action)
        arg = (arg or "").lower()
        if name == "search" and arg and self.page == "search":
            self._search(arg)
        elif name == "click" and arg in self._clickables() and arg != "search":
            self._click(arg)
        done = self.page == "done"
        return self.observation, self.reward if done else 0.0, done, None

    def search(self, query: str) -> list[str]:
        """Raw search (for benchmarks): the ASINs a query returns."""
        return self.index.search(query)

    # -- transitions -------------------------------------------------------------------

    def _search(self, query: str) -> None:
        self.query, self.results, self.page_no = query, self.index.search(query), 1
        self.page, self.asin, self.options = "results", None, {}

    def _click(self, button: str) -> None:
        if button == BACK_TO_SEARCH.lower():
            self.page, self.asin, self.options = "search", None, {}
        elif self.page == "results":
            self._click_on_results(button)
        elif self.page == "item":
            self._click_on_item(button)
        elif self.page == "sub" and button == PREV_PAGE.lower():
            self.page = "item"

    def _click_on_results(self, button: str) -> None:
        if button == NEXT_PAGE.lower():
            self.page_no += 1
        elif button == PREV_PAGE.lower():
            self.page_no -= 1
        else:
            self.page, self.asin, self.options = "item", button.upper(), {}

    def _click_on_item(self, button: str) -> None:
        if button == PREV_PAGE.lower():
            self.page, self.asin, self.options = "results", None, {}
        elif button == BUY_NOW.lower():
            self._buy()
        elif button in (s.lower() for s in SUB_PAGES):
            self.page, self.sub_page = "sub", button
        else:
            self.options[self._option_group(button)] = button

    def _buy(self) -> None:
        product = self.catalogue.by_asin[self.asin]
        price = variant_price(product, self.options)
        breakdown = purchase_reward(product, self.goal, dict(self.options), price)
        self.reward = breakdown.reward
        self.reward_info = {**breakdown.to_dict(), "asin": self.asin, "options": dict(self.options), "price": price}
        self.page = "done"

    def _option_group(self, value: str) -> str:
        for group, options in self._product["customization_options"].items():
            if any(o["value"] == value for o in options):
                return group
        raise KeyError(f"{value!r} is not an option of {self.asin}")

    @property
    def _product(self) -> dict:
        return self.catalogue.by_asin[self.asin]

    # -- pages (visible text segments) -----------------------------------------------

    def _header(self) -> list[str]:
        return ["Instruction:", self.instruction_text]

    def _search_page(self) -> list[str]:
        return ["WebShop", "Instruction:", self.instruction_text, "Search"]

    def _page_hits(self) -> list[str]:
        start = (self.page_no - 1) * self.results_per_page
        return self.results[start: start + self.results_per_page]

    def _results_page(self) -> list[str]:
        text = self._header() + [BACK_TO_SEARCH, f"Page {self.page_no} (Total results: {len(self.results)})"]
        if self.page_no > 1:
            text.append(PREV_PAGE)
        if self.page_no * self.results_per_page < len(self.results):
            text.append(NEXT_PAGE)
        for asin in self._page_hits():
            product = self.catalogue.by_asin[asin]
            text += [asin, product["name"], product["pricing"]]
        return text

    def _item_page(self) -> list[str]:
        product = self._product
        text = self._header() + [BACK_TO_SEARCH, PREV_PAGE]
        for group, options in product["customization_options"].items():
            text += [group] + [o["value"] for o in options]
        text += [product["name"], f"Price: {price_text(*price_bounds(product, self.options))}",
                 f"Rating: {product['average_rating']}", *SUB_PAGES, BUY_NOW]
        return text

    def _sub_page(self) -> list[str]:
        product = self._product
        if self.sub_page == "description":
            body = [product["full_description"]]
        elif self.sub_page == "features":
            body = list(product["small_description"]) or ["No Features"]
        else:
            body = [f"{r['score']} out of 5 stars: {r['body']}" for r in product["reviews"]] or ["No Reviews"]
        return self._header() + [BACK_TO_SEARCH, PREV_PAGE] + body

    def _done_page(self) -> list[str]:
        return ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", f"{self.reward:.4g}"]

    def _clickables(self) -> list[str]:
        if self.page == "search":
            return ["search"]
        if self.page == "results":
            buttons = [BACK_TO_SEARCH.lower()]
            if self.page_no > 1:
                buttons.append(PREV_PAGE.lower())
            if self.page_no * self.results_per_page < len(self.results):
                buttons.append(NEXT_PAGE.lower())
            return buttons + [a.lower() for a in self._page_hits()]
        if self.page == "item":
            values = [o["value"] for opts in self._product["customization_options"].values() for o in opts]
            return [b.lower() for b in (BACK_TO_SEARCH, PREV_PAGE, *SUB_PAGES, BUY_NOW)] + values
        if self.page == "sub":
            return [BACK_TO_SEARCH.lower(), PREV_PAGE.lower()]
        return []
