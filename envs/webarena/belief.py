"""WebArena Belief: application state built from the agent-visible observations only.

It reads what the policy reads (the URL, the open tabs, the last action error and the
accessibility tree of each observation) and the actions taken; never the DOM, the site's
database or the task's answer. It keeps:

- the current page and the navigation trail (title and URL of every page opened);
- the active controls of the current page (text boxes with their values, checked radio
  buttons and check boxes);
- the text of every page seen, and in it the lines that carry numbers ("values");
- the last action error.

    track [visited]     the navigation trail
    track [values]      lines with numbers seen on earlier pages (and the current one), by page
    track [objective]   lines seen so far that share words with the objective
    track [anything]    literal match of the argument against the text seen so far
    render()            the compact view (always_on mode)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from evoharness_rl.harness.belief import Belief

if TYPE_CHECKING:  # pragma: no cover
    from evoharness_rl.envs.base import StepResult, Task

_LINE = re.compile(r"^\s*(?:\[(?P<bid>\w+)\]\s+)?(?P<role>[A-Za-z]+)\s+'(?P<name>(?:[^'\\]|\\.)*)'(?P<rest>.*)$")
_VALUE = re.compile(r"value='((?:[^'\\]|\\.)*)'")
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the of in on to for is are was what how many much does do did has have who which with and or "
                  "that this it at by from be as use using answer there stop page".split())
MAX_TRAIL = 8  # pages shown in the rendered trail
MAX_VALUES = 10  # value lines shown by render / track [values]
MAX_HITS = 8


@dataclass
class PageSeen:
    url: str
    title: str
    lines: list[str] = field(default_factory=list)  # the names of its tree nodes, in order


def parse_observation(text: str) -> tuple[str, str, str, list[tuple[str, str, str, str]]]:
    """(url, current tab title, last action error, [(bid, role, name, rest)]) of an observation."""
    url = title = error = ""
    nodes = []
    in_tree = False
    for line in text.splitlines():
        if in_tree:
            match = _LINE.match(line)
            if match:
                nodes.append((match.group("bid") or "", match.group("role"), match.group("name"), match.group("rest")))
        elif line.startswith("URL: "):
            url = line[5:].strip()
        elif line.startswith("OPEN TABS: "):
            current = [t for t in re.split(r" \| (?=\[\d+\] )", line[11:]) if t.endswith("(current)")]
            if current:
                title = re.sub(r"^\[\d+\]\s*", "", current[0][: -len("(current)")]).strip()
        elif line.startswith("LAST ACTION ERROR: "):
            error = line[19:].strip()
        elif line.startswith("ACCESSIBILITY TREE:"):
            in_tree = True
    return url, title, error, nodes


class WebArenaBelief(Belief):
    """Episode-local browsing state (see module docstring)."""

    def __init__(self) -> None:
        self.objective = ""
        self.pages: list[PageSeen] = []
        self.controls: list[str] = []
        self.error = ""
        self.answer: Optional[str] = None

    # -- Belief interface ----------------------------------------------------------------

    def reset(self, task: "Task", first: "StepResult") -> None:
        self.__init__()
        self.objective = task.objective
        self._fold(first.observation)

    def update(self, action: str, result: "StepResult") -> None:
        if result.done and action.strip().lower().startswith("stop"):
            self.answer = action.strip()[4:].strip().strip("[]")
            return
        self._fold(result.observation)

    def track(self, query: str) -> str:
        q = query.strip().lower()
        if not q:
            return self.render()
        if q in ("visited", "pages", "history", "trail", "navigation") or "visited" in q:
            return self.visited_view()
        if q in ("values", "numbers", "value") or "values" in q:
            return self.values_view()
        if "objective" in q or q in ("task", "goal"):
            return self.objective_view()
        return self.literal_view(query.strip())

    def render(self) -> str:
        if not self.pages:
            return "BELIEF: no page seen yet."
        page = self.pages[-1]
        lines = [f"CURRENT PAGE: {page.title or '?'} ({page.url})", "TRAIL: " + self._trail()]
        if self.controls:
            lines.append("ACTIVE CONTROLS: " + "; ".join(self.controls))
        values = self._values(earlier_only=True)
        if values:
            lines.append("VALUES FROM EARLIER PAGES: " + "; ".join(f"[{t}] {v}" for t, v in values[-MAX_VALUES:]))
        if self.error:
            lines.append(f"LAST ERROR: {self.error}")
        return "\n".join(lines)

    # -- folding observations ----------------------------------------------------------------

    def _fold(self, observation: str) -> None:
        url, title, error, nodes = parse_observation(observation)
        self.error = error
        if not url:
            return
        names = [name for _, role, name, _ in nodes if name.strip() and role not in ("RootWebArea",)]
        if self.pages and self.pages[-1].url == url:
            self.pages[-1].lines, self.pages[-1].title = names, title or self.pages[-1].title
        else:
            self.pages.append(PageSeen(url, title, names))
        self.controls = _controls(nodes)

    # -- views -----------------------------------------------------------------------------

    def _trail(self) -> str:
        titles = [p.title or p.url for p in self.pages]
        shown = titles[-MAX_TRAIL:]
        return ("... -> " if len(titles) > MAX_TRAIL else "") + " -> ".join(shown)

    def visited_view(self) -> str:
        if not self.pages:
            return "VISITED: nothing yet."
        return "VISITED:\n" + "\n".join(f"{i}. {p.title or '?'} - {p.url}" for i, p in enumerate(self.pages, 1))

    def _values(self, earlier_only: bool) -> list[tuple[str, str]]:
        pages = self.pages[:-1] if earlier_only else self.pages
        seen, values = set(), []
        for page in pages:
            for line in page.lines:
                if any(ch.isdigit() for ch in line) and (page.title, line) not in seen:
                    seen.add((page.title, line))
                    values.append((page.title or page.url, line))
        return values

    def values_view(self) -> str:
        values = self._values(earlier_only=False)
        if not values:
            return "VALUES: no numbers seen yet."
        current = self.pages[-1].title if self.pages else ""
        ordered = [v for v in values if v[0] != current][-MAX_VALUES:] + [v for v in values if v[0] == current][:4]
        return "VALUES SEEN:\n" + "\n".join(f"- [{t}] {v}" for t, v in ordered)

    def objective_view(self) -> str:
        words = {w for w in _WORD.findall(self.objective.lower()) if w not in _STOP and len(w) > 1}
        hits = []
        for page in self.pages:
            for line in page.lines:
                shared = words & set(_WORD.findall(line.lower()))
                if len(shared) >= min(2, len(words)) and (page.title, line) not in hits:
                    hits.append((page.title or page.url, line))
        if not hits:
            return f"OBJECTIVE: {self.objective}\nNo text related to it seen yet."
        return f"OBJECTIVE: {self.objective}\nRELATED TEXT SEEN:\n" + "\n".join(
            f"- [{t}] {v}" for t, v in hits[-MAX_HITS:])

    def literal_view(self, query: str) -> str:
        needle = query.lower()
        hits = [(p.title or p.url, line) for p in self.pages for line in p.lines if needle in line.lower()]
        if not hits:
            return f"No page seen so far mentions '{query}'. Try track [visited], track [values] or track [objective]."
        return f"SEEN '{query}':\n" + "\n".join(f"- [{t}] {v}" for t, v in hits[-MAX_HITS:])


def _controls(nodes: list[tuple[str, str, str, str]]) -> list[str]:
    controls = []
    for bid, role, name, rest in nodes:
        if role in ("textbox", "searchbox", "combobox"):
            value = _VALUE.search(rest)
            controls.append(f"{name or role} [{bid}] = {value.group(1) if value else '(empty)'}")
        elif role in ("radio", "checkbox") and "checked='true'" in rest:
            controls.append(f"{name} [{bid}] checked")
    return controls
