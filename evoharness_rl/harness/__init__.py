"""The BPE harness: Belief, Progress and Experience beside the agent.

- `protocol`: parse a model response into an env action, a harness action or invalid.
- `belief`: the per-environment state tracker contract.
- `workspace`: the workspace one episode sees (track/commit/recall/note, views, counters).
"""
