"""Belief: the episode's world state, built only from what the agent has seen.

Each environment grounds Belief in its own terms (ALFWorld: objects, receptacles,
inventory; WebShop: constraints, candidates, options; WebArena: pages, values) by
subclassing `Belief`. The harness never looks inside: it calls `update` after every
environment action, `track` for the `track [query]` verb (a read-only slice), and
`render` for the compact view shown every turn in `always_on` mode.

The environments import this module (their trackers subclass `Belief`), so it imports
nothing from them: `task` is an `envs.base.Task`, `first` and `result` are
`envs.base.StepResult`s.
"""

from __future__ import annotations

import abc
from typing import Any


class Belief(abc.ABC):
    """Episode-local state tracker; one instance per episode."""

    @abc.abstractmethod
    def reset(self, task: Any, first: Any) -> None:
        """Start a new episode from the task and the first observation."""

    @abc.abstractmethod
    def update(self, action: str, result: Any) -> None:
        """Fold in one environment action and what the env answered."""

    @abc.abstractmethod
    def track(self, query: str) -> str:
        """Answer `track [query]`: a read-only slice of the state (never changes it)."""

    @abc.abstractmethod
    def render(self) -> str:
        """A compact view of the whole state (always_on mode)."""

    def auto_progress(self) -> list[tuple[str, bool]]:
        """Subgoals (text, done) inferred from observed outcomes, for always_on mode.

        Adapters that can infer progress override this; the default is no inference.
        """
        return []
