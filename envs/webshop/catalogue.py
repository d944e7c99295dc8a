"""Deterministic WebShop catalogue and instruction (goal) generator.

`prepare(env_cfg)` writes, under `<env.data_dir>/webshop/p<products>_g<goals>_s<seed>_v<version>/`:

- `products.json`: products in an `items_shuffle`-like schema: asin, name (title),
  category, product_type (WebShop's `query`), product_category (breadcrumb with " › "),
  brand, pricing ("$x" or "$lo to $hi"), base_price, attributes, customization_options
  ({group: [{value, price}]}: `price` is the amount the value adds to base_price),
  small_description (bullet points), full_description, average_rating, reviews.
- `goals.json`: WebShop-style goals: asin (the product the goal was drawn from), category,
  product_type, product_category, name, instruction_text, attributes (1-3),
  goal_options ({group: value}), price_upper, plus `satisfying` / `near_misses`: how many
  products of the same type meet every constraint / miss exactly one (one attribute, one
  option value, or the budget). Goals are redrawn (up to 30 times) until at most 3
  products satisfy them and at least one misses by one constraint, so the instruction
  is specific and buying the first plausible result is not enough.
- `meta.json`: the generation parameters (written last).

Products come in families: a base listing plus 0-3 near copies that differ in one
thing a careful shopper must check (an attribute not named in the title, the price, the
options offered, or the option surcharges). Near copies share the title, so search ranks
them together and the right one is not simply the first result.

A second call with the same parameters returns at once. Families are drawn from
(seed, family index) only, so a small catalogue is a prefix of a larger one.

Splits (paper): test = goals 0..test_goals-1, train = the rest. `valid_seen` and
`valid_unseen` are accepted as aliases of `test`, so the generic evaluation command,
whose default split is `valid_seen`, works unchanged.

Prices: WebShop draws one price per product; here a product has a base price and its
`priced` option group (e.g. size) may add to it, so the price shown after selecting
options can differ from the result-page price (the paper's "price after variant
selection" check). The budget is the first or second multiple of $10 above the target
variant's price (WebShop: the 2nd-4th), so the budget actually rules out products.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import string
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evoharness_rl.envs.webshop.vocab import CATEGORIES, CATEGORY_OF_TYPE, PRODUCT_TYPES, ProductType, attribute_pool
from evoharness_rl.fileio import atomic_replace_dir, atomic_write_json

GENERATOR_VERSION = 1  # bump when generated data changes; old folders are then ignored
PRICE_STEPS = [10.0 * i for i in range(1, 200)]  # budgets are multiples of $10 (WebShop's PRICE_RANGE)
MAX_GOAL_ATTEMPTS = 30  # draws per goal before settling for the most specific draw
MAX_SATISFYING = 3  # a goal is redrawn while more products than this meet all its constraints
TEST_ALIASES = ("test", "valid_seen", "valid_unseen")
_ALL_TYPES = tuple(PRODUCT_TYPES.values())
_ACRONYMS = {"spf": "SPF", "usb": "USB", "hdr": "HDR", "gps": "GPS", "led": "LED", "gmo": "GMO", "usda": "USDA",
             "tv": "TV", "dpi": "DPI", "4k": "4K"}
_REVIEWS = ("Exactly as described.", "Good value for the money.", "Arrived quickly and works well.",
            "Would buy again.", "Quality is fine, shipping was slow.", "My second order, still happy.",
            "Not bad, not great.", "Better than I expected.")


# ----------------------------------------------------------------------------- prices


def option_delta(product: dict, group: str, value: str) -> float:
    for option in product["customization_options"].get(group, []):
        if option["value"] == value:
            return option["price"]
    return 0.0


def price_bounds(product: dict, selected: dict[str, str]) -> tuple[float, float]:
    """Lowest and highest price still possible given the options selected so far."""
    low = high = product["base_price"]
    for group, options in product["customization_options"].items():
        if group in selected:
            delta = option_delta(product, group, selected[group])
            low, high = low + delta, high + delta
        else:
            low += min(o["price"] for o in options)
            high += max(o["price"] for o in options)
    return round(low, 2), round(high, 2)


def variant_price(product: dict, selected: dict[str, str]) -> float:
    """The price charged at Buy Now: unselected groups cost their cheapest value."""
    return price_bounds(product, selected)[0]


def price_text(low: float, high: float) -> str:
    return f"${low:.2f}" if low == high else f"${low:.2f} to ${high:.2f}"


# ---------------------------------------------------------------------------- products


def _title_case(phrase: str) -> str:
    return " ".join(_ACRONYMS.get(w, w[:1].upper() + w[1:]) for w in phrase.split())


def _asin(rng: random.Random, used: set[str]) -> str:
    alphabet = string.ascii_uppercase + string.digits
    while True:
        asin = "B0" + "".join(rng.choice(alphabet) for _ in range(8))
        if asin not in used:
            used.add(asin)
            return asin


def _base_price(rng: random.Random, low: float, high: float) -> float:
    value = math.exp(rng.uniform(math.log(low), math.log(high)))
    return round(max(math.floor(value), 1) + rng.choice((0.99, 0.99, 0.49, 0.95, 0.0)), 2)


def _options(rng: random.Random, ptype: ProductType, base: float) -> dict[str, list[dict]]:
    options = {}
    for group, values in ptype.options.items():
        if group == "size" and len(values) > 3:
            start = rng.randrange(0, len(values) - 2)
            offered = list(values[start: rng.randint(start + 2, len(values))])
        else:
            count = rng.randint(min(2, len(values)), min(7, len(values)))
            offered = sorted(rng.sample(values, count), key=values.index)
        step = 0.0
        if group == ptype.priced_group and rng.random() < 0.6:
            step = max(0.5, round(base * rng.uniform(0.05, 0.15) * 2) / 2)
        options[group] = [{"value": v, "price": round(i * step, 2)} for i, v in enumerate(offered)]
    return options


def _texts(rng: random.Random, product: dict, in_title: list[str], lead: list[str]) -> None:
    """Write title, bullet points and description from the product's attributes."""
    ptype = PRODUCT_TYPES[product["product_type"]]
    category = CATEGORY_OF_TYPE[ptype.name]
    product["name"] = " ".join(lead + [_title_case(a) for a in in_title] + [ptype.title])
    bullets = [f"{_title_case(a)} - {rng.choice(category.benefits)}" for a in product["attributes"]]
    bullets.append(rng.choice(category.blurbs))
    rng.shuffle(bullets)
    product["small_description"] = bullets
    product["full_description"] = f"{product['name']}. {rng.choice(category.blurbs)} {rng.choice(category.blurbs)}"


