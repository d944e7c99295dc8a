"""Reading WebShop pages and instructions: only what a shopper can see.

`parse_page(observation, actions)` turns one observation (visible text joined with
" [SEP] ", instruction header removed) plus its available actions into a `Page`.
`parse_request(instruction)` reads the constraints of an instruction: product type,
attributes and option values found in the store vocabulary (vocab.py), the price
ceiling from phrases such as "price lower than 40.00 dollars", and the remaining words
as keywords. Instructions from a real WebShop checkout are read the same way; words
outside our vocabulary end up in `keywords`.

Both are used by the Belief tracker and the scripted shopper; neither sees the goal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from evoharness_rl.envs.webshop.vocab import PRODUCT_TYPES, ProductType, attribute_pool

SEP = "[SEP]"
_ASIN = re.compile(r"^[A-Z0-9]{10}$")
_RESULTS_HEADER = re.compile(r"^Page (\d+) \((?:Total results: (\d+)|\d+-\d+\) of (\d+) total results)")
_MONEY = re.compile(r"\$\s*(\d[\d,]*(?:\.\d+)?)")
_CEILING = re.compile(
    r"(?:,?\s*and)?\s*,?\s*(?:price lower than|priced under|lower than|less than|under|below|no more than|cheaper than|"
    r"(?:my )?budget is|budget of|up to)\s*\$?\s*(\d[\d,]*(?:\.\d+)?)\s*(?:dollars|usd|\$)?",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z0-9][a-z0-9'\-.]*")
_FILLER = frozenset(
    "i i'm im am need want looking for find me would like can you get show some a an the and that is are with in of "
    "to buy help look shopping search size color flavor scent model it please my price dollars priced costs cost no "
    "more than i'd which".split()
)


def money_range(text: str) -> Optional[tuple[float, float]]:
    """'$12.99 to $15.99' -> (12.99, 15.99); '$8' -> (8.0, 8.0); no amount -> None."""
    amounts = [float(a.replace(",", "")) for a in _MONEY.findall(text)]
    if not amounts:
        return None
    return min(amounts), max(amounts)


def split_segments(observation: str) -> list[str]:
    return [s.strip() for s in observation.split(SEP) if s.strip()]


def clickables_of(actions: list[str]) -> list[str]:
    return [a[len("click["):-1] for a in actions if a.startswith("click[") and a.endswith("]")]


# ----------------------------------------------------------------------------- pages


@dataclass
class Result:
    asin: str
    title: str
    price: Optional[tuple[float, float]]
    price_text: str


@dataclass
class Page:
    """One page as a shopper reads it."""

    kind: str  # search | results | item | sub | done | unknown
    segments: list[str] = field(default_factory=list)
    clickables: list[str] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)  # results page
    page_no: int = 0  # results page number
    total: int = 0  # results: total hits
    title: str = ""  # item page
    price: Optional[tuple[float, float]] = None  # item page: price (range until options are chosen)
    price_text: str = ""
    options: dict[str, list[str]] = field(default_factory=dict)  # item page: group -> values
    body: list[str] = field(default_factory=list)  # sub page text
    score: Optional[float] = None  # done page: the score shown

    def can_click(self, button: str) -> bool:
        return button.lower() in self.clickables


def parse_page(observation: str, actions: list[str]) -> Page:
    segments = split_segments(observation)
    clickables = clickables_of(actions)
    page = Page(kind="unknown", segments=segments, clickables=clickables)
    if any(a.startswith("search[") for a in actions):
        page.kind = "search"
    elif segments and segments[0].startswith("Thank you for shopping"):
        page.kind = "done"
        page.score = _last_number(segments)
    elif "buy now" in clickables:
        _read_item(page)
    elif any(_RESULTS_HEADER.match(s) for s in segments):
        _read_results(page)
    elif "< prev" in clickables:
        page.kind = "sub"
        page.body = segments[segments.index("< Prev") + 1:] if "< Prev" in segments else segments
    return page


def _last_number(segments: list[str]) -> Optional[float]:
    try:
        return float(segments[-1])
    except (ValueError, IndexError):
        return None


def _read_results(page: Page) -> None:
    page.kind = "results"
    segs, clickable = page.segments, set(page.clickables)
    for i, seg in enumerate(segs):
        header = _RESULTS_HEADER.match(seg)
        if header:
            page.page_no = int(header.group(1))
            page.total = int(header.group(2) or header.group(3))
        elif _ASIN.match(seg) and seg.lower() in clickable and i + 1 < len(segs):
            price_text = segs[i + 2] if i + 2 < len(segs) and money_range(segs[i + 2]) else ""
            page.results.append(Result(seg, segs[i + 1], money_range(price_text) if price_text else None, price_text))


def _read_item(page: Page) -> None:
    """Item page: option groups (a non-clickable label followed by clickable values), title, price."""
    page.kind = "item"
    segs, clickable = page.segments, set(page.clickables)
    start = segs.index("< Prev") + 1 if "< Prev" in segs else 0
    group = None
    for i in range(start, len(segs)):
        seg = segs[i]
        if seg.startswith("Price:"):
            page.price_text = seg[len("Price:"):].strip()
            page.price = money_range(page.price_text)
            page.title = segs[i - 1] if i > start else ""
            break
        nxt = segs[i + 1] if i + 1 < len(segs) else ""
        if seg.lower() not in clickable and nxt.lower() in clickable and not nxt.startswith("Price:"):
            group = seg.lower()
            page.options[group] = []
        elif group is not None and seg.lower() in clickable:
            page.options[group].append(seg.lower())
        else:
            group = None


# --------------------------------------------------------------------------- requests


@dataclass
class Request:
    """The constraints of an instruction."""

    text: str
    product_type: str = ""  # "" when the type is not in the store vocabulary
    attributes: list[str] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)  # group -> value
    price_upper: Optional[float] = None
    keywords: list[str] = field(default_factory=list)  # words outside the vocabulary

    def type_words(self) -> list[str]:
        return re.findall(r"[a-z0-9]+", self.product_type) if self.product_type else []

    def search_query(self) -> str:
        """A query naming what is wanted: attributes, type, option values, leftover keywords."""
        parts = list(self.attributes) + ([self.product_type] if self.product_type else self.keywords)
        parts += [v for g, v in self.options.items() if g != "size"]
        return " ".join(parts)


def _find(phrase: str, text: str) -> Optional[re.Match]:
    return re.search(rf"(?<![a-z0-9]){re.escape(phrase)}(?![a-z0-9])", text)


def _cut(text: str, match: re.Match) -> str:
    return text[: match.start()] + " ; " + text[match.end():]


def _take_options(text: str, ptype: Optional[ProductType]) -> tuple[dict[str, str], str]:
    """Option values named in the text (longest first), assigned to their group.

    For an unknown product type only explicit forms count ("size: large", "color navy",
    "navy color"): a bare word such as "natural" is too often something else."""
    groups: dict[str, set[str]] = {}
    for t in [ptype] if ptype else PRODUCT_TYPES.values():
        for group, values in t.options.items():
            groups.setdefault(group, set()).update(values)
    found: dict[str, str] = {}
    for group, value in sorted(((g, v) for g, vs in groups.items() for v in vs), key=lambda gv: (-len(gv[1]), gv)):
        if group in found:
            continue
        patterns = (f"{group}: {value}", f"{group} {value}", f"{value} {group}") + ((value,) if ptype else ())
        for pattern in patterns:
            match = _find(pattern, text)
            if match:
                found[group] = value
                text = _cut(text, match)
                break
    ordered = {g: found[g] for g in groups if g in found}
    return ordered, text


def parse_request(instruction: str) -> Request:
    """Read an instruction's constraints (see module docstring)."""
    text = " ".join(instruction.lower().split())
    request = Request(text=instruction)
    ceiling = _CEILING.search(text)
    if ceiling:
        request.price_upper = float(ceiling.group(1).replace(",", ""))
        text = _cut(text, ceiling)
    ptype = None
    for name in sorted(PRODUCT_TYPES, key=len, reverse=True):
        match = _find(name, text)
        if match:
            ptype, request.product_type, text = PRODUCT_TYPES[name], name, _cut(text, match)
            break
    request.options, text = _take_options(text, ptype)
    pool = attribute_pool(ptype) if ptype else sorted({a for t in PRODUCT_TYPES.values() for a in attribute_pool(t)})
    for attribute in sorted(pool, key=len, reverse=True):
        match = _find(attribute, text)
        if match:
            request.attributes.append(attribute)
            text = _cut(text, match)
    request.attributes.sort(key=lambda a: instruction.lower().find(a))
    request.keywords = [w for w in _WORD.findall(text) if w not in _FILLER and len(w) > 1]
    return request
