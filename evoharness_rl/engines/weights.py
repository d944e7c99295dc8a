"""The trainer's weights under their checkpoint names, for syncing into a generation backend."""

from __future__ import annotations

from typing import Any, Iterator, Optional


def is_peft_model(model: Any) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # peft is a dependency, but the check must not require it
        return False
    return isinstance(model, PeftModel)


def named_weights(model: Any) -> Iterator[tuple[str, Any]]:
    """Yield (checkpoint name, tensor) for every parameter of `model`.

    The tensors are the live parameters: copy each one as it comes. A PEFT model yields
    its base weights with the adapters merged in, under the base checkpoint's names, and
    is unmerged again when the iteration ends, which changes the tensors already yielded
    (the renaming follows TRL's `VLLMGeneration._iter_named_params`). Tied weights come
    once. Pass the unwrapped model (`accelerator.unwrap_model`), not a DDP/FSDP wrapper.
    """
    if not is_peft_model(model):
        for name, param in model.named_parameters():
            yield name, param.data
        return
    model.merge_adapter()
    try:
        for name, param in model.named_parameters():
            checkpoint_name = _base_name(model, name)
            if checkpoint_name is not None:
                yield checkpoint_name, param.data
    finally:
        model.unmerge_adapter()


def weight_names(model: Any) -> list[str]:
    """The names `named_weights` yields, without merging anything."""
    if not is_peft_model(model):
        return [name for name, _ in model.named_parameters()]
    return [n for n in (_base_name(model, name) for name, _ in model.named_parameters()) if n is not None]


def _base_name(model: Any, name: str) -> Optional[str]:
    """A PEFT parameter's name in the base checkpoint; None for adapter tensors (merged already)."""
    name = name.removeprefix("base_model.model.").replace(".base_layer", "")
    if model.prefix in name or "original_module" in name:
        return None
    return name.replace("modules_to_save.default.", "")