def _finish(rng: random.Random, product: dict, used_asins: set[str]) -> dict:
    """Fresh ASIN, reviews, rating and price label."""
    product["asin"] = _asin(rng, used_asins)
    product["reviews"] = [{"score": rng.randint(2, 5), "body": rng.choice(_REVIEWS)} for _ in range(rng.randint(0, 3))]
    scores = [r["score"] for r in product["reviews"]]
    product["average_rating"] = round(sum(scores) / len(scores), 1) if scores else "N.A."
    product["pricing"] = price_text(*price_bounds(product, {}))
    return product


def _base_product(rng: random.Random, used_asins: set[str]) -> tuple[dict, list[str], list[str]]:
    """-> (product, attributes named in its title, title words before them)."""
    ptype = _ALL_TYPES[rng.randrange(len(_ALL_TYPES))]
    category = CATEGORY_OF_TYPE[ptype.name]
    attributes = rng.sample(attribute_pool(ptype), rng.choice((2, 3, 3, 4, 4, 5)))
    in_title = rng.sample(attributes, rng.choice((0, 1, 1, 2)))
    lead = [rng.choice(category.brands), *ptype.audience]
    if rng.random() < 0.5:
        lead.append(rng.choice(category.fillers))
    base = _base_price(rng, *ptype.price)
    product = {"asin": "", "name": "", "category": category.name, "product_type": ptype.name,
               "product_category": " › ".join(category.root + ptype.breadcrumb), "brand": lead[0],
               "base_price": base, "attributes": sorted(attributes),
               "customization_options": _options(rng, ptype, base)}
    _texts(rng, product, in_title, lead)
    return _finish(rng, product, used_asins), in_title, lead


