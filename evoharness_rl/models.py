"""Local models: tiny Qwen3-architecture checkpoints built here, and loaders for any HF checkpoint.

`init_model(size, out_dir)` makes a checkpoint with no download:

1. a byte-level BPE tokenizer trained with `tokenizers` on text the repo generates (the
   registered environments' prompts and synthetic turns, `EnvEntry.tokenizer_turn`, plus
   the paper's Appendix L prompts of environments not registered yet);
2. wrapped as a `PreTrainedTokenizerFast` with ChatML special tokens and a Qwen-style chat
   template whose assistant content sits inside `{% generation %}` markers (TRL's
   assistant-only loss reads them through `return_assistant_tokens_mask`);
3. a randomly initialised `Qwen3ForCausalLM` sized ~1M / ~10M / ~50M parameters;
4. saved as a normal HF checkpoint directory (atomic: written aside, then renamed).

Real runs point `model.path` at any HF checkpoint (e.g. Qwen3-8B); `load_model` /
`load_tokenizer` serve both.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from evoharness_rl.envs import env_names, env_part
from evoharness_rl.errors import Refusal, UserError
from evoharness_rl.fileio import atomic_replace_dir

SIZES: dict[str, dict[str, int]] = {  # Qwen3Config shapes; parameter counts include the tied embedding
    "tiny": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32),  # ~0.9M
    "mini": dict(hidden_size=192, intermediate_size=512, num_hidden_layers=4, num_attention_heads=6,
                 num_key_value_heads=2, head_dim=32),  # ~2.3M (the `make demo` policy)
    "small": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=12, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64),  # ~10M
    "base": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=16, num_attention_heads=8,
                 num_key_value_heads=4, head_dim=64),  # ~52M
}
# Published Qwen3 config.json shapes, for speed and memory checks with random weights (scripts/gpu_check.py):
# throughput and memory do not depend on the values, so no download is needed.
QWEN3_SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
}
VOCAB_SIZE = 4096  # modest so that prompts stay short in tokens and the embedding stays small
MAX_POSITIONS = 8192  # enough for a per-turn prompt plus its response
BOS, IM_START, IM_END, PAD = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"
SPECIAL_TOKENS = (BOS, IM_START, IM_END, PAD)

# ChatML as Qwen writes it. The assistant's content *and* its <|im_end|> are inside the
# generation block, so the end-of-turn token is trained; the prompt rendered with
# add_generation_prompt is a token prefix of the full conversation (the special token and
# the newline after "assistant" are pre-token boundaries).
def chatml_template(system_head: str = "") -> str:
    """ChatML with `{% generation %}` around each assistant message and its end-of-turn token.

    `system_head`: Jinja rendered at the start of each message (a real model's default system
    message goes there; see gguf_import.training_template).
    """
    return (
        "{%- for message in messages %}" + system_head +
        "{%- if message['role'] == 'assistant' %}"
        "{{- '<|im_start|>assistant\\n' }}"
        "{%- generation %}{{- message['content'] + '<|im_end|>' }}{%- endgeneration %}"
        "{{- '\\n' }}"
        "{%- else %}"
        "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
        "{%- endif %}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )


CHAT_TEMPLATE = chatml_template()


# ------------------------------------------------------------------------ building


def init_model(size: str, out_dir: str | os.PathLike, seed: int = 0) -> Path:
    """Train a tokenizer, build a `size` Qwen3 model, save both to `out_dir`; returns the path."""
    if size not in SIZES:
        raise ValueError(f"size={size!r} is not valid; allowed values: {', '.join(SIZES)}")
    tokenizer = build_tokenizer(training_corpus(seed), VOCAB_SIZE)
    return save_checkpoint(build_model(size, tokenizer, seed), tokenizer, out_dir)


def save_checkpoint(model: Any, tokenizer: Any, out_dir: str | os.PathLike,
                    before_publish: Optional[Callable[[Path], None]] = None) -> Path:
    """Save `model` and `tokenizer` as one HF checkpoint directory, atomically (written aside, renamed).

    `before_publish(staging_dir)` runs on the written files before the rename: it may add files
    or raise, and then nothing reaches `out_dir`.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if before_publish is not None:
            before_publish(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; a checkpoint is an ordinary directory
        atomic_replace_dir(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def build_tokenizer(corpus: Iterable[str], vocab_size: int = VOCAB_SIZE):
    """A byte-level BPE `PreTrainedTokenizerFast` with ChatML special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte is encodable: no unknown tokens
        show_progress=False,
    )
    core.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=IM_END,  # as in Qwen3 chat checkpoints: generation ends at the end of the turn
        pad_token=PAD,
        additional_special_tokens=[IM_START],
        chat_template=CHAT_TEMPLATE,
        model_max_length=MAX_POSITIONS,
        padding_side="left",  # generation batches pad on the left; the SFT collator pads on its own
    )


def build_model(size: str, tokenizer, seed: int = 0):
    """A randomly initialised Qwen3ForCausalLM of the given size (deterministic for a seed)."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
        **SIZES[size],
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return model


def count_parameters(model) -> int:
    """Distinct parameters (a tied embedding counts once)."""
    return sum(p.numel() for p in model.parameters())


# -------------------------------------------------------------------------- corpus


def training_corpus(seed: int = 0, episodes: int = 400) -> list[str]:
    """Tokenizer training text: env prompts with synthetic observations, actions and responses.

    Turns alternate over the registered environments whose tokenizer text has them
    (`EnvEntry.tokenizer_text`); every such environment's system prompts are added on their own.
    An environment without tokenizer text adds nothing, so registering one leaves the tokenizer
    (and every model `init-model` builds) as it was."""
    rng = random.Random(seed)
    sources = _tokenizer_texts()
    turns = [source for source in sources.values() if source.turn is not None]
    texts = []
    for i in range(episodes):
        source = turns[i % len(turns)]
        objective, observation, actions, responses = source.turn(rng)
        user = source.turn_template.format(objective=objective, observation=observation, actions=", ".join(actions),
                                           history="(none)", harness_views="")
        # Role names as the chat template writes them; special tokens stay out (they are never merged).
        texts += [f"system\n{source.system_prompt}", f"user\n{user}"] + [f"assistant\n{r}" for r in responses]
    for source in sources.values():
        texts += [f"system\n{text}" for text in source.system_prompts] * max(1, episodes // 20)
    return texts


def env_prompt_texts() -> dict[str, tuple[str, str]]:
    """{env: (system prompt, per-turn template)} of the environments in the tokenizer text."""
    return {name: (source.system_prompt, source.turn_template) for name, source in _tokenizer_texts().items()}


def _tokenizer_texts() -> dict:
    """{env: TokenizerText} of the registered environments that give tokenizer text."""
    parts = {name: env_part(name, "tokenizer_text") for name in env_names()}
    return {name: part() for name, part in parts.items() if part is not None}


# ------------------------------------------------------------------------- loading


@contextlib.contextmanager
def only_positions(model: Any, positions: Any):
    """During the forward, hand the LM head only the final hidden states at `positions` ([N]) of the flattened
    [R, W] rows (logits [1, N, V]). A hook inside the model's own forward, so DDP/FSDP/DeepSpeed wrappers see a
    normal call; SFT's and GRPO's losses use it to skip the vocabulary projection of positions without a loss."""
    inner = getattr(model, "module", model)  # a DDP/FSDP wrapper's model
    head = inner.get_output_embeddings()
    if head is None:
        raise TypeError(f"{type(inner).__name__} has no output embeddings to restrict")

    def gather(module, args):
        hidden = args[0]  # [R, W, H]
        return (hidden.reshape(-1, hidden.shape[-1])[positions][None],) + tuple(args[1:])

    handle = head.register_forward_pre_hook(gather)
    try:
        yield
    finally:
        handle.remove()


def resolve_device(device: str = "auto") -> str:
    """auto -> cuda when a GPU is visible, else cpu."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda was requested but torch sees no CUDA GPU; use device=cpu or device=auto")
    return device


def resolve_dtype(dtype: str, device: str):
    """auto -> bfloat16 on GPU, float32 on CPU; otherwise the named torch dtype."""
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


class CheckpointError(Refusal, ValueError):
    """`model.path` is not a usable checkpoint; the message names the path or file and the problem. A job refuses
    to start on it, and leaves its out_dir as it was (`Refusal`)."""


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")  # one of these makes a tokenizer
_MAKE_ONE = "make one with `evoharness-rl init-model size=tiny out=<dir>`, or point model.path at any HF checkpoint directory"


def check_checkpoint(path: Optional[str], weights: bool = True) -> str:
    """`path` if it is a checkpoint directory (or a model in the local Hugging Face cache), else CheckpointError.

    Cheap file checks only (no torch, no network): a tokenizer file, and with `weights` a
    `config.json` that parses and weight files that are complete (safetensors headers
    against file sizes). Nothing is looked up on the hub: `model.path` names a directory."""
    if not path:
        raise CheckpointError(f"model.path is not set; {_MAKE_ONE}")
    folder = Path(path).expanduser()
    if not folder.is_dir():
        if _in_hub_cache(str(path)):
            return str(path)  # transformers loads it from the cache
        what = "a file, not a directory" if folder.exists() else "not a directory"
        raise CheckpointError(f"model.path={str(path)!r} is {what}; {_MAKE_ONE}")
    if not any(folder.iterdir()):
        raise CheckpointError(f"model.path={str(path)!r} is not a checkpoint: it is empty; {_MAKE_ONE}")
    config = None
    if weights or (folder / "config.json").is_file():
        config = _check_config(folder / "config.json")  # a broken config is named before a missing tokenizer
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise CheckpointError(f"model.path={str(path)!r} is not a checkpoint: no {' / '.join(TOKENIZER_FILES)} in "
                              f"it; {_MAKE_ONE}")
    if (folder / "tokenizer.json").is_file():
        _read_json(folder / "tokenizer.json", "the tokenizer")
    if weights:
        _check_weights(folder, config)
    return str(path)


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path} is not valid JSON ({_short(err)}): {what} is damaged; replace the file "
                              "or point model.path at an intact checkpoint") from None


def _short(err: BaseException) -> str:
    return " ".join(str(err).split())[:120]


def _in_hub_cache(repo_id: str) -> bool:
    if repo_id.count("/") != 1 or repo_id.startswith((".", "/", "~")):
        return False
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # not a valid repo id
        return False


def _check_config(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: the checkpoint has no model config; {_MAKE_ONE}")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path} is not valid JSON ({_short(err)}); the checkpoint is damaged") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise CheckpointError(f"{path} has no model_type: it is not a transformers model config")
    if "auto_map" not in config:  # custom modelling code (trust_remote_code) brings its own model_type
        known = _known_model_types()
        if known and config["model_type"] not in known:
            raise CheckpointError(f"{path}: model_type {config['model_type']!r} is not a model this transformers "
                                  "knows; fix config.json's model_type (e.g. qwen3) or upgrade transformers")
    return config


def _known_model_types() -> frozenset[str]:
    """The model types the installed transformers maps to a config class, read from its source (importing
    transformers' auto classes would import torch, seconds before a check that needs none); empty if not found."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    auto = Path(list(spec.submodule_search_locations)[0]) / "models" / "auto"
    found: set[str] = set()
    for name in ("configuration_auto.py", "auto_mappings.py"):  # where the mapping lives differs by version
        try:
            text = (auto / name).read_text(encoding="utf-8")
        except OSError:
            continue
        found |= set(re.findall(r'[("{,]\s*"([\w.-]+)"\s*[,:]\s*"\w+Config"', text))
    return frozenset(found)


def _check_weights(folder: Path, config: Optional[dict] = None) -> None:
    files = sorted(folder.glob("*.safetensors"))
    if not files and not list(folder.glob("pytorch_model*.bin")):
        raise CheckpointError(f"{folder} holds no weights (*.safetensors); the checkpoint is incomplete")
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        data = _read_json(index, "the index of the weight shards")
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index} has no weight_map: the index of the weight shards is damaged")
        missing = sorted(s for s in set(map(str, weight_map.values())) if not (folder / s).is_file())
        if missing:
            raise CheckpointError(f"{index} lists shards that are missing: {', '.join(missing)}")
    shapes: dict[str, list] = {}
    for file in files:
        shapes.update(_check_safetensors(file))
    _check_shapes(folder / "config.json", config or {}, shapes)


def _check_shapes(path: Path, config: dict, shapes: dict[str, list]) -> None:
    """The embedding's shape must be (vocab_size, hidden_size) of config.json (a cheap check that the config
    belongs to the weights)."""
    embedding = next((shape for name, shape in shapes.items() if name.endswith("embed_tokens.weight")), None)
    hidden, vocab = config.get("hidden_size"), config.get("vocab_size")
    if not embedding or len(embedding) != 2:
        return
    if isinstance(hidden, int) and embedding[1] != hidden or isinstance(vocab, int) and embedding[0] != vocab:
        raise CheckpointError(f"{path} does not match the weights: embed_tokens is {embedding[0]} x {embedding[1]}, "
                              f"config.json says vocab_size={vocab}, hidden_size={hidden}; restore the checkpoint's "
                              "own config.json")


def _check_safetensors(path: Path) -> dict[str, list]:
    """A safetensors file is an 8-byte header length, a JSON header, then the tensors' bytes."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if length < 0 or 8 + length > size:
            raise CheckpointError(f"{path} is truncated ({size} bytes; its header alone needs {8 + max(length, 0)})")
        try:
            header = json.loads(f.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise CheckpointError(f"{path} is not a safetensors file (its header is not JSON)") from None
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)]
    needed = 8 + length + max(ends, default=0)
    if size < needed:
        raise CheckpointError(f"{path} is truncated: {size} bytes of the {needed} its header describes")
    return {k: t.get("shape") for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)}


def load_tokenizer(path: Optional[str], trust_remote_code: bool = False):
    """The checkpoint's tokenizer; it must carry a chat template (prompts are chat messages)."""
    from transformers import AutoTokenizer

    path = check_checkpoint(path, weights=False)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    except Exception as err:  # transformers/tokenizers raise many types for a damaged or foreign tokenizer
        raise CheckpointError(f"the tokenizer at {path} could not be loaded ({type(err).__name__}: {_short(err)}); "
                              "restore its tokenizer files or point model.path at an intact checkpoint") from None
    if not tokenizer.chat_template:
        raise ValueError(f"the tokenizer at {path} has no chat template; policies are prompted with chat messages, so "
                         "use a chat checkpoint or one made by `evoharness-rl init-model`")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(model_cfg: Any, device: str = "auto", dtype: Optional[str] = None):
    """Load `model_cfg.path` as a causal LM on `device`.

    dtype: `dtype` if given, else `model_cfg.dtype`; auto means bf16 on GPU, fp32 on CPU.
    """
    from transformers import AutoModelForCausalLM

    path = check_checkpoint(model_cfg.path)
    device = resolve_device(device)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path,
            dtype=resolve_dtype(dtype or model_cfg.dtype, device),
            attn_implementation=model_cfg.attn_implementation,
            trust_remote_code=model_cfg.trust_remote_code,
            local_files_only=True,
        )
    except (OSError, ValueError, KeyError, RuntimeError, TypeError) as err:  # damaged or mismatched files
        raise CheckpointError(f"the model at {path} could not be loaded ({type(err).__name__}: {_short(err)}); "
                              "restore the checkpoint or point model.path at an intact one") from None
    return model.to(device)
