"""`scripted` backend: the environment's expert answers (a teacher with no model cost).

The rollout engine asks each episode's worker for the teacher's next response and puts
it in `GenerationRequest.teacher`; this backend just returns it, so collection, eval and
the rollout benchmark run through exactly the same engine code as a model does.
"""

from __future__ import annotations

from evoharness_rl.engines.base import Completion, GenerationBackend, GenerationRequest, SamplingSettings


class ScriptedBackend(GenerationBackend):
    uses_tokens = False
    needs_teacher = True  # the rollout engine fetches the expert's response for every request
    tokenizer = None

    def generate(self, requests: list[GenerationRequest], sampling: SamplingSettings) -> list[Completion]:
        out = []
        for request in requests:
            if request.teacher is None:
                raise ValueError(
                    f"request {request.key!r} has no teacher; the scripted backend returns the environment "
                    "expert's response, which the rollout engine supplies (backend.needs_teacher)"
                )
            out.append(Completion(text=request.teacher()))
        return out
