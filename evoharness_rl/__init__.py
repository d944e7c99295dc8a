"""EvoHarness-RL: train LLM agents that learn when to use a Belief/Progress/Experience harness."""

__version__ = "0.1.0"
