"""LLM consolidation: the paper's abstraction -> reconciliation pipeline behind one text callable.

    consolidator = LLMConsolidator(generate_text)     # generate_text(messages) -> response text

`generate_text` is any chat endpoint: `openai_generate_text(...)` for an OpenAI-compatible
server (a frontier model, or a vLLM server), or, for self-consolidation, a callable the
trainer builds around the current policy's generation backend.

The model only proposes. Each response is read with `parse_last_json` (reasoning may come
first), each operation is converted and checked, and the bank applies what passes. A stage
whose response holds no usable JSON is recorded as a failure and contributes nothing.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Callable

from evoharness_rl.experience import prompts
from evoharness_rl.experience.bank import ExperienceBank
from evoharness_rl.experience.consolidation import Evidence, Proposal, json_cut_off, one_line, parse_last_json
from evoharness_rl.experience.operations import OPS, TASK_PREFIX, Operation, task_category
from evoharness_rl.engines.openai import ServerUnresponsive

GenerateText = Callable[[list[dict[str, str]]], str]  # may return a `Reply` (a str that also says what it cost)
MAX_CANDIDATES = 12  # candidates kept per kind and stage (a compact set; more is noise)
MAX_OPERATIONS = 64  # operations read per response; the rest are rejected
_KIND_KEYS = {"skills": ("skills", "skill"), "mistakes": ("mistakes", "mistake"),
              "search_priorities": ("search_priorities", "search", "search_priority")}


class Reply(str):
    """A response text with what the endpoint reported about it: prompt and completion tokens, and the
    finish reason ("length": cut off by max_new_tokens). A plain str works as well (tokens then unknown)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    finish_reason: str | None

    def __new__(cls, text: str, prompt_tokens: int | None = None, completion_tokens: int | None = None,
                finish_reason: str | None = None) -> "Reply":
        reply = super().__new__(cls, text)
        reply.prompt_tokens, reply.completion_tokens, reply.finish_reason = prompt_tokens, completion_tokens, finish_reason
        return reply


def generic_search_text(subject: str, ranked: list[str]) -> str:
    return f"{subject}: look first at {ranked[0]}" + (f"; then {', '.join(ranked[1:])}" if ranked[1:] else "")


class LLMConsolidator:
    """Consolidation by a language model (an `openai` endpoint or the policy itself)."""

    def __init__(
        self,
        generate_text: GenerateText,
        agent_description: str = "an agent",
        task_noun: str = "task type",
        fused: bool = False,
        max_field_chars: int = 300,
        max_prompt_chars: int = 24_000,
        name: str = "llm",
        describe_search: Callable[[str, list[str]], str] = generic_search_text,
    ):
        self.generate_text = generate_text
        self.agent_description = agent_description
        self.task_noun = task_noun
        self.fused = fused
        self.max_field_chars = max_field_chars
        self.max_prompt_chars = max_prompt_chars
        self.name = name
        self.describe_search = describe_search

    def propose(self, bank: ExperienceBank, evidence: Evidence) -> Proposal:
        run = _Run(self, bank, evidence)
        run.fused() if self.fused else run.staged()
        run.proposal.episodes_seen = len(run.view.seen)
        run.proposal.warnings += [f"episode E{p + 1} alone is longer than experience.max_prompt_chars="
                                  f"{self.max_prompt_chars}: it was sent whole in its own part" for p in run.view.oversized]
        return run.proposal


