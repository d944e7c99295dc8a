"""A recording consolidator model: answers consolidation prompts from a list or a function, keeps every prompt."""

from __future__ import annotations

import json


class Scripted:
    """A `generate_text` callable answering from a list (or by prompt, through a function), recording prompts.

    An answer that is an exception is raised; a dict or list is sent as JSON after a line of reasoning.
    """

    def __init__(self, answers):
        self.answers, self.prompts = answers, []

    def __call__(self, messages):
        self.prompts.append(messages[-1]["content"])
        answer = self.answers.pop(0) if isinstance(self.answers, list) else self.answers(messages[-1]["content"])
        if isinstance(answer, Exception):
            raise answer
        return answer if isinstance(answer, str) else "Reasoning first.\n" + json.dumps(answer)
