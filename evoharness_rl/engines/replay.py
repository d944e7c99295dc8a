"""`replay` backend: raw responses from a JSON file, for debugging and regression tests.

The file holds a JSON list of strings. Every episode (`GenerationRequest.key`) replays
the list from its start: its n-th turn gets the n-th response. When the list runs out
the response is "" (which the action protocol counts as an invalid action).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from evoharness_rl.engines.base import Completion, GenerationBackend, GenerationRequest, SamplingSettings


def load_responses(path: str | os.PathLike) -> list[str]:
    """The response list of a replay file; ValueError naming the file and the problem if malformed."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"replay file {path} does not exist (policy.path)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"replay file {path} is not valid JSON ({exc}); expected a list of response strings") from exc
    if not isinstance(data, list):
        raise ValueError(f"replay file {path} holds a JSON {type(data).__name__}; expected a list of response strings")
    for i, item in enumerate(data):
        if not isinstance(item, str):
            raise ValueError(f"replay file {path}: entry {i} is a {type(item).__name__}, expected a string")
    return data


class ReplayBackend(GenerationBackend):
    uses_tokens = False
    tokenizer = None

    def __init__(self, path: str | os.PathLike):
        self.responses = load_responses(path)
        self._turn: dict[str, int] = {}  # episode key -> responses served so far

    def generate(self, requests: list[GenerationRequest], sampling: SamplingSettings) -> list[Completion]:
        out = []
        for request in requests:
            turn = self._turn.get(request.key, 0)
            self._turn[request.key] = turn + 1
            out.append(Completion(text=self.responses[turn] if turn < len(self.responses) else ""))
        return out

    def reset(self, key: str) -> None:
        """Replay from the start again for episode `key` (keys are normally unique per episode)."""
        self._turn.pop(key, None)