class _Run:
    """One batch's calls; collects operations, failures and warnings into `proposal`."""

    def __init__(self, owner: LLMConsolidator, bank: ExperienceBank, evidence: Evidence):
        self.o, self.bank, self.evidence = owner, bank, evidence
        self.view = prompts.EvidenceView(evidence, owner.max_prompt_chars)
        self.proposal = Proposal(episodes_seen=0)
        self.families = set(evidence.families)
        self.known_families = self.families | {e.family for e in bank.entries.values() if e.family}
        self.common = {"agent_description": owner.agent_description, "task_noun": owner.task_noun,
                       "task_label": owner.task_noun.upper(), "max_field_chars": owner.max_field_chars}

    # -- the pipeline ------------------------------------------------------------------

    def staged(self) -> None:
        local = {family: self._task_candidates(family) for family in sorted(self.families)}
        general = self._general_candidates() if len(self.families) >= 2 else {}
        if any(general.values()):
            self._reconcile(None, general)
        for family, candidates in local.items():
            if any(candidates.values()):
                self._reconcile(family, candidates)

    def fused(self) -> None:
        chunks = self.view.chunks(self.view.mixed(list(range(len(self.evidence.episodes)))))
        existing = prompts.render_existing([e for e in self.bank.active() if e.family in ("", *self.families)])
        parts = []
        for k, chunk in enumerate(chunks):
            stage = "fused consolidation" + _part(k, len(chunks))
            user = prompts.FUSED.format(**self.common, **self._evidence_slots(chunk, k, len(chunks)),
                                        task_type_list=", ".join(sorted(self.families)), existing_store=existing)
            parts.append(self._read_operations(self._call(stage, user), stage=None, candidates={}))
        if len(chunks) == 1:
            self.proposal.operations += parts[0]
        elif any(parts):  # the final call reconciles what the parts proposed
            user = prompts.FUSED_MERGE.format(**self.common, episodes=len(self.evidence.episodes), parts=len(chunks),
                                              task_type_list=", ".join(sorted(self.families)), existing_store=existing,
                                              proposals=prompts.render_proposals(parts, self.view))
            self.proposal.operations += self._read_operations(self._call(f"reconciliation of {len(chunks)} parts", user),
                                                              stage=None, candidates={})

    def _task_candidates(self, family: str) -> dict[str, list[dict]]:
        positions = [p for p, _ in self.evidence.of_family(family)]
        return self._abstract(positions, f"task abstraction [{family}]", ("skills", "mistakes", "search_priorities"),
                              lambda slots: prompts.TASK_ABSTRACTION.format(**self.common, **slots, task_type=family))

    def _general_candidates(self) -> dict[str, list[dict]]:
        positions = self.view.mixed(list(range(len(self.evidence.episodes))))
        families = ", ".join(sorted(self.families))
        found = self._abstract(positions, "general abstraction", ("skills", "mistakes"),
                               lambda slots: prompts.GENERAL_ABSTRACTION.format(**self.common, **slots,
                                                                                task_type_list=families))
        for kind, items in found.items():
            kept = []
            for c in items:
                support = sorted(set(c.get("task_types", [])) & self.families)
                if len(support) >= 2:
                    kept.append({**c, "task_types": support})
                else:
                    self.proposal.warnings.append(f"general candidate {c['id']} dropped: supported by {support or 'no'} task types (needs 2)")
            found[kind] = kept
        return found

    def _abstract(self, positions: list[int], stage: str, kinds: tuple[str, ...],
                  prompt: Callable[[dict[str, str]], str]) -> dict[str, list[dict]]:
        """One abstraction call per chunk of `positions`; the chunks' candidates together (ids made unique)."""
        chunks = self.view.chunks(positions)
        merged: dict[str, list[dict]] = {}
        for k, chunk in enumerate(chunks):
            name = stage + _part(k, len(chunks))
            found = self._candidates(self._call(name, prompt(self._evidence_slots(chunk, k, len(chunks)))), name, kinds,
                                     prefix=f"p{k + 1}." if len(chunks) > 1 else "")
            for kind, items in found.items():
                merged.setdefault(kind, []).extend(items)
        return merged

    def _reconcile(self, family: str | None, candidates: dict[str, list[dict]]) -> None:
        if family is None:
            stage, rules, add = "global", prompts.GLOBAL_RULES.format(**self.common), "general|mistakes"
            skills, mistakes = self.bank.active("general"), [e for e in self.bank.active("mistakes") if not e.family]
        else:
            stage = f"local ({family})"
            rules, add = prompts.LOCAL_RULES.format(**self.common, family=family), "task|mistakes"
            skills = self.bank.active(task_category(family))
            mistakes = [e for e in self.bank.active("mistakes") if e.family == family]
        user = prompts.RECONCILIATION.format(
            **self.common, stage=stage, stage_rules=rules, add_categories=add,
            candidate_skills=prompts.render_candidates(candidates.get("skills", [])),
            candidate_mistakes=prompts.render_candidates(candidates.get("mistakes", [])),
            candidate_search_priorities=prompts.render_candidates(candidates.get("search_priorities", [])),
            existing_skills=prompts.render_existing(skills), existing_mistakes=prompts.render_existing(mistakes))
        self.proposal.operations += self._read_operations(self._call(f"reconciliation [{stage}]", user),
                                                          family if family else "", candidates)

    # -- calls and parsing ---------------------------------------------------------------

    def _evidence_slots(self, positions: list[int], part: int = 0, parts: int = 1) -> dict[str, str]:
        note = ""
        if parts > 1:
            note = prompts.PART_NOTE.format(part=part + 1, parts=parts, shown=len(positions),
                                            total=len(self.evidence.episodes))
        return {"batch_part": note, "success_data": self.view.episodes(positions, won=True),
                "failure_data": self.view.episodes(positions, won=False), "notes_text": self.view.notes(positions)}

    def _call(self, stage: str, user: str) -> Any | None:
        return call_json(self.o.generate_text, stage, user, self.proposal)

    def _candidates(self, value: Any, stage: str, kinds: tuple[str, ...], prefix: str = "") -> dict[str, list[dict]]:
        if value is None:
            return {}
        if not isinstance(value, dict) or not any(k in value for kind in kinds for k in _KIND_KEYS[kind]):
            got = f"keys {sorted(value)[:6]}" if isinstance(value, dict) else type(value).__name__
            self.proposal.failures.append(f"{stage}: expected a JSON object with {', '.join(kinds)}, got {got}")
            return {}
        out: dict[str, list[dict]] = {}
        for kind in kinds:
            raw = next((value[k] for k in _KIND_KEYS[kind] if k in value), [])
            items = [c for c in (raw if isinstance(raw, list) else []) if isinstance(c, dict)][:MAX_CANDIDATES]
            out[kind] = [self._clean_candidate(c, f"{kind[0]}{i + 1}", prefix) for i, c in enumerate(items)]
            out[kind] = [c for c in out[kind] if c.get("principle") or c.get("object")]
        return out

    def _clean_candidate(self, raw: dict, default_id: str, prefix: str = "") -> dict:
        """Candidates go into the next prompt, so they are cut to size rather than rejected.
        `prefix` keeps the ids of different chunks apart (p1.s1, p2.s1)."""
        limit = self.o.max_field_chars
        clean: dict[str, Any] = {"id": prefix + one_line(str(raw.get("id") or default_id), 24)}
        for key in ("principle", "trigger", "how_to_avoid", "object"):
            if isinstance(raw.get(key), str) and raw[key].strip():
                clean[key] = one_line(raw[key], limit)
        clean["locations"] = _strings(raw.get("locations"), 5, 40)
        clean["task_types"] = _strings(raw.get("task_types"), 12, 80)
        clean["evidence"] = [label for label in _strings(raw.get("evidence"), 8, 16) if self.view.resolve(label)]
        return clean

    def _read_operations(self, value: Any, stage: str | None, candidates: dict[str, list[dict]]) -> list[Operation]:
        """The operations a reconciliation (or fused) answer proposes. stage: None (fused), "" (global) or a family."""
        if value is None:
            return []
        if isinstance(value, list):
            value = {"operations": value}
        raw_ops = value.get("operations", value.get("ops")) if isinstance(value, dict) else None
        if not isinstance(raw_ops, list):
            got = f"keys {sorted(value)[:6]}" if isinstance(value, dict) else type(value).__name__
            self.proposal.failures.append(f"reconciliation: expected {{\"operations\": [...]}}, got {got}")
            return []
        ops: list[Operation] = []
        by_id = {c["id"]: c for items in candidates.values() for c in items}
        for i, raw in enumerate(raw_ops):
            if i >= MAX_OPERATIONS:
                self.proposal.warnings.append(f"{len(raw_ops) - MAX_OPERATIONS} operations beyond {MAX_OPERATIONS} ignored")
                break
            op, error = self._operation(raw, stage, by_id)
            if op is None:
                self.proposal.rejected.append(f"operation {i}: {error}")
            else:
                ops.append(op)
        searches = value.get("search_priorities", [])
        if stage != "" and isinstance(searches, list):
            for raw in searches[:MAX_CANDIDATES]:
                op = self._search_operation(raw)
                if op is not None:
                    ops.append(op)
        return ops

    def _operation(self, raw: Any, stage: str | None, by_id: dict) -> tuple[Operation | None, str | None]:
        if not isinstance(raw, dict):
            return None, f"expected an object, got {type(raw).__name__}"
        name = str(raw.get("op") or raw.get("operation") or raw.get("action") or "").strip().lower()
        if name not in OPS:
            return None, f"unknown op {name[:30]!r}; expected one of {', '.join(OPS)}"
        texts = {}
        for key in ("principle", "trigger", "how_to_avoid"):
            if key in raw and raw[key] is not None:
                if not isinstance(raw[key], str):
                    return None, f"{name}: field {key} must be a string"
                texts[key] = raw[key].strip()
        candidate = by_id.get(str(raw.get("candidate", "")), {})
        task_types = _strings(raw.get("task_types"), 12, 80) or candidate.get("task_types", [])
        evidence = self._refs(_strings(raw.get("evidence"), 8, 40) or candidate.get("evidence", []))
        common = dict(evidence=tuple(evidence), reason=one_line(str(raw.get("reason") or ""), self.o.max_field_chars))
        if name == "skip":
            return Operation("skip", **common), None
        if name in ("update", "archive"):
            entry_id = raw.get("id")
            if not isinstance(entry_id, str) or not entry_id:
                return None, f"{name} needs the id of an existing entry"
            return Operation(name, id=entry_id.strip(), **(texts if name == "update" else {}), **common), None
        category, family, error = self._add_scope(raw, stage)
        if error:
            return None, error
        subject = raw.get("subject") if isinstance(raw.get("subject"), str) else None
        return Operation("add", category=category, family=family, subject=subject,
                         task_types=tuple(sorted(set(task_types) & self.families)), **texts, **common), None

    def _add_scope(self, raw: dict, stage: str | None) -> tuple[str, str, str | None]:
        """-> (category, family, error) of an add, from its fields and the stage that produced it."""
        category = str(raw.get("category") or "").strip().lower()
        family = raw.get("family") if isinstance(raw.get("family"), str) else ""
        if category.startswith(TASK_PREFIX):
            category, family = "task", category[len(TASK_PREFIX) :]
        if stage == "":
            allowed = {"general": ("general", ""), "skill": ("general", ""), "mistakes": ("mistakes", ""), "mistake": ("mistakes", "")}
        elif stage:
            allowed = {"task": (task_category(stage), stage), "skill": (task_category(stage), stage),
                       "mistakes": ("mistakes", stage), "mistake": ("mistakes", stage)}
        else:
            allowed = {"general": ("general", ""), "task": (task_category(family), family),
                       "mistakes": ("mistakes", family), "mistake": ("mistakes", family)}
        if category not in allowed:
            return "", "", f"add category {category[:40]!r} is not allowed here; expected one of {', '.join(allowed)}"
        category, family = allowed[category]
        if family and family not in self.known_families:
            return "", "", f"add for family {family[:60]!r}, which is neither in this batch nor in the bank"
        return category, family, None

    def _search_operation(self, raw: Any) -> Operation | None:
        if not isinstance(raw, dict):
            return None
        subject = raw.get("object") or raw.get("subject")
        locations = _strings(raw.get("locations"), 5, 40)
        if not isinstance(subject, str) or not subject.strip() or not locations:
            self.proposal.warnings.append(f"search priority without object or locations ignored: {one_line(repr(raw), 80)}")
            return None
        subject = one_line(subject.lower(), 60)
        return Operation("add", category="search", subject=subject, principle=self.o.describe_search(subject, locations),
                         evidence=tuple(self._refs(_strings(raw.get("evidence"), 8, 40))), reason="search priority")

    def _refs(self, labels: list[str]) -> list[str]:
        refs = []
        for label in labels:
            ref = self.view.resolve(label)
            if ref is None:
                self.proposal.warnings.append(f"evidence label {label!r} was not in the prompt; dropped")
            else:
                refs.append(ref)
        return refs


