"""Belief of the diagnostic tasks: what the agent has seen, read back from the observations.

- memory: the code on the note (`track [code]` returns it; always_on renders it every turn);
- progress: the panel's switches and those seen turned on; never returned by `track` (the progress
  task is about Progress, so Belief must not stand in for `commit`), but inferred for always_on's
  PROGRESS view (`auto_progress`: each switch, done or not), as ALFWorld's tracker infers subgoals;
- experience: nothing (the opening door is never observed before it opens).
"""

from __future__ import annotations

import re
from typing import Any

from evoharness_rl.harness.belief import Belief

_CODE = re.compile(r"shows the code (\w+)")
_ON = re.compile(r"Switch (\w+) is now on")  # progress
_PANEL = re.compile(r"A panel with switches ([\w, ]+)\.")


class DiagnosticsBelief(Belief):
    def reset(self, task: Any, first: Any) -> None:
        self.code = ""
        self.switches: list[str] = []
        self.on: list[str] = []
        self.update("", first)

    def update(self, action: str, result: Any) -> None:
        text = result.observation
        if match := _CODE.search(text):
            self.code = match.group(1)
        if not self.switches and (match := _PANEL.search(text)):
            self.switches = match.group(1).split(", ")
        if (match := _ON.search(text)) and match.group(1) not in self.on:
            self.on.append(match.group(1))

    def track(self, query: str) -> str:
        if self.code:
            return f"The note showed the code {self.code}."
        return f"Nothing observed about '{query}'."

    def render(self) -> str:
        return f"code on the note: {self.code}" if self.code else "(nothing tracked)"

    def auto_progress(self) -> list[tuple[str, bool]]:
        return [(f"turn on {switch}", switch in self.on) for switch in self.switches]
