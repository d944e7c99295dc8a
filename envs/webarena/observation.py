"""What the policy sees of the browser: BrowserGym's accessibility tree, cut to a token budget.

    tree = page_tree(page)                 # "[bid] role 'name'" lines (BrowserGym's marking + flattening)
    text, cut = cut_to_budget(tree, 800)   # whole lines, deterministic, with a marker when cut
    render_observation(url, tabs, active, error, text)

The tree comes from BrowserGym (`browsergym.core.observation`: `_pre_extract` gives every
element a `bid` attribute, `extract_merged_axtree` reads Chromium's accessibility tree over
CDP; `browsergym.utils.obs.flatten_axtree_to_str` prints it), with presentation-only nodes
(inline text boxes, list markers, label wrappers, paragraphs, lists, landmarks, empty text) and link URLs left out to
save tokens. The bids are the ids that `click [id]`, `type [id] ...` and `hover [id]`
take.

Tokens are counted without a tokenizer, so the cut is identical for every model: a token
is a run of letters/digits or a single other non-space character (an over-estimate of
BPE tokens for English text). The budget keeps whole lines from the top; when lines are
dropped, one marker line says how many.
"""

from __future__ import annotations

import re
from typing import Any

# Presentation-only roles: the node is not printed, its children are (one level up).
IGNORED_ROLES = ("LineBreak", "InlineTextBox", "ListMarker", "LabelText", "Legend", "paragraph", "listitem", "list",
                 "rowgroup", "banner", "main", "search", "contentinfo", "article", "section", "form")
IGNORED_PROPERTIES = ("editable", "readonly", "level", "settable", "multiline", "invalid", "focusable", "url")
_TOKEN = re.compile(r"\w+|[^\w\s]")
_EMPTY_TEXT = re.compile(r"^\s*StaticText ''\s*$")
CUT_MARKER = "[... {lines} more lines cut: the page is longer than the {budget}-token observation budget ...]"


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def page_tree(page: Any) -> str:
    """The flattened accessibility tree of `page` with BrowserGym's element ids."""
    from browsergym.core.observation import _post_extract, _pre_extract, extract_merged_axtree
    from browsergym.utils.obs import flatten_axtree_to_str

    for attempt in range(3):
        try:
            _pre_extract(page, tags_to_mark="standard_html", lenient=attempt == 2)
            axtree = extract_merged_axtree(page)
            break
        except Exception:  # noqa: BLE001 - a navigation raced the extraction: wait, then retry
            if attempt == 2:
                raise
            page.wait_for_load_state("domcontentloaded")
    try:
        _post_extract(page)
    except Exception:  # noqa: BLE001 - cleanup of temporary attributes only
        pass
    text = flatten_axtree_to_str(axtree, ignored_roles=IGNORED_ROLES, ignored_properties=IGNORED_PROPERTIES)
    return "\n".join(line for line in text.splitlines() if line.strip() and not _EMPTY_TEXT.match(line))


def cut_to_budget(tree: str, budget: int) -> tuple[str, bool]:
    """The first lines of `tree` that fit in `budget` tokens, and whether any were cut."""
    lines = tree.splitlines()
    used, kept = 0, []
    for line in lines:
        cost = count_tokens(line)
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
    if len(kept) == len(lines):
        return tree, False
    kept.append(CUT_MARKER.format(lines=len(lines) - len(kept), budget=budget))
    return "\n".join(kept), True


def render_observation(url: str, tabs: list[str], active: int, error: str, tree: str) -> str:
    """The observation text: URL, open tabs, the last action's error (if any) and the tree."""
    tab_text = " | ".join(f"[{i}] {title or 'New Tab'}{' (current)' if i == active else ''}"
                          for i, title in enumerate(tabs))
    parts = [f"URL: {url}", f"OPEN TABS: {tab_text}"]
    if error:
        parts.append(f"LAST ACTION ERROR: {error}")
    parts.append("ACCESSIBILITY TREE:\n" + tree)
    return "\n".join(parts)