def call_json(generate_text: GenerateText, stage: str, user: str, p: Proposal) -> Any | None:
    """One consolidation call: the JSON value its answer ends with, or None with the reason in `p.failures` (the
    call failed, the answer was cut off, or it holds no JSON). Calls, prompt characters and tokens go into `p`.
    Shared by this pipeline and the memory baselines (expel.py, reasoningbank.py)."""
    p.calls += 1
    p.prompt_chars += len(user)
    try:
        text = generate_text(prompts.messages(user))
    except ServerUnresponsive:  # a server that answers nothing at all: the run ends with its one line
        raise
    except Exception as err:  # the endpoint is down or refused: this stage contributes nothing
        p.failures.append(f"{stage}: the consolidator call failed: {type(err).__name__}: {one_line(str(err), 200)}")
        return None
    if getattr(text, "prompt_tokens", None) is not None:
        p.prompt_tokens += int(text.prompt_tokens)
        p.completion_tokens += int(text.completion_tokens or 0)
        p.token_counted_calls += 1
    if getattr(text, "finish_reason", None) == "length" or (isinstance(text, str) and json_cut_off(text)):
        p.failures.append(f"{stage}: the answer was cut off ({len(text)} chars) before its JSON ended; "
                          "raise experience.max_new_tokens")
        return None
    value = parse_last_json(text)
    if value is None:
        head = one_line(text if isinstance(text, str) else repr(text), 80)
        p.failures.append(f"{stage}: no JSON object in the response ({len(text or '')} chars: {head!r})")
    return value


