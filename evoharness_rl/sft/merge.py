"""Merge a LoRA adapter into its base model and save a full HF checkpoint plus tokenizer.

The result is an ordinary checkpoint directory (config, safetensors, generation config,
tokenizer with chat template) that transformers, vLLM and the GRPO trainer load like any
other. It is written beside `out_dir` and renamed into place (`models.save_checkpoint`),
so a crash never leaves a half-written checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from evoharness_rl.models import save_checkpoint


def merge_adapter(
    base_path: str | os.PathLike,
    adapter_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    tokenizer: Any = None,
    device: str = "cpu",
) -> Path:
    """Fold the adapter at `adapter_path` into the model at `base_path`; save to `out_dir`.

    The base is loaded in its stored dtype (fp32 tiny models stay fp32, a bf16 Qwen3 stays
    bf16). `tokenizer` defaults to the one saved with the adapter, else the base's.
    """
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(str(base_path), dtype="auto").to(device)
    merged = PeftModel.from_pretrained(base, str(adapter_path)).merge_and_unload()
    if tokenizer is None:
        source = adapter_path if (Path(adapter_path) / "tokenizer_config.json").is_file() else base_path
        tokenizer = AutoTokenizer.from_pretrained(str(source))
    return save_checkpoint(merged, tokenizer, out_dir)
