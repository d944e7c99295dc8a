"""merge_adapter: merged weights reproduce the adapter-on model; the result is a normal checkpoint."""

from __future__ import annotations

import torch

from evoharness_rl.sft.merge import merge_adapter


def test_merged_logits_match_adapter_logits(tmp_path, tiny_model):
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                                LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
    for name, param in peft_model.named_parameters():
        if "lora_B" in name:  # B starts at zero (a no-op adapter); make it a real change
            param.data.normal_(0, 0.05)
    peft_model.save_pretrained(tmp_path / "adapter")

    merged_dir = merge_adapter(tiny_model, tmp_path / "adapter", tmp_path / "merged")

    ids = torch.randint(0, 3000, (2, 64))
    adapter_on = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), tmp_path / "adapter")
    merged = AutoModelForCausalLM.from_pretrained(merged_dir)
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    with torch.no_grad():
        expected, got, plain = adapter_on.eval()(ids).logits, merged(ids).logits, base(ids).logits
    assert (got - expected).abs().max() < 1e-4
    assert (got - plain).abs().max() > 1e-2  # the adapter really changed the model
    assert not any("lora" in name for name, _ in merged.named_parameters())
    from trl.chat_template_utils import has_generation_markers

    assert has_generation_markers(AutoTokenizer.from_pretrained(merged_dir).chat_template)
    assert not list(tmp_path.glob(".merged.*"))