def _part(k: int, parts: int) -> str:
    return f" part {k + 1}/{parts}" if parts > 1 else ""


def _strings(value: Any, most: int, chars: int) -> list[str]:
    """A list of short strings from whatever the model wrote (a string becomes a one-item list)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return [one_line(v, chars) for v in value if isinstance(v, str) and v.strip()][:most]


def openai_generate_text(
    model: str | None,
    base_url: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    max_tokens: int = 2048,
    max_retries: int = 4,
    timeout_s: float = 300.0,
    temperature: float = 0.0,
) -> GenerateText:
    """A `generate_text` callable over an OpenAI-compatible chat endpoint.

    Retries (connection errors, 408/409/429/5xx, with exponential backoff) are the
    `openai` client's own (`max_retries`). A local server needs no key: any value is sent.
    """
    from openai import OpenAI

    if not model:
        raise ValueError("the openai consolidator needs experience.model_name (the model the endpoint serves)")
    key = os.environ.get(api_key_env)
    if not key and base_url is None:
        raise ValueError(f"the openai consolidator needs ${api_key_env} set, or experience.base_url for a local server")
    from evoharness_rl.engines.openai import Endpoint

    client = OpenAI(base_url=base_url, api_key=key or "EMPTY", max_retries=0, timeout=timeout_s)
    endpoint = Endpoint(client.base_url, timeout_s, max_retries, "experience")  # retries; a hung server: one line

    def generate_text(messages: list[dict[str, str]]) -> str:
        try:
            response = endpoint.call(lambda timeout: client.chat.completions.create(
                model=model, messages=messages, max_tokens=max_tokens, temperature=temperature, timeout=timeout))
        except ServerUnresponsive:
            raise
        except Exception as exc:  # noqa: BLE001 - a server may quote the key or the URL's secrets: say it redacted
            from evoharness_rl.engines.openai import EndpointError, error_completion

            raise EndpointError(error_completion(exc, client.base_url, client.api_key).error) from None
        usage = getattr(response, "usage", None)
        return Reply(response.choices[0].message.content or "", getattr(usage, "prompt_tokens", None),
                     getattr(usage, "completion_tokens", None), response.choices[0].finish_reason)

    return generate_text


def policy_generate_text(engine: Any, max_new_tokens: int, messages: list[dict[str, str]]) -> str:
    """One greedy chat completion from a rollout engine's backend (self-consolidation: eval's online windows and
    GRPO), with its token counts and finish reason (`Reply`)."""
    from evoharness_rl.engines.base import GenerationRequest
    from evoharness_rl.engines.tokens import encode_prompt

    request = GenerationRequest(messages=list(messages))
    if engine.backend.uses_tokens:
        request.prompt_ids = encode_prompt(engine.tokenizer, request.messages)
    sampling = replace(engine.sampling, temperature=0.0, max_new_tokens=max_new_tokens)
    (completion,) = engine.backend.generate([request], sampling)
    if completion.error is not None:
        raise RuntimeError(f"self-consolidation generation failed: {completion.error}")
    tokens = engine.backend.uses_tokens
    return Reply(completion.text, len(request.prompt_ids) if tokens else None,
                 len(completion.completion_ids) if tokens else None, completion.finish_reason)
