"""Scripted browser: the WebArena teacher / `scripted` policy for the local tasks.

It reads what the policy reads: the objective (through the task's template and the
entities the objective names, `Task.info` and the local task's params) and each
observation's accessibility tree. Element ids come from the current tree, and every
answer is read off a page, never from the site's database or the task's expected answer.

Plans (one per template; 3-7 browser actions, inside the 15-step budget):
- shop: search the product and open it, read price / reviews / stock; open a category
  sorted by price and read the first row; for a price difference, read both prices on
  their pages and subtract;
- admin: Orders -> search the number -> open the order, read status / total, or follow
  the customer link and read orders placed / city; Reports -> fill From, To, pick the
  status, Show Report, read the total; Products -> search the SKU, read the quantity;
- forum: search the title -> open the post, read the comment count or author, or open
  the author's profile and read the karma (or stop there); open a forum (sorted by top)
  and read the first post; read a forum's post count on the forum list.

In `adaptive` mode it interleaves BPE actions at a rate scaled by `harness_rate`:
`commit` the workflow stage at the start (and again before the second page of a
multi-page task), `recall` a procedure at the start, `track [values]` before answering
with a value read on an earlier page, `note` a reusable procedure at the end.
"""

from __future__ import annotations

import random
import re
from typing import Any, Iterator, Optional

from evoharness_rl.envs.base import Teacher
from evoharness_rl.envs.webarena.belief import parse_observation
from evoharness_rl.harness.protocol import format_response

Move = tuple[str, str]  # (reasoning, action)
NOTES = {
    "shop": "in the shop, search the product name with the search box and read the value on its product page",
    "admin": "in the store admin, search orders by number on the Orders page; the order page links to its customer",
    "forum": "in the forum, search the post title; the post page shows its author and comment count",
}


class Lost(Exception):
    """The page does not look as the plan expects."""


def money_of(text: str) -> int:
    return round(float(text.replace("$", "").replace(",", "")) * 100)