def _sibling(rng: random.Random, base: dict, in_title: list[str], lead: list[str], used_asins: set[str]) -> dict:
    """A near copy of `base` that differs in one way a shopper must check:
    one attribute not named in the title, the price, the options offered, or the option surcharges."""
    ptype = PRODUCT_TYPES[base["product_type"]]
    product = copy.deepcopy(base)
    change = rng.choice(("attribute", "attribute", "price", "options", "surcharge"))
    hidden = [a for a in base["attributes"] if a not in in_title]
    unused = [a for a in attribute_pool(ptype) if a not in base["attributes"]]
    if change == "attribute" and hidden and unused:
        swapped = [a for a in base["attributes"] if a != rng.choice(hidden)] + [rng.choice(unused)]
        product["attributes"] = sorted(swapped)
    elif change == "options":
        product["customization_options"] = _options(rng, ptype, base["base_price"])
    elif change == "surcharge" and ptype.priced_group:
        step = max(1.0, round(base["base_price"] * rng.uniform(0.2, 0.4)))
        product["customization_options"][ptype.priced_group] = [
            {"value": o["value"], "price": round(i * step, 2)}
            for i, o in enumerate(base["customization_options"][ptype.priced_group])]
    else:
        product["base_price"] = round(math.floor(base["base_price"] * rng.uniform(1.25, 1.7)) + 0.99, 2)
    _texts(rng, product, in_title, lead)
    return _finish(rng, product, used_asins)


def make_family(family: int, seed: int, used_asins: set[str]) -> list[dict]:
    """A base product and 0-3 near copies (the same listing from other sellers, variants)."""
    rng = random.Random(f"webshop:{seed}:family:{family}")
    base, in_title, lead = _base_product(rng, used_asins)
    return [base] + [_sibling(rng, base, in_title, lead, used_asins) for _ in range(rng.choice((0, 1, 1, 2, 2, 3)))]


def make_products(num_products: int, seed: int) -> list[dict]:
    """`num_products` products, family by family (product i is the same for any larger count)."""
    used: set[str] = set()
    products: list[dict] = []
    family = 0
    while len(products) < num_products:
        products += make_family(family, seed, used)
        family += 1
    return products[:num_products]


# ------------------------------------------------------------------------------- goals


def _article(phrase: str) -> str:
    return "an" if phrase[:1] in "aeiou" else "a"


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _noun_phrase(rng: random.Random, ptype: ProductType, attributes: list[str]) -> str:
    style = rng.choice(("prefix", "that", "with", "mixed") if len(attributes) > 1 else ("prefix", "that", "with"))
    if style == "prefix":
        core = f"{_join(attributes)} {ptype.name}"
    elif style == "that":
        core = f"{ptype.name} that {'are' if ptype.plural else 'is'} {_join(attributes)}"
    elif style == "with":
        core = f"{ptype.name} with {_join(attributes)}"
    else:
        core = f"{attributes[0]} {ptype.name} with {_join(attributes[1:])}"
    if ptype.plural:
        return rng.choice(("", "some ")) + core
    return f"{_article(core)} {core}"


def _option_phrase(rng: random.Random, goal_options: dict[str, str]) -> str:
    if not goal_options:
        return ""
    if rng.random() < 0.35:  # WebShop's synthetic-goal wording
        return " with " + ", and ".join(f"{g}: {v}" for g, v in goal_options.items())
    parts = []
    for group, value in goal_options.items():
        if group == "color":
            parts.append(rng.choice((f"in {value}", f"in {value} color", f"in the color {value}")))
        elif group == "size":
            phrasings = (f"in size {value}", f"size {value}")
            if not value[:1].isdigit():
                phrasings += (f"in the {value} size",)
            parts.append(rng.choice(phrasings))
        else:
            parts.append(rng.choice((f"in {value} {group}", f"{group} {value}", f"with {group} {value}")))
    return " " + " and ".join(parts)


