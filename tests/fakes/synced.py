"""A rollout engine with weights of its own, for the weight-sync check of GRPO (grpo/trainer.py, `check_sync`).

`SeparateEngine` stands in for the offline vLLM engine without starting one: it loads its
own copy of the checkpoint, takes the trainer's LoRA adapter only as a directory
(`update_weights(adapter_dir)`, as vLLM's `add_lora` does), generates with what it was given
last, and scores a completion teacher-forced (`score`, as `VLLMBackend.score`). So if the
trainer never hands it the adapter, it keeps generating and scoring with the old weights.
"""

from __future__ import annotations

from pathlib import Path

import torch

from evoharness_rl.engines.hf import HFBackend


class SeparateEngine(HFBackend):
    def __init__(self, model_path: str, tokenizer, batch_size: int = 16):
        super().__init__(str(model_path), tokenizer, device="cpu", dtype="float32", batch_size=batch_size)
        self.base_path = str(model_path)
        self.served: list[str] = []  # names of the adapter directories loaded, in order

    def update_weights(self, model) -> None:
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        path = Path(model)
        if not (path / "adapter_config.json").is_file():
            raise ValueError(f"SeparateEngine takes LoRA adapter directories only; got {model!r}")
        base = AutoModelForCausalLM.from_pretrained(self.base_path, dtype=torch.float32)
        self.model = PeftModel.from_pretrained(base, str(path)).merge_and_unload().eval()
        self._decoder = None
        self.served.append(path.name)

    @torch.no_grad()
    def score(self, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
        logits = self.model(torch.tensor([list(prompt_ids) + list(completion_ids)])).logits[0].float()
        logp = logits[len(prompt_ids) - 1:-1].log_softmax(-1)
        return logp.gather(-1, torch.tensor(completion_ids)[:, None])[:, 0].tolist()


def use_separate_engine(monkeypatch) -> list[SeparateEngine]:
    """Make GRPO runs in this process roll out with a `SeparateEngine` (returned in the list once built)."""
    from evoharness_rl.grpo import build

    engines: list[SeparateEngine] = []

    def backend(cfg, run):
        engines.append(SeparateEngine(cfg.model.path, run.tokenizer, cfg.policy.batch_size))
        return engines[-1]

    monkeypatch.setattr(build, "_backend", backend)
    return engines
