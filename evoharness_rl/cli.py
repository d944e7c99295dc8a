"""`evoharness-rl <command> [hydra overrides]` — the single entry point.

The command picks what runs; Hydra composes `configs/` on top of the typed schema in
`evoharness_rl.config`, applies the overrides, and `validate` checks every value
before any model, engine or environment module is imported. Each run writes its
resolved config (secrets removed), `metrics.jsonl` and `run.log` to `out_dir`.
"""

from __future__ import annotations

import sys
from pathlib import Path

COMMAND_HELP = {
    "prepare": "build embedded data: generated ALFWorld games, the WebShop catalogue",
    "collect": "run a teacher with the BPE interface; keep successful episodes as an SFT dataset",
    "sft": "supervised initialisation (TRL SFTTrainer, LoRA or full) and merge",
    "grpo": "cost-aware GRPO with Experience consolidation between rollout batches",
    "eval": "evaluate a policy on a split; writes summary.json and trajectories/",
    "consolidate": "run Experience consolidation offline over saved trajectories",
    "report": "Markdown tables and plots from run directories (runs=[dir,...])",
    "init-model": "build a small local tokenizer + Qwen3-architecture model (size=tiny|small|base out=DIR), "
                  "or import a real one (source=smollm2-135m-instruct out=DIR)",
}

USAGE = """usage: evoharness-rl <command> [key=value ...] [--multirun] [--cfg job]

commands:
{commands}

Overrides use Hydra syntax, e.g.
  evoharness-rl eval env=alfworld split=valid_unseen policy=scripted harness.mode=adaptive out_dir=runs/eval
  evoharness-rl grpo --multirun reward.lambda_eff=0,1.0 reward.lambda_div_max=0,1.0
Config groups: env, model, policy, harness, reward, sft, grpo, experience, logger, experiment.
Every field is documented in evoharness_rl/config.py and docs/config.md.
"""


def config_dir() -> Path:
    """The `configs/` folder of the checkout this package was installed from."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "configs", here / "configs"):
        if (candidate / "config.yaml").exists():
            return candidate
    raise FileNotFoundError(f"configs/config.yaml not found next to {here}; install with `pip install -e .`")


def usage() -> str:
    width = max(len(c) for c in COMMAND_HELP)
    return USAGE.format(commands="\n".join(f"  {c:<{width}}  {h}" for c, h in COMMAND_HELP.items()))


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        sys.exit(0 if argv else 2)
    command, overrides = argv[0], argv[1:]
    if command not in COMMAND_HELP:
        print(f"error: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        sys.exit(2)
    if any(a in ("-h", "--help") for a in overrides):
        print(f"evoharness-rl {command}: {COMMAND_HELP[command]}\n\n{usage()}")
        sys.exit(0)
    _hydra_main(command, overrides)


def _hydra_main(command: str, overrides: list[str]) -> None:
    import hydra
    from hydra.core.config_store import ConfigStore

    from evoharness_rl.config import Config

    ConfigStore.instance().store(name="base_config", node=Config)
    task = hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")(_run)
    saved = sys.argv
    # command= goes last: Hydra's flags (--multirun, --cfg job) must come before the first override.
    sys.argv = [f"evoharness-rl {command}", *overrides, f"command={command}"]
    try:
        task()
    finally:
        sys.argv = saved


def _run(dict_cfg) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from evoharness_rl.config import ConfigError, validate
    from evoharness_rl.errors import UserError

    try:
        cfg = validate(OmegaConf.to_object(dict_cfg))
    except ConfigError as err:
        print(f"error: invalid configuration: {err}", file=sys.stderr)
        sys.exit(2)
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN:
        cfg.out_dir = hydra_cfg.runtime.output_dir  # one run directory per sweep job
    try:
        run_command(cfg)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)


def run_command(cfg) -> None:
    """Dispatch a validated `Config` to its command (heavy modules are imported here)."""
    from evoharness_rl.runlog import set_progress

    set_progress(cfg.logger.progress)
    write_run_config(cfg)
    handler = _COMMANDS[cfg.command]
    handler(cfg)


def write_run_config(cfg) -> None:
    from dataclasses import asdict

    from omegaconf import OmegaConf

    from evoharness_rl.fileio import atomic_write_text
    from evoharness_rl.runlog import redact

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(redact(asdict(cfg)))))


def _prepare(cfg) -> None:
    from evoharness_rl.errors import UserError

    if cfg.env.name == "alfworld":
        from evoharness_rl.envs.alfworld.prepare import prepare
    elif cfg.env.name == "webshop":
        from evoharness_rl.envs.webshop.catalogue import prepare
    else:
        raise UserError(f"env.name={cfg.env.name!r} has no embedded data to prepare (alfworld, webshop do)")
    path = prepare(cfg.env)
    print(f"prepared {cfg.env.name} data in {path}")


def _collect(cfg) -> None:
    from evoharness_rl.eval.collect import collect

    collect(cfg)


def _sft(cfg) -> None:
    from evoharness_rl.sft.trainer import run_sft

    path = run_sft(cfg)
    print(f"SFT checkpoint: {path}")


def _grpo(cfg) -> None:
    from evoharness_rl.grpo.trainer import run_grpo

    run_grpo(cfg)


def _eval(cfg) -> None:
    import json

    from evoharness_rl.eval.evaluate import evaluate

    summary = evaluate(cfg)
    keys = ("success_rate", "score", "episodes", "errors", "harness_calls_per_episode")
    print(json.dumps({k: summary[k] for k in keys if k in summary}, indent=2))


def _consolidate(cfg) -> None:
    from evoharness_rl.experience.cli import consolidate_command

    consolidate_command(cfg)


def _report(cfg) -> None:
    from evoharness_rl.eval.report import report_command

    report_command(cfg)


def _init_model(cfg) -> None:
    from evoharness_rl.errors import UserError
    from evoharness_rl.models import init_model

    if not cfg.out:
        raise UserError("init-model needs out=<directory>")
    if cfg.source:
        from evoharness_rl.gguf_import import import_gguf

        path = import_gguf(cfg.source, cfg.out)
        print(f"imported {cfg.source} to {path}")
        return
    path = init_model(cfg.size, cfg.out, seed=cfg.seed)
    print(f"wrote {cfg.size} model to {path}")


_COMMANDS = {
    "prepare": _prepare,
    "collect": _collect,
    "sft": _sft,
    "grpo": _grpo,
    "eval": _eval,
    "consolidate": _consolidate,
    "report": _report,
    "init-model": _init_model,
}