def _price_phrase(rng: random.Random, ceiling: float) -> str:
    return rng.choice((
        f", and price lower than {ceiling:.2f} dollars",
        f", and price lower than {ceiling:.2f} dollars",
        f" under {ceiling:.0f} dollars",
        f", priced under ${ceiling:.2f}",
        f" for less than {ceiling:.2f} dollars",
        f", and my budget is {ceiling:.0f} dollars",
        f" that costs no more than {ceiling:.0f} dollars",
    ))


def instruction_text(rng: random.Random, ptype: ProductType, attributes: list[str], goal_options: dict[str, str],
                     ceiling: float) -> str:
    opener = rng.choice(("i need", "i'm looking for", "i want", "find me", "i would like", "can you find me",
                         "i am shopping for", "show me", "get me", "i'd like to buy", "help me find", "look for"))
    noun = _noun_phrase(rng, ptype, attributes)
    return f"{opener} {noun}{_option_phrase(rng, goal_options)}{_price_phrase(rng, ceiling)}"


@dataclass(frozen=True)
class _Profile:
    """What goal checks need from a product, precomputed once."""

    attributes: frozenset[str]
    options: dict[str, dict[str, float]]  # group -> value -> surcharge
    base_price: float

    @classmethod
    def of(cls, product: dict) -> "_Profile":
        options = {g: {o["value"]: o["price"] for o in opts} for g, opts in product["customization_options"].items()}
        return cls(frozenset(product["attributes"]), options, product["base_price"])

    def misses(self, goal: dict, cap: int = 99) -> int:
        """Constraints of `goal` this product misses at best (one per attribute or option, one for
        the budget); counting stops at `cap`."""
        misses = 0
        for attribute in goal["attributes"]:
            misses += attribute not in self.attributes
        if misses >= cap:
            return misses
        price = self.base_price
        for group, offered in self.options.items():
            wanted = goal["goal_options"].get(group)
            price += offered[wanted] if wanted in offered else min(offered.values())
        for group, value in goal["goal_options"].items():
            misses += value not in self.options.get(group, ())
        return misses + (round(price, 2) > goal["price_upper"])


def constraint_misses(product: dict, goal: dict) -> int | None:
    """Constraints of `goal` a product misses at best (None: another product type)."""
    if product["product_type"] != goal["product_type"]:
        return None
    return _Profile.of(product).misses(goal)


def _draw_goal(rng: random.Random, products: list[dict]) -> dict:
    target = products[rng.randrange(len(products))]
    ptype = PRODUCT_TYPES[target["product_type"]]
    attributes = rng.sample(target["attributes"], min(len(target["attributes"]), rng.choice((1, 2, 2, 3))))
    rng.shuffle(attributes)
    goal_options = {g: rng.choice(opts)["value"] for g, opts in target["customization_options"].items()}
    price = variant_price(target, goal_options)
    ceiling = rng.choice([p for p in PRICE_STEPS if p > price][:2])
    return {
        "asin": target["asin"],
        "category": target["category"],
        "product_type": target["product_type"],
        "product_category": target["product_category"],
        "name": target["name"],
        "instruction_text": instruction_text(rng, ptype, attributes, goal_options, ceiling),
        "attributes": attributes,
        "goal_options": goal_options,
        "price_upper": ceiling,
    }


def _specificity(goal: dict) -> tuple[bool, int]:
    return goal["near_misses"] > 0, -goal["satisfying"]


def make_goal(index: int, seed: int, products: list[dict], by_type: dict[str, list[_Profile]]) -> dict:
    """Goal `index`: redrawn until it is specific (few satisfying products) and has a near miss."""
    rng = random.Random(f"webshop:{seed}:goal:{index}")
    best = None
    for _ in range(MAX_GOAL_ATTEMPTS):
        goal = _draw_goal(rng, products)
        misses = [profile.misses(goal, cap=2) for profile in by_type[goal["product_type"]]]
        goal["satisfying"], goal["near_misses"] = misses.count(0), misses.count(1)
        if best is None or _specificity(goal) > _specificity(best):
            best = goal
        if goal["near_misses"] and goal["satisfying"] <= MAX_SATISFYING:
            break
    return best


