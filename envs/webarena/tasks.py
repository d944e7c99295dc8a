"""The local task set: information seeking and navigation over the three local sites.

    tasks = build_tasks(db, seed)        # {task_id: LocalTask}, deterministic given the database and seed
    evaluate(task, answer, final_url)    # -> (score, reason)

Task ids read `<split>/<site>/<template>/<k>` (e.g. `test/admin/report_count/001`); the task
family is the site (`shop`, `admin`, `forum`), so the eval summary's per-family table is the
per-site table. Every template draws its entities without replacement, test first, so a
test task never shares its entity (product, order, post, forum, date range) with a train
task of the same template. Tasks never edit a site (the sites are read-only).

Evaluators (WebArena's kinds, scored 1.0 or 0.0 at `stop [answer]`):
- `exact`: the normalised answer equals the expected one (case, spaces, a trailing period,
  `$` and thousands separators ignored; numbers compare as numbers, so `$1,024.50` = `1024.5`);
- `url`: the page open when stopping is the expected one (path and query; the answer is not read).

Templates marked multi-page need a value read on an earlier page (a price, a customer, an
author) before the page that answers the question: that is where Belief and Progress help.
"""

from __future__ import annotations

import random
import re
import sqlite3
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from evoharness_rl.envs.webarena.data import STATUSES, YEAR
from evoharness_rl.envs.webarena.sites import SITES, money, slug

TEST_PER_TEMPLATE = 2
TRAIN_PER_TEMPLATE = 5


@dataclass(frozen=True)
class LocalTask:
    task_id: str
    site: str  # shop | admin | forum (the family)
    template: str
    objective: str
    start_url: str
    kind: str  # exact | url
    expected: str  # the answer (exact) or the URL (url)
    params: dict[str, Any] = field(default_factory=dict)  # the entities named in the objective (teacher plans)
    multi_page: bool = False

    @property
    def split(self) -> str:
        return self.task_id.split("/", 1)[0]


# ------------------------------------------------------------------------------ templates


def _shop(db: sqlite3.Connection) -> list[tuple[str, list[dict], bool]]:
    products = [dict(r) for r in db.execute("SELECT * FROM products ORDER BY id")]
    for p in products:
        p["url"] = SITES["shop"].url(f"/product/{p['sku']}")
    cats = sorted({p["category"] for p in products})
    pairs = [(a, b) for a in products for b in products if a["price_cents"] > b["price_cents"]
             and a["category"] == b["category"]][::7]
    return [
        ("price", [dict(objective=f"What is the price of the {p['name']} in the shop?", expected=money(p["price_cents"]),
                        name=p["name"]) for p in products], False),
        ("reviews", [dict(objective=f"How many reviews does the {p['name']} have?", expected=str(p["reviews"]),
                          name=p["name"]) for p in products], False),
        ("stock", [dict(objective=f"How many units of the {p['name']} are left in stock? Answer 0 if it is out of "
                                  "stock.", expected=str(p["stock"]), name=p["name"]) for p in products], False),
        ("cheapest", [dict(objective=f"What is the name of the cheapest product in the {c} category?",
                           expected=min((p for p in products if p["category"] == c),
                                        key=lambda p: (p["price_cents"], p["name"]))["name"], category=c)
                      for c in cats], False),
        ("price_difference", [dict(objective=f"How much more does the {a['name']} cost than the {b['name']}? "
                                             "Answer in dollars.", expected=money(a["price_cents"] - b["price_cents"]),
                                   names=[a["name"], b["name"]]) for a, b in pairs], True),
        ("open_product", [dict(objective=f"Open the product page of the {p['name']} and stop there.",
                               expected=p["url"], name=p["name"], kind="url") for p in products], False),
    ]


def _admin(db: sqlite3.Connection) -> list[tuple[str, list[dict], bool]]:
    orders = [dict(r) for r in db.execute(
        "SELECT o.*, c.name customer, c.city, (SELECT COUNT(*) FROM orders x WHERE x.customer_id=o.customer_id) n "
        "FROM orders o JOIN customers c ON c.id=o.customer_id ORDER BY o.id")]
    products = [dict(r) for r in db.execute("SELECT * FROM products ORDER BY id")]
    ranges = []
    for start in range(1, 13):
        for length in (1, 2, 3):
            end = start + length - 1
            if end <= 12:
                last = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[end - 1]
                ranges.append((f"{YEAR}-{start:02d}-01", f"{YEAR}-{end:02d}-{last}"))
    reports = []
    for i, (start, end) in enumerate(ranges):
        status = STATUSES[i % len(STATUSES)]
        n = db.execute("SELECT COUNT(*) FROM orders WHERE placed BETWEEN ? AND ? AND status=?",
                       (start, end, status)).fetchone()[0]
        reports.append(dict(objective=f"Using the orders report, how many {status} orders were placed from {start} "
                                      f"to {end}?", expected=str(n), start=start, end=end, status=status))
    return [
        ("order_status", [dict(objective=f"What is the status of order #{o['number']}?", expected=o["status"],
                               number=o["number"]) for o in orders], False),
        ("order_total", [dict(objective=f"What is the grand total of order #{o['number']}?",
                              expected=money(o["total_cents"]), number=o["number"]) for o in orders], False),
        ("customer_orders", [dict(objective=f"How many orders in total has the customer who placed order "
                                            f"#{o['number']} placed?", expected=str(o["n"]), number=o["number"])
                             for o in orders], True),
        ("customer_city", [dict(objective=f"In which city does the customer who placed order #{o['number']} live?",
                                expected=o["city"], number=o["number"]) for o in orders], True),
        ("report_count", reports, False),
        ("sku_stock", [dict(objective=f"According to the admin products list, what quantity of SKU {p['sku']} is in "
                                      "stock?", expected=str(p["stock"]), sku=p["sku"]) for p in products], False),
    ]


