"""Experience evolution: the bank, retrieval, and batched consolidation.

    bank.py           ExperienceBank: categories, stable ids, capacity pruning, provenance, atomic JSON
    retrieval.py      BankSnapshot: frozen per-batch view; recall [query] by BM25 (bm25s)
    operations.py     Add / Update / Archive / Skip and their validation
    consolidation.py  consolidate(bank, trajectories, consolidator) -> ConsolidationReport
    prompts.py        the paper's consolidation prompts (Appendix L.2) + evidence rendering
    llm.py            LLMConsolidator (openai endpoint or the policy itself)
    heuristic.py      HeuristicConsolidator (no LLM; statistics through a Grounding)
    grounding.py      the Grounding protocol environments implement for the heuristic
    evolution.py      make_consolidator, frozen vs online evaluation protocols
    memory.py         the memory baselines' shared store, snapshot, update cycle
    baselines.py      the memory methods' registry (experience.method -> store, update step) and load_bank
    expel.py          ExpeL: insights with votes + pooled successful trajectories
    reasoningbank.py  ReasoningBank: title / description / content memory items
    edit_check.py     experience.validate_edits: the verdict on a cycle (kept or rolled back) from held-out play
    cli.py            `evoharness-rl consolidate` and the bank report
"""

from evoharness_rl.experience.bank import BankFormatError, Entry, ExperienceBank
from evoharness_rl.experience.baselines import load_bank, memory_names, register_memory
from evoharness_rl.experience.consolidation import ConsolidationReport, Evidence, consolidate, parse_last_json
from evoharness_rl.experience.evolution import (
    FrozenEvolution,
    OnlineEvolution,
    make_consolidator,
    make_evolution,
)
from evoharness_rl.experience.heuristic import HeuristicConsolidator
from evoharness_rl.experience.llm import LLMConsolidator, openai_generate_text
from evoharness_rl.experience.operations import Operation, OpLimits
from evoharness_rl.experience.retrieval import BankSnapshot

__all__ = [
    "BankFormatError", "BankSnapshot", "ConsolidationReport", "Entry", "Evidence", "ExperienceBank",
    "FrozenEvolution", "HeuristicConsolidator", "LLMConsolidator", "OnlineEvolution", "OpLimits", "Operation",
    "consolidate", "load_bank", "memory_names", "register_memory", "make_consolidator", "make_evolution", "openai_generate_text", "parse_last_json",
]