def make_goals(products: list[dict], num_goals: int, seed: int) -> list[dict]:
    by_type: dict[str, list[_Profile]] = {}
    for product in products:
        by_type.setdefault(product["product_type"], []).append(_Profile.of(product))
    return [make_goal(i, seed, products, by_type) for i in range(num_goals)]


# ------------------------------------------------------------------------ files, splits


def catalogue_dir(env_cfg: Any) -> Path:
    """Where the catalogue of this config lives (env.data_path overrides the generated one)."""
    if env_cfg.data_path:
        return Path(env_cfg.data_path)
    ws = env_cfg.webshop
    name = f"p{ws.num_products}_g{ws.num_goals}_s{ws.generator_seed}_v{GENERATOR_VERSION}"
    return Path(env_cfg.data_dir) / "webshop" / name


def prepare(env_cfg: Any) -> Path:
    """Generate the catalogue and goals of `env_cfg` (cached: returns at once if present)."""
    folder = catalogue_dir(env_cfg)
    if (folder / "meta.json").exists():
        return folder
    if env_cfg.data_path:
        raise FileNotFoundError(
            f"env.data_path={env_cfg.data_path!r} has no meta.json; it must be a folder written by "
            "`evoharness-rl prepare env=webshop` (products.json, goals.json, meta.json), or set env.data_path=null"
        )
    ws = env_cfg.webshop
    if ws.test_goals > ws.num_goals:
        raise ValueError(f"env.webshop.test_goals={ws.test_goals} exceeds env.webshop.num_goals={ws.num_goals}")
    products = make_products(ws.num_products, ws.generator_seed)
    goals = make_goals(products, ws.num_goals, ws.generator_seed)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    atomic_write_json(tmp / "products.json", products, indent=None)
    atomic_write_json(tmp / "goals.json", goals, indent=1)
    meta = {"generator_version": GENERATOR_VERSION, "num_products": ws.num_products, "num_goals": ws.num_goals,
            "seed": ws.generator_seed, "categories": [c.name for c in CATEGORIES]}
    atomic_write_json(tmp / "meta.json", meta)
    if (folder / "meta.json").exists():  # another process finished first: keep its identical copy
        _remove_tree(tmp)
    else:
        atomic_replace_dir(tmp, folder)
    return folder


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


@dataclass
class Catalogue:
    """A loaded catalogue: products, goals and an asin index."""

    path: Path
    products: list[dict]
    goals: list[dict]
    search_index: Any = None  # simulator.SearchIndex, built on first search

    def __post_init__(self) -> None:
        self.by_asin = {p["asin"]: p for p in self.products}


_LOADED: dict[str, Catalogue] = {}


def load_catalogue(folder: str | os.PathLike) -> Catalogue:
    """Read a prepared catalogue folder (once per process)."""
    key = str(Path(folder).resolve())
    if key not in _LOADED:
        folder = Path(folder)
        missing = [n for n in ("products.json", "goals.json") if not (folder / n).exists()]
        if missing:
            raise FileNotFoundError(f"{folder} lacks {', '.join(missing)}; run `evoharness-rl prepare env=webshop`")
        products = json.loads((folder / "products.json").read_text(encoding="utf-8"))
        goals = json.loads((folder / "goals.json").read_text(encoding="utf-8"))
        _LOADED[key] = Catalogue(folder, products, goals)
    return _LOADED[key]


def split_indices(split: str, num_goals: int, test_goals: int) -> range:
    """Goal indices of a split: test (and its aliases valid_seen/valid_unseen) or train."""
    if split in TEST_ALIASES:
        return range(0, min(test_goals, num_goals))
    if split == "train":
        return range(min(test_goals, num_goals), num_goals)
    raise ValueError(f"unknown WebShop split {split!r}; expected train, test (or its aliases valid_seen, valid_unseen)")
