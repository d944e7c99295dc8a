"""SFT data: successful teacher trajectories -> next-action conversation examples -> tokenized rows.

An example is one chat conversation exactly as the policy saw it at rollout time:

- `per_turn` context: the turn's prompt (`Turn.messages`: system + user) followed by
  {"role": "assistant", "content": Turn.response}; one example per turn. Turns whose
  action was invalid are skipped (a teacher's mistake is not something to imitate).
- `accumulated` context: the whole conversation (each turn's new messages, then its
  response), one example per trajectory; every assistant turn is trained except the
  invalid ones, which stay in the context but out of the loss (`train_turns`).

Each example also carries env, family, task id, episode key, context, the prompt version
of the env's prompts (`EnvSpec.prompt_version`) and, per assistant turn, the action kind
and harness verb. A dataset records the prompt versions it was built with, and
`load_sft_dataset` rejects one built with other prompts.

Truncation rule (`tokenize_examples`): a conversation longer than `max_length` tokens keeps
its system message (when it takes at most half the budget) and its most recent tokens,
dropping the middle: the rule the rollout engine applies to over-long prompts
(engines/base.py, engines.tokens.truncate_prompt). An assistant message cut by the window is masked out of the loss;
an example whose last trained response does not fit is dropped. Both are counted.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Optional

from evoharness_rl.envs import env_spec
from evoharness_rl.fileio import atomic_replace_dir
from evoharness_rl.rollout.trajectory import Trajectory, read_jsonl
from evoharness_rl.errors import UserError

STATS_FILE = "stats.json"


class SFTDataError(UserError, ValueError):
    """The SFT data cannot be used; the message says what was found and what is needed."""


# ------------------------------------------------------------------- env prompts


def current_prompt_version(env_name: str, env_cfg: Any = None) -> str:
    """The prompt version the current code uses for `env_name` (read from the registry's `EnvSpec`)."""
    spec = env_spec(env_name, env_cfg)
    if spec is None:
        raise SFTDataError(f"no EnvSpec found for env {env_name!r}; its prompt version cannot be checked")
    return spec.versioned(getattr(env_cfg, "prompt_style", "paper"))


# -------------------------------------------------------------- trajectories in


def read_collection(path: str | os.PathLike) -> list[Trajectory]:
    """Trajectory records from a `collect` run: a JSONL file, or every *.jsonl file in a directory."""
    path = Path(path)
    if path.is_file():
        return read_jsonl(path)
    if not path.is_dir():
        raise SFTDataError(f"sft data path {str(path)!r} does not exist; "
                           "give a `collect` output directory or a trajectory JSONL file")
    files = sorted(p for p in path.rglob("*.jsonl") if p.name != "metrics.jsonl")
    trajectories = []
    for file in files:
        trajectories += _read_trajectories(file)
    return trajectories


def _read_trajectories(file: Path) -> list[Trajectory]:
    with open(file, encoding="utf-8") as fh:
        first = fh.readline()
    if not first.strip() or "turns" not in json.loads(first):
        return []  # another JSONL file in the run directory (not trajectory records)
    return read_jsonl(file)


def successful(trajectories: list[Trajectory], source: str = "the collection") -> list[Trajectory]:
    """The won, error-free episodes; raises SFTDataError with the counts when there are none."""
    won = [t for t in trajectories if t.won and not t.error and t.turns]
    if not won:
        raise SFTDataError(
            f"{source}: {len(trajectories)} episodes collected, {len(won)} succeeded; SFT trains on successful "
            "episodes only. Collect more (more tasks, `episodes_per_task`, a stronger teacher) and check the "
            "collection summary."
        )
    return won


# ------------------------------------------------------------------ examples


def build_examples(
    trajectories: Iterable[Trajectory], prompt_version: str | dict[str, str], context: Optional[str] = None,
    unique: bool = True,
) -> list[dict]:
    """Flatten successful trajectories into (deduplicated) next-action conversation examples.

    `unique=False` (`sft.dedup=false`) keeps repeated examples, so the data shows each response
    as often as the teacher gave it.
    `prompt_version`: the current `EnvSpec.prompt_version` (or {env: version} for several
    envs); a trajectory recorded with another version is rejected, naming both.
    `context`: expected context style; a trajectory recorded with another one is an error
    (per-turn prompts cannot be turned into one conversation after the fact).
    """
    examples = []
    for traj in trajectories:
        if not traj.won or traj.error:
            continue
        if context is not None and traj.context != context:
            raise SFTDataError(f"trajectory {traj.task_id} was recorded with context={traj.context!r}, "
                               f"but context={context!r} was requested")
        version = str(prompt_version[traj.env] if isinstance(prompt_version, dict) else prompt_version)
        if traj.prompt_version and traj.prompt_version != version:
            raise SFTDataError(_version_mismatch(f"trajectory {traj.task_id}", traj.env, traj.prompt_version, version))
        if traj.context == "accumulated":
            examples += _accumulated_example(traj, version)
        else:
            examples += _per_turn_examples(traj, version)
    return dedup(examples) if unique else examples


def _base(traj: Trajectory, version: str) -> dict:
    return {"env": traj.env, "family": traj.family, "task_id": traj.task_id,
            "episode": f"{traj.task_id}#{traj.seed}", "context": traj.context, "prompt_version": str(version)}


def _per_turn_examples(traj: Trajectory, version: str) -> list[dict]:
    out = []
    for turn in traj.turns:
        if turn.action_kind == "invalid":
            continue
        messages = [_message(m) for m in turn.messages] + [{"role": "assistant", "content": turn.response}]
        out.append({**_base(traj, version), "messages": messages, "action_kinds": [turn.action_kind],
                    "verbs": [turn.verb or ""], "train_turns": [1]})
    return out


def _accumulated_example(traj: Trajectory, version: str) -> list[dict]:
    conversation: list[dict] = []
    for turn in traj.turns:
        for message in map(_message, turn.messages):
            # The previous response opens the next turn's new messages; it is already in place.
            if message["role"] == "assistant" and conversation and conversation[-1] == message:
                continue
            conversation.append(message)
        conversation.append({"role": "assistant", "content": turn.response})
    kinds = [t.action_kind for t in traj.turns]
    return [{**_base(traj, version), "messages": conversation, "action_kinds": kinds,
             "verbs": [t.verb or "" for t in traj.turns], "train_turns": [int(k != "invalid") for k in kinds]}]


def _message(message: dict) -> dict:
    return {"role": str(message["role"]), "content": str(message["content"])}


def _key(example: dict) -> str:
    payload = json.dumps([example["messages"], example["train_turns"]], ensure_ascii=False)
    return hashlib.sha1(payload.encode("utf-8")).hexdigest()


def dedup(examples: list[dict]) -> list[dict]:
    """Drop examples whose conversation (and trained turns) repeats an earlier one; order kept."""
    seen, out = set(), []
    for example in examples:
        key = _key(example)
        if key not in seen:
            seen.add(key)
            out.append(example)
    return out


def mix(collections: list[tuple[list[dict], float]], seed: int = 0, unique: bool = True) -> list[dict]:
    """Mix several example collections; a weight multiplies its collection's size.

    2.0 repeats every example twice, 0.5 keeps a random half, 1.5 keeps all plus a random
    half again. Examples repeated across collections are kept once (first collection wins), unless
    `unique` is false.
    """
    rng = random.Random(seed)
    seen: set[str] = set()
    out = []
    for examples, weight in collections:
        if weight < 0:
            raise SFTDataError(f"mixing weight {weight} is negative; weights multiply a collection's size (>= 0)")
        kept = [e for e in examples if _key(e) not in seen] if unique else list(examples)
        seen.update(map(_key, kept))
        whole, fraction = int(weight), weight - int(weight)
        out += kept * whole + rng.sample(kept, round(fraction * len(kept)))
    return out


# ------------------------------------------------------------------ dataset on disk


def split_examples(examples: list[dict], validation_fraction: float, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Train/validation split by episode, so turns of one episode never straddle the split."""
    episodes = sorted({e["episode"] for e in examples})
    random.Random(seed).shuffle(episodes)
    n_val = round(validation_fraction * len(episodes))
    if validation_fraction > 0 and n_val == 0:
        n_val = 1
    n_val = min(n_val, len(episodes) - 1)  # training keeps at least one episode
    held_out = set(episodes[:n_val])
    return [e for e in examples if e["episode"] not in held_out], [e for e in examples if e["episode"] in held_out]


def dataset_stats(examples: list[dict], tokenizer: Any = None) -> dict:
    """Counts for the log and stats.json: examples, episodes, action share by kind and verb, tokens."""
    kinds = Counter(k for e in examples for k, t in zip(e["action_kinds"], e["train_turns"]) if t)
    verbs = Counter(v for e in examples for v, t in zip(e["verbs"], e["train_turns"]) if t and v)
    turns = sum(kinds.values())
    stats = {
        "examples": len(examples),
        "episodes": len({e["episode"] for e in examples}),
        "trained_turns": turns,
        "action_kinds": dict(kinds),
        "harness_share_by_verb": {v: round(n / turns, 4) for v, n in sorted(verbs.items())} if turns else {},
        "envs": dict(Counter(e["env"] for e in examples)),
        "prompt_versions": {e["env"]: e["prompt_version"] for e in examples},
        "contexts": sorted({e["context"] for e in examples}),
    }
    if tokenizer is not None:
        lengths = [len(chat_ids(tokenizer, e["messages"])) for e in examples]
        stats["tokens"] = sum(lengths)
        stats["max_tokens"] = max(lengths, default=0)
    return stats


def save_dataset(
    examples: list[dict], out_dir: str | os.PathLike, validation_fraction: float = 0.05, seed: int = 0,
    tokenizer: Any = None,
):
    """Write a `datasets.DatasetDict` (train, and validation unless empty) plus stats.json to `out_dir`, atomically."""
    import datasets

    if not examples:
        raise SFTDataError("no SFT examples to save (every trajectory was filtered out)")
    train, validation = split_examples(examples, validation_fraction, seed)
    splits = {"train": train, "validation": validation}
    # An empty split is left out: datasets cannot load a saved split with zero rows.
    dataset = datasets.DatasetDict({name: _to_dataset(rows) for name, rows in splits.items() if rows})
    stats = {"train": dataset_stats(train, tokenizer), "validation": dataset_stats(validation, tokenizer),
             "prompt_versions": {e["env"]: e["prompt_version"] for e in examples}}
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        dataset.save_to_disk(str(tmp))
        (tmp / STATS_FILE).write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
        atomic_replace_dir(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return datasets.load_from_disk(str(out_dir))


_FEATURES_SPEC = {
    "messages": [{"role": "string", "content": "string"}],
    "env": "string", "family": "string", "task_id": "string", "episode": "string", "context": "string",
    "prompt_version": "string", "action_kinds": ["string"], "verbs": ["string"], "train_turns": ["int32"],
}


def _to_dataset(examples: list[dict]):
    import datasets

    # Explicit features, so an empty split still has the right schema.
    features = datasets.Features({k: _feature(v) for k, v in _FEATURES_SPEC.items()})
    columns = {name: [e[name] for e in examples] for name in features}
    return datasets.Dataset.from_dict(columns, features=features)


def _feature(spec: Any):
    import datasets

    if isinstance(spec, list):
        return datasets.List(_feature(spec[0]))
    if isinstance(spec, dict):
        return {k: _feature(v) for k, v in spec.items()}
    return datasets.Value(spec)


def is_sft_dataset(path: str | os.PathLike) -> bool:
    return (Path(path) / STATS_FILE).is_file() and (Path(path) / "dataset_dict.json").is_file()


def load_sft_dataset(path: str | os.PathLike, expected_prompt_version: str | dict[str, str]):
    """Load a saved SFT dataset; reject it when its prompts were built with another prompt version."""
    import datasets

    if not is_sft_dataset(path):
        raise SFTDataError(f"{path} is not an SFT dataset (expected dataset_dict.json and {STATS_FILE}, "
                           "as written by save_dataset)")
    built = json.loads((Path(path) / STATS_FILE).read_text(encoding="utf-8"))["prompt_versions"]
    for env, version in built.items():
        expected = expected_prompt_version.get(env) if isinstance(expected_prompt_version, dict) \
            else expected_prompt_version
        if expected is not None and str(expected) != str(version):
            raise SFTDataError(_version_mismatch(str(path), env, version, expected))
    return datasets.load_from_disk(str(path))


def _version_mismatch(what: str, env: str, built: str, current: str) -> str:
    return (f"{what}: the {env} prompts were built with prompt version {str(built)!r}, but the current code uses "
            f"prompt version {str(current)!r}; re-run `collect` with the current prompts")


# ------------------------------------------------------------------ tokenization


def chat_ids(tokenizer: Any, messages: list[dict], **kwargs: Any) -> list[int]:
    """Token ids of `messages` rendered with the chat template."""
    return list(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)["input_ids"])


def tokenize_example(tokenizer: Any, example: dict, max_length: int, chat_template: Optional[str] = None) -> dict:
    """-> {"input_ids", "labels", "status"}; status: "ok" | "truncated" | "dropped" (see module docstring).

    Labels are the input ids on trained assistant tokens (the chat template's
    `{% generation %}` spans, which include the end-of-turn token) and -100 elsewhere.
    """
    rendered = tokenizer.apply_chat_template(example["messages"], tokenize=True, return_dict=True,
                                             return_assistant_tokens_mask=True, chat_template=chat_template)
    ids, mask = list(rendered["input_ids"]), list(rendered["assistant_masks"])
    spans = _spans(mask)
    train_turns = list(example.get("train_turns") or [1] * len(spans))
    if len(spans) != len(train_turns):
        raise ValueError(f"the chat template marks {len(spans)} assistant spans but the example has "
                         f"{len(train_turns)} assistant turns; its {{% generation %}} markers must wrap each "
                         "assistant message exactly once")
    spans = [span for span, keep in zip(spans, train_turns) if keep]
    labels = [-100] * len(ids)
    for start, end in spans:
        labels[start:end] = ids[start:end]
    if len(ids) <= max_length:
        return {"input_ids": ids, "labels": labels, "status": "ok"}
    return _truncate(ids, labels, spans, _head_length(tokenizer, example, chat_template, max_length), max_length)


def _spans(mask: list[int]) -> list[tuple[int, int]]:
    spans, start = [], None
    for i, bit in enumerate(mask + [0]):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            spans.append((start, i))
            start = None
    return spans


def _head_length(tokenizer: Any, example: dict, chat_template: Optional[str], max_length: int) -> int:
    from evoharness_rl.engines.tokens import system_head_length  # the rollout engine's `keep_head`

    head = system_head_length(tokenizer, example["messages"], chat_template=chat_template)
    return head if head <= max_length // 2 else 0


def _truncate(ids: list[int], labels: list[int], spans: list[tuple[int, int]], head: int, max_length: int) -> dict:
    cut_from = len(ids) - (max_length - head)  # first kept token of the tail
    if not spans or spans[-1][0] < cut_from:
        return {"input_ids": [], "labels": [], "status": "dropped"}
    tail_labels = labels[cut_from:]
    for start, end in spans:
        if start < cut_from < end:  # a response cut by the window: out of the loss
            for i in range(0, end - cut_from):
                tail_labels[i] = -100
    return {"input_ids": ids[:head] + ids[cut_from:], "labels": [-100] * head + tail_labels, "status": "truncated"}


def tokenize_examples(dataset: Any, tokenizer: Any, max_length: int, chat_template: Optional[str] = None):
    """Tokenize a split (adds input_ids/labels, drops examples that cannot fit) -> (dataset, counts)."""
    tokenized = dataset.map(
        lambda example: tokenize_example(tokenizer, example, max_length, chat_template),
        desc="tokenizing SFT examples",
        keep_in_memory=True,  # never write cache files into the saved dataset directory
    )
    counts = Counter(tokenized["status"]) if len(tokenized) else Counter()
    tokenized = tokenized.filter(lambda example: example["status"] != "dropped", keep_in_memory=True)
    tokenized = tokenized.remove_columns("status")
    return tokenized, {"examples": len(dataset), "truncated": counts.get("truncated", 0),
                       "dropped": counts.get("dropped", 0)}