class ScriptedBrowser(Teacher):
    """The scripted browser for one episode (see module docstring)."""

    def __init__(self, env: Any, enabled_verbs: tuple[str, ...], harness_rate: float, rng: random.Random):
        # env: the adapter's WebArenaEnv (not imported here: the adapter imports this module)
        self.env = env
        self.verbs = set(enabled_verbs)
        self.rate = harness_rate
        self.rng = rng
        self.task = env.local_task
        if self.task is None:
            raise RuntimeError("the scripted browser needs a local task (backend=local)")
        self.params = self.task.params
        self._plan = self._run()
        self._used: set[str] = set()

    # -- Teacher interface ---------------------------------------------------------------

    def respond(self) -> str:
        try:
            think, action = next(self._plan)
        except (StopIteration, Lost) as err:
            why = str(err) if isinstance(err, Lost) else "the plan is finished"
            think, action = f"I cannot go on ({why}); stop.", "stop [unknown]"
            self._plan = iter(())
        return format_response("fenced", think, action)

    # -- reading the page ------------------------------------------------------------------

    @property
    def nodes(self) -> list[tuple[str, str, str, str]]:
        return parse_observation(self.env.last_result.observation)[3] if self.env.last_result else []

    def find(self, role: str, name: str, after: Optional[str] = None) -> str:
        """The bid of the first `role` node named `name` (after the node named `after`, if given)."""
        seen_anchor = after is None
        for bid, r, n, _ in self.nodes:
            if not seen_anchor:
                seen_anchor = n == after or n.startswith(after)
                continue
            if r == role and n == name and bid:
                return bid
        raise Lost(f"no {role} '{name}' on this page")

    def first(self, role: str, after: str) -> tuple[str, str]:
        """(bid, name) of the first `role` node after the node whose name starts with `after`."""
        seen = False
        for bid, r, n, _ in self.nodes:
            if seen and r == role and bid:
                return bid, n
            seen = seen or n.startswith(after)
        raise Lost(f"no {role} after '{after}'")

    def read(self, pattern: str) -> str:
        regex = re.compile(pattern)
        for _, _, name, _ in self.nodes:
            match = regex.search(name)
            if match:
                return match.group(1)
        raise Lost(f"nothing on this page matches {pattern!r}")

    # -- harness -------------------------------------------------------------------------

    def _maybe(self, verb: str, key: str, weight: float, argument: str, think: str) -> Optional[Move]:
        tag = f"{verb}:{key}"
        if verb not in self.verbs or tag in self._used:
            return None
        self._used.add(tag)
        if self.rng.random() >= weight * self.rate:
            return None
        return think, f"{verb} [{argument}]"

    def _harness(self, *moves: Optional[Move]) -> Iterator[Move]:
        yield from (m for m in moves if m is not None)

    # -- plans ---------------------------------------------------------------------------

    def _run(self) -> Iterator[Move]:
        task = self.task
        goal = {"shop": "find it in the shop", "admin": "look it up in the store admin",
                "forum": "find it in the forum"}[task.site]
        yield from self._harness(
            self._maybe("recall", "start", 0.4, f"how to do {task.site} tasks", "Check what worked before."),
            self._maybe("commit", "start", 1.0, f"{goal}: {task.objective[:80]}", "Plan the first stage."))
        yield from getattr(self, f"_{task.site}_{task.template}")()

    def _finish(self, answer: str, think: str, uses_earlier_value: bool = False) -> Iterator[Move]:
        if uses_earlier_value:
            yield from self._harness(self._maybe("track", "values", 0.8, "values",
                                                 "Recover the value read on the earlier page before answering."))
        yield from self._harness(self._maybe("note", "end", 0.5, NOTES[self.task.site],
                                             "Save the procedure for similar tasks."))
        yield think, f"stop [{answer}]"

    # shop

    def _open_product(self, name: str) -> Iterator[Move]:
        box = self.find("textbox", "Search products")
        yield f"Search the shop for the {name}.", f"type [{box}] [{name}] [1]"
        yield f"Open the {name} from the results.", f"click [{self.find('link', name)}]"

    def _shop_price(self) -> Iterator[Move]:
        yield from self._open_product(self.params["name"])
        price = self.read(r"^Price: (\$[\d,.]+)$")
        yield from self._finish(price, f"The page shows the price {price}.")

    def _shop_reviews(self) -> Iterator[Move]:
        yield from self._open_product(self.params["name"])
        reviews = self.read(r"^Reviews: (\d+)$")
        yield from self._finish(reviews, f"The page lists {reviews} reviews.")

    def _shop_stock(self) -> Iterator[Move]:
        yield from self._open_product(self.params["name"])
        stock = self.read(r"^Availability: (.*)$")
        match = re.search(r"\((\d+) left\)", stock)
        left = match.group(1) if match else "0"
        yield from self._finish(left, f"Availability reads '{stock}', so {left} units are left.")

    def _shop_open_product(self) -> Iterator[Move]:
        yield from self._open_product(self.params["name"])
        yield from self._finish("done", "This is the product page; stop here.")

    def _shop_cheapest(self) -> Iterator[Move]:
        category = self.params["category"]
        yield f"Open the {category} category.", f"click [{self.find('link', category)}]"
        yield "Sort the products by price, lowest first.", f"click [{self.find('link', 'Sort by price: low to high')}]"
        _, name = self.first("link", "Rating")
        yield from self._finish(name, f"The first product sorted by price is the {name}.")

    def _shop_price_difference(self) -> Iterator[Move]:
        first, second = self.params["names"]
        yield from self._open_product(first)
        price_a = self.read(r"^Price: (\$[\d,.]+)$")
        yield from self._harness(self._maybe("commit", "second", 0.6, f"read the price of the {second}",
                                             f"The {first} costs {price_a}; now the second product."))
        yield from self._open_product(second)
        price_b = self.read(r"^Price: (\$[\d,.]+)$")
        diff = money_of(price_a) - money_of(price_b)
        answer = f"${diff // 100:,}.{diff % 100:02d}"
        yield from self._finish(answer, f"{price_a} - {price_b} = {answer}.", uses_earlier_value=True)

    # admin

    def _open_order(self) -> Iterator[Move]:
        number = self.params["number"]
        yield "Go to the orders list.", f"click [{self.find('link', 'Orders')}]"
        yield f"Search for order {number}.", f"type [{self.find('textbox', 'Order number')}] [{number}] [1]"
        yield f"Open order {number}.", f"click [{self.find('link', number)}]"

    def _open_customer(self) -> Iterator[Move]:
        yield from self._open_order()
        yield from self._harness(self._maybe("commit", "customer", 0.6, "open the customer of this order",
                                             "The order page names the customer; follow the link."))
        bid, name = self.first("link", "Customer:")
        yield f"The order was placed by {name}; open the customer page.", f"click [{bid}]"

    def _admin_order_status(self) -> Iterator[Move]:
        yield from self._open_order()
        status = self.read(r"^Status: (\w+)$")
        yield from self._finish(status.lower(), f"The order status is {status}.")

    def _admin_order_total(self) -> Iterator[Move]:
        yield from self._open_order()
        total = self.read(r"^Grand Total: (\$[\d,.]+)$")
        yield from self._finish(total, f"The grand total is {total}.")

    def _admin_customer_orders(self) -> Iterator[Move]:
        yield from self._open_customer()
        n = self.read(r"^Orders placed: (\d+)$")
        yield from self._finish(n, f"The customer has placed {n} orders.", uses_earlier_value=True)

    def _admin_customer_city(self) -> Iterator[Move]:
        yield from self._open_customer()
        city = self.read(r"^City: (.+)$")
        yield from self._finish(city, f"The customer lives in {city}.", uses_earlier_value=True)

    def _admin_report_count(self) -> Iterator[Move]:
        start, end, status = self.params["start"], self.params["end"], self.params["status"]
        yield "Open the orders report.", f"click [{self.find('link', 'Reports')}]"
        yield from self._harness(self._maybe("commit", "report", 0.6, f"report {status} orders from {start} to {end}",
                                             "Set the report filter next."))
        yield "Set the start date.", f"type [{self.find('textbox', 'From')}] [{start}] [0]"
        yield "Set the end date.", f"type [{self.find('textbox', 'To')}] [{end}] [0]"
        yield f"Only {status} orders.", f"click [{self.find('radio', status.title())}]"
        yield "Run the report.", f"click [{self.find('button', 'Show Report')}]"
        total = self.read(r"^Total orders: (\d+)$")
        yield from self._finish(total, f"The report counts {total} {status} orders.")

    def _admin_sku_stock(self) -> Iterator[Move]:
        sku = self.params["sku"]
        yield "Open the products list.", f"click [{self.find('link', 'Products')}]"
        yield f"Search for {sku}.", f"type [{self.find('textbox', 'Name or SKU')}] [{sku}] [1]"
        names = [n for _, r, n, _ in self.nodes if r == "cell"]
        if sku not in names or names.index(sku) + 3 >= len(names):
            raise Lost(f"no row for {sku}")
        quantity = names[names.index(sku) + 3]
        yield from self._finish(quantity, f"The row of {sku} shows a quantity of {quantity}.")

    # forum

    def _open_post(self) -> Iterator[Move]:
        title = self.params["title"]
        yield "Search the forum for the post.", f"type [{self.find('textbox', 'Search posts')}] [{title}] [1]"
        yield "Open the post.", f"click [{self.find('link', title)}]"

    def _forum_comments(self) -> Iterator[Move]:
        yield from self._open_post()
        n = self.read(r"^(\d+) comments$")
        yield from self._finish(n, f"The post has {n} comments.")

    def _forum_author(self) -> Iterator[Move]:
        yield from self._open_post()
        _, author = self.first("link", "Submitted by")
        yield from self._finish(author, f"The post was submitted by {author}.")

    def _open_author(self) -> Iterator[Move]:
        yield from self._open_post()
        bid, author = self.first("link", "Submitted by")
        yield from self._harness(self._maybe("commit", "author", 0.6, f"open the profile of {author}",
                                             "The author is known; open the profile next."))
        yield f"The author is {author}; open the profile.", f"click [{bid}]"

    def _forum_author_karma(self) -> Iterator[Move]:
        yield from self._open_author()
        karma = self.read(r"^Karma: (\d+)$")
        yield from self._finish(karma, f"The profile shows {karma} karma.", uses_earlier_value=True)

    def _forum_open_profile(self) -> Iterator[Move]:
        yield from self._open_author()
        yield from self._finish("done", "This is the author's profile page; stop here.")

    def _forum_top_post(self) -> Iterator[Move]:
        forum = self.params["forum"]
        yield f"Open f/{forum}.", f"click [{self.find('link', 'f/' + forum)}]"
        _, title = self.first("link", "New")
        yield from self._finish(title, f"Sorted by top, the first post is '{title}'.")

    def _forum_forum_posts(self) -> Iterator[Move]:
        forum = self.params["forum"]
        nodes = self.nodes
        for i, (_, role, name, _) in enumerate(nodes):
            if role == "link" and name == f"f/{forum}" and i + 1 < len(nodes):
                match = re.match(r"^(\d+) posts", nodes[i + 1][2])
                if match:
                    yield from self._finish(match.group(1), f"The forum list shows {match.group(1)} posts in f/{forum}.")
                    return
        raise Lost(f"no post count for f/{forum}")
