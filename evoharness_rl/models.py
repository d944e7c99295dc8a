"""Local models: tiny Qwen3-architecture checkpoints built here, and loaders for any HF checkpoint.

`init_model(size, out_dir)` makes a checkpoint with no download:

1. a byte-level BPE tokenizer trained with `tokenizers` on text the repo generates (the
   environments' own prompts, when their specs can be found, otherwise the paper's
   Appendix L prompts, plus synthetic ALFWorld/WebShop observations and responses);
2. wrapped as a `PreTrainedTokenizerFast` with ChatML special tokens and a Qwen-style chat
   template whose assistant content sits inside `{% generation %}` markers (TRL's
   assistant-only loss reads them through `return_assistant_tokens_mask`);
3. a randomly initialised `Qwen3ForCausalLM` sized ~1M / ~10M / ~50M parameters;
4. saved as a normal HF checkpoint directory (atomic: written aside, then renamed).

Real runs point `model.path` at any HF checkpoint (e.g. Qwen3-8B); `load_model` /
`load_tokenizer` serve both.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Optional

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
VOCAB_SIZE = 4096  # modest so that prompts stay short in tokens and the embedding stays small
MAX_POSITIONS = 8192  # enough for a per-turn prompt plus its response
BOS, IM_START, IM_END, PAD = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"
SPECIAL_TOKENS = (BOS, IM_START, IM_END, PAD)

# ChatML as Qwen writes it. The assistant's content *and* its <|im_end|> are inside the
# generation block, so the end-of-turn token is trained; the prompt rendered with
# add_generation_prompt is a token prefix of the full conversation (the special token and
# the newline after "assistant" are pre-token boundaries).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
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


# ------------------------------------------------------------------------ building


def init_model(size: str, out_dir: str | os.PathLike, seed: int = 0) -> Path:
    """Train a tokenizer, build a `size` Qwen3 model, save both to `out_dir`; returns the path."""
    if size not in SIZES:
        raise ValueError(f"size={size!r} is not valid; allowed values: {', '.join(SIZES)}")
    tokenizer = build_tokenizer(training_corpus(seed), VOCAB_SIZE)
    return save_checkpoint(build_model(size, tokenizer, seed), tokenizer, out_dir)


def save_checkpoint(model: Any, tokenizer: Any, out_dir: str | os.PathLike) -> Path:
    """Save `model` and `tokenizer` as one HF checkpoint directory, atomically (written aside, renamed)."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
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
    """Tokenizer training text: env prompts with synthetic observations, actions and responses."""
    rng = random.Random(seed)
    prompts = env_prompt_texts()
    texts = []
    for i in range(episodes):
        env = "alfworld" if i % 2 == 0 else "webshop"
        system, template = prompts[env]
        objective, observation, actions, responses = (_alfworld_turn if env == "alfworld" else _webshop_turn)(rng)
        user = template.format(objective=objective, observation=observation, actions=", ".join(actions),
                               history="(none)", harness_views="")
        # Role names as the chat template writes them; special tokens stay out (they are never merged).
        texts += [f"system\n{system}", f"user\n{user}"] + [f"assistant\n{r}" for r in responses]
    for name in prompts:  # the other harness modes' system prompts (env_only, always_on) and WebArena's
        spec = _find_spec(name)
        others = spec.system_prompts.values() if spec is not None else [prompts[name][0]]
        texts += [f"system\n{text}" for text in others] * max(1, episodes // 20)
    return texts


def env_prompt_texts() -> dict[str, tuple[str, str]]:
    """{env: (adaptive system prompt, per-turn template)} from the env specs, else Appendix L."""
    texts = dict(_APPENDIX_L)
    for name in texts:
        spec = _find_spec(name)
        if spec is not None:
            system = spec.system_prompts.get("adaptive") or next(iter(spec.system_prompts.values()), "")
            texts[name] = (system, spec.turn_template)
    return texts


def _find_spec(name: str):
    try:
        from evoharness_rl.sft.data import find_env_spec

        return find_env_spec(name)
    except Exception:  # an env still being written must not stop the tokenizer from training
        return None


_OBJECTS = ("mug", "apple", "egg", "book", "cellphone", "keychain", "pen", "plate", "potato", "tomato", "bowl",
            "knife", "spoon", "cd", "pillow", "vase", "creditcard", "soapbar", "towel", "lettuce", "bread", "cup")
_RECEPTACLES = ("cabinet", "countertop", "drawer", "shelf", "fridge", "microwave", "sinkbasin", "desk", "bed",
                "sofa", "garbagecan", "stoveburner", "dresser", "sidetable", "coffeemachine", "toilet", "safe")
_TASKS = ("put a {o} in {r}", "put a clean {o} in {r}", "put a hot {o} in {r}", "put a cool {o} in {r}",
          "look at {o} under the desklamp", "put two {o} in {r}")
_PRODUCTS = ("shoes", "t-shirt", "shampoo", "headphones", "coffee", "jeans", "lamp", "backpack", "tea", "socks")
_ATTRIBUTES = ("men's", "women's", "organic", "wireless", "waterproof", "long lasting", "gluten free", "cotton")


def _alfworld_turn(rng: random.Random) -> tuple[str, str, list[str], list[str]]:
    obj, rec = rng.choice(_OBJECTS), rng.choice(_RECEPTACLES)
    here = [f"{rng.choice(_RECEPTACLES)} {rng.randint(1, 4)}" for _ in range(rng.randint(3, 8))]
    seen = ", ".join(f"a {rng.choice(_OBJECTS)} {rng.randint(1, 3)}" for _ in range(rng.randint(1, 4)))
    observation = (f"You are in the middle of a room. Looking quickly around you, you see {', '.join(here)}. "
                   f"You arrive at {here[0]}. On the {here[0]}, you see {seen}.")
    actions = [f"go to {r}" for r in here] + [f"take {obj} 1 from {here[0]}", f"move {obj} 1 to {rec} 1",
                                              "inventory", "look", f"examine {here[0]}", f"open {here[-1]}"]
    thoughts = (f"I need to find the {obj} first.", f"The {obj} is usually on a {rec}.", "Next I should check it.")
    responses = [f"<think>{rng.choice(thoughts)}</think><action>{rng.choice(actions)}</action>",
                 f"<think>Record the plan.</think><action>commit [find {obj}]</action>",
                 f"<think>Where did I see it?</think><action>track [{obj}]</action>",
                 f"<think>Check experience.</think><action>recall [where to find {obj}]</action>",
                 f"<think>Worth remembering.</think><action>note [{obj} is often in {rec}]</action>"]
    return rng.choice(_TASKS).format(o=obj, r=rec), observation, actions, responses


def _webshop_turn(rng: random.Random) -> tuple[str, str, list[str], list[str]]:
    product, attribute = rng.choice(_PRODUCTS), rng.choice(_ATTRIBUTES)
    price = rng.randint(10, 90)
    objective = f"i need {attribute} {product}, and price lower than {price}.00 dollars"
    items = [f"B0{rng.randint(10**7, 10**8 - 1)}" for _ in range(3)]
    results = " [SEP] ".join(f"{item} [SEP] {attribute.title()} {product.title()} [SEP] ${rng.randint(5, 99)}.99"
                             for item in items)
    observation = f"Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] {results}"
    actions = ["click[back to search]", "click[next >]"] + [f"click[{item.lower()}]" for item in items]
    responses = [f"<think>Search first.</think><action>search[{attribute} {product}]</action>",
                 f"<think>This one matches.</think><action>{rng.choice(actions)}</action>",
                 "<think>Check the budget.</think><action>track [price]</action>",
                 f"<think>Plan.</think><action>commit [buy {product} under {price} dollars]</action>",
                 "<think>Done.</think><action>click[buy now]</action>"]
    return objective, observation, actions, responses


_ALFWORLD_SYSTEM = (
    "You are an autonomous intelligent agent operating in the ALFWorld text-based household environment. The "
    "objective is task completion through interactions with objects in rooms. You will receive: OBJECTIVE, "
    "OBSERVATION, ADMISSIBLE COMMANDS, PREVIOUS ACTION(S).\n## Environment Actions (listed in ADMISSIBLE COMMANDS)\n"
    "- go to <recep>, take <obj> from <recep>, put <obj> in/on <recep>\n- open/close <recep>, heat/cool/clean <obj> "
    "with <appliance>, use <tool>\n- examine/look/inventory\n## Harness Actions (cognitive tools; each call costs one "
    "step)\n### Plan\n- commit [subgoal]: Register the current subgoal. e.g. commit [find egg]\n### Perception\n"
    "- track [object]: Query a specific object's last location, state, and visited locations. e.g. track [egg]\n"
    "### Experience\n- recall [query]: Retrieve past experience. What you get depends on the query:\n  recall [where "
    "to find X] -> search hints (object->location)\n  recall [how to do Y task] -> procedures, general skills, common "
    "mistakes\n  recall [mistakes to avoid] -> common pitfalls and fixes\n- note [insight]: Record a generalizable "
    "discovery for future episodes. e.g. note [food usually in fridge or countertop]\n## Response Syntax\n<think>Brief "
    "reasoning in 1-2 sentences.</think>\n<action>your action here</action>\nEach response contains one action. "
    "Environment-action strings come from ADMISSIBLE COMMANDS."
)
_WEBSHOP_SYSTEM = (
    "You are an autonomous intelligent agent operating in the WebShop e-commerce environment. The objective is to buy "
    "the product that best matches the instruction, including its options and price ceiling. You will receive: "
    "OBJECTIVE, OBSERVATION, AVAILABLE ACTIONS, PREVIOUS ACTION(S).\n## Environment Actions (listed in AVAILABLE "
    "ACTIONS)\n- search[<query>] on the search page.\n- click[<button>] for a product, option, navigation control, or "
    "Buy Now.\n## Harness Actions (each call costs one step)\n- commit [subgoal]: register the current shopping "
    "subgoal.\n- track [price]: compare the current price with the budget.\n- track [candidates]: list previously seen "
    "products and prices.\n- track [options]: show selected options on the current item.\n- recall [query]: retrieve "
    "effective searches, purchase procedures, or mistakes to avoid.\n- note [insight]: save a reusable search phrasing "
    "or a shopping pitfall.\n## Response Syntax\n<think>Brief reasoning in 1-2 sentences.</think>\n<action>your action "
    "here</action>\nEach response contains one action. Environment-action strings come from AVAILABLE ACTIONS."
)
_WEBARENA_SYSTEM = (
    "You are an autonomous intelligent agent tasked with navigating a web browser. You receive the user's objective, "
    "the current page's accessibility tree and URL, the open tabs, and the previous action.\n## Browser Actions\n"
    "- Page operations: click [id], type [id] [content] [0|1], hover [id], press [key], and scroll [down|up].\n"
    "- Navigation: new_tab, tab_focus [i], close_tab, goto [url], go_back, and go_forward.\n- Completion: stop "
    "[answer].\n## Cognitive Tools (page-independent; each call consumes one interaction step)\n- commit [subgoal]: "
    "declare the goal you are about to pursue, not a result.\n- track [visited]: list previously opened pages and "
    "URLs.\n- track [values]: recover numbers seen on earlier pages.\n- recall [mistakes to avoid]: retrieve common "
    "pitfalls.\n- note [insight]: save a reusable procedure, feature location, or pitfall.\n## Response Syntax\nA "
    "response consists of step-by-step reasoning followed by one browser or cognitive-tool action inside a "
    "triple-backtick block. stop [answer] represents task completion."
)
_APPENDIX_L: dict[str, tuple[str, str]] = {  # paper Appendix L.1 (fallback when an env spec is not available)
    "alfworld": (_ALFWORLD_SYSTEM, "OBJECTIVE: {objective}\nOBSERVATION: {observation}\nADMISSIBLE COMMANDS: "
                                   "{actions}\nPREVIOUS ACTION(S):\n{history}\n{harness_views}"),
    "webshop": (_WEBSHOP_SYSTEM, "OBJECTIVE: {objective}\nOBSERVATION: {observation}\nAVAILABLE ACTIONS: "
                                 "{actions}\nPREVIOUS ACTION(S):\n{history}\n{harness_views}"),
    "webarena": (_WEBARENA_SYSTEM, "OBJECTIVE: {objective}\nOBSERVATION: {observation}\n{harness_views}"),
}


# ------------------------------------------------------------------------- loading


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


def _checkpoint_path(path: Optional[str]) -> str:
    if not path:
        raise ValueError("model.path is not set; point it at an HF checkpoint directory "
                         "(e.g. the output of `evoharness-rl init-model size=tiny out=<dir>`)")
    if Path(path).is_dir():
        return str(path)
    if _offline():
        raise FileNotFoundError(f"model.path={path!r} is not a directory and HF_HUB_OFFLINE is set, so nothing can be "
                                "downloaded; point model.path at a local checkpoint directory")
    return str(path)  # a hub id: transformers resolves it from the local cache (or downloads, when allowed)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def load_tokenizer(path: Optional[str], trust_remote_code: bool = False):
    """The checkpoint's tokenizer; it must carry a chat template (prompts are chat messages)."""
    from transformers import AutoTokenizer

    path = _checkpoint_path(path)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=_offline(), trust_remote_code=trust_remote_code)
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

    path = _checkpoint_path(model_cfg.path)
    device = resolve_device(device)
    model = AutoModelForCausalLM.from_pretrained(
        path,
        dtype=resolve_dtype(dtype or model_cfg.dtype, device),
        attn_implementation=model_cfg.attn_implementation,
        trust_remote_code=model_cfg.trust_remote_code,
        local_files_only=_offline(),
    )
    return model.to(device)