def _forum(db: sqlite3.Connection) -> list[tuple[str, list[dict], bool]]:
    posts = [dict(r) for r in db.execute(
        "SELECT p.*, u.username, u.karma, f.name forum, (SELECT COUNT(*) FROM comments c WHERE c.post_id=p.id) nc "
        "FROM posts p JOIN users u ON u.id=p.user_id JOIN forums f ON f.id=p.forum_id ORDER BY p.id")]
    forums = [r[0] for r in db.execute("SELECT name FROM forums ORDER BY id")]
    top = {f: min((p for p in posts if p["forum"] == f), key=lambda p: (-p["score"], p["id"])) for f in forums}
    return [
        ("comments", [dict(objective=f"How many comments does the forum post titled \"{p['title']}\" have?",
                           expected=str(p["nc"]), title=p["title"]) for p in posts], False),
        ("author", [dict(objective=f"What is the username of the author of the forum post \"{p['title']}\"?",
                         expected=p["username"], title=p["title"]) for p in posts], False),
        ("author_karma", [dict(objective=f"How much karma does the user who wrote the forum post \"{p['title']}\" "
                                         "have?", expected=str(p["karma"]), title=p["title"]) for p in posts], True),
        ("top_post", [dict(objective=f"What is the title of the highest-scoring post in f/{f}?",
                           expected=top[f]["title"], forum=f) for f in forums], False),
        ("forum_posts", [dict(objective=f"How many posts does the forum f/{f} have?",
                              expected=str(sum(p["forum"] == f for p in posts)), forum=f) for f in forums], False),
        ("open_profile", [dict(objective=f"Open the profile page of the user who wrote the forum post "
                                         f"\"{p['title']}\" and stop there.",
                               expected=SITES["forum"].url(f"/user/{p['username']}"), title=p["title"], kind="url")
                          for p in posts], True),
    ]


def build_tasks(db: sqlite3.Connection, seed: int = 0) -> dict[str, LocalTask]:
    """Every task of both splits, keyed by id (test tasks first, then train; templates in a fixed order)."""
    rng = random.Random(f"webarena-tasks:{seed}")
    tasks: dict[str, LocalTask] = {}
    drawn: dict[str, list[LocalTask]] = {"test": [], "train": []}
    for site, templates in (("shop", _shop(db)), ("admin", _admin(db)), ("forum", _forum(db))):
        for template, candidates, multi in templates:
            chosen = rng.sample(candidates, min(len(candidates), TEST_PER_TEMPLATE + TRAIN_PER_TEMPLATE))
            n_test = min(TEST_PER_TEMPLATE, len(chosen) // 2)
            for split, part in (("test", chosen[:n_test]), ("train", chosen[n_test:])):
                for k, spec in enumerate(part):
                    spec = dict(spec)
                    task_id = f"{split}/{site}/{template}/{k:03d}"
                    drawn[split].append(LocalTask(
                        task_id=task_id, site=site, template=template, objective=spec.pop("objective"),
                        start_url=SITES[site].url("/"), kind=spec.pop("kind", "exact"),
                        expected=spec.pop("expected"), params=spec, multi_page=multi))
    for split in ("test", "train"):
        for task in drawn[split]:
            tasks[task.task_id] = task
    return tasks


# ------------------------------------------------------------------------------ evaluation

_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")


def normalise(text: str) -> str:
    text = " ".join(str(text).strip().lower().split()).strip("\"'` ").rstrip(".").strip()
    bare = text.replace("$", "").replace(",", "").strip()
    if _NUMBER.match(bare):
        value = float(bare)
        return str(int(value)) if value == int(value) else f"{value:.2f}".rstrip("0")
    return text


def normalise_url(url: str) -> tuple[str, str, tuple]:
    parts = urllib.parse.urlsplit(url)
    query = tuple(sorted(urllib.parse.parse_qsl(parts.query)))
    return (parts.hostname or "", parts.path.rstrip("/") or "/", query)


def evaluate(task: LocalTask, answer: str, final_url: str) -> tuple[float, str]:
    """(score, reason) of stopping with `answer` on `final_url`."""
    if task.kind == "url":
        ok = normalise_url(final_url) == normalise_url(task.expected)
        return (1.0, "on the expected page") if ok else (0.0, f"stopped on {final_url}, not the expected page")
    ok = normalise(answer) == normalise(task.expected)
    return (1.0, "correct answer") if ok else (0.0, "wrong answer")


__all__ = ["LocalTask", "build_tasks", "evaluate", "normalise", "slug"]
