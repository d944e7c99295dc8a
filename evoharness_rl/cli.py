"""`evoharness-rl <command> [hydra overrides]` — the single entry point.

The command picks what runs; Hydra composes `configs/` on top of the typed schema in
`evoharness_rl.config`, applies the overrides, and `validate` checks every value
before any model, engine or environment module is imported. Each run writes its
resolved config (secrets removed), `metrics.jsonl` and `run.log` to `out_dir`.
"""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path

COMMAND_HELP = {
    "prepare": "build embedded data: generated ALFWorld games, the WebShop catalogue, the WebArena local sites",
    "collect": "run a teacher with the BPE interface; keep successful episodes as an SFT dataset",
    "sft": "supervised initialisation (TRL SFTTrainer, LoRA or full) and merge",
    "grpo": "cost-aware GRPO with Experience consolidation between rollout batches",
    "eval": "evaluate a policy on a split; writes summary.json and trajectories/",
    "consolidate": "run Experience consolidation offline over saved trajectories",
    "bank": "inspect an Experience bank: bank show|log|diff SOURCE... (plain arguments; see `evoharness-rl bank -h`)",
    "report": "Markdown tables and plots from run directories (runs=[dir,...])",
    "init-model": "build a small local tokenizer + Qwen3-architecture model (size=tiny|small|base out=DIR), "
                  "or import a real one (source=smollm2-135m-instruct out=DIR)",
    "view": "a static HTML site over run directories: tables, plots, cost, every episode (runs=[dir,...] out_dir=SITE)",
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
    """The console script: faults (a full disk, Ctrl-C, SIGTERM) end it with one line, never a traceback."""
    from evoharness_rl.faults import EXIT_CODES, catch_signals, claim_line, exit_now, received

    if argv is None:  # the console script, not a test calling main(): SIGTERM unwinds like Ctrl-C
        catch_signals(_line_on_timeout)
    try:
        _main(argv)
    except KeyboardInterrupt:  # before or after a job ran (a job's own interrupt is reported by `_run`)
        signum = received() or 2
        if claim_line():
            print(f"interrupted ({_signal_name(signum)}) before a run started; nothing was written", file=sys.stderr)
        exit_now(EXIT_CODES.get(signum, 130))


def _main(argv: list[str] | None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        sys.exit(0 if argv else 2)
    command, overrides = argv[0], argv[1:]
    if command == "bank":  # inspection only: positional arguments, no config, no out_dir
        _bank(overrides)
        return
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
    flags, overrides = split_flags(overrides)
    problem = check_overrides([*overrides, f"command={command}"])
    if not problem and any(f in ("--multirun", "-m") for f in flags):
        problem, overrides = multirun_out_dir(overrides)
    if problem:
        print(f"error: invalid configuration: {problem}", file=sys.stderr)
        sys.exit(2)
    # Hydra's flags (--multirun, --cfg job) must come before the first override, wherever the user wrote them.
    sys.argv = [f"evoharness-rl {command}", *flags, *overrides, f"command={command}"]
    try:
        task()
    finally:
        sys.argv = saved


def split_flags(args: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra's flags with their values, the overrides), each in the order given."""
    from hydra._internal.utils import get_args_parser

    actions = {option: action for action in get_args_parser()._actions for option in action.option_strings}
    flags, overrides, i = [], [], 0
    while i < len(args):
        arg = args[i]
        action = actions.get(arg.split("=", 1)[0]) if arg.startswith("-") else None
        if action is None:
            overrides.append(arg)
        elif "=" in arg or action.nargs == 0:
            flags.append(arg)
        elif action.nargs == "?":  # --info [all|config|...]
            flags.append(arg)
            if i + 1 < len(args) and args[i + 1] in (action.choices or ()):
                i += 1
                flags.append(args[i])
        else:  # --cfg job, --package pkg, ...
            flags += args[i:i + 2]
            i += 1
        i += 1
    return flags, overrides


def check_overrides(overrides: list[str]) -> str:
    """What is wrong with `overrides` in one line ("" when nothing is): compose and validate the config (with a
    sweep, once per swept value) so that an unknown key or experiment, a bad group option, a wrong type or an
    invalid value is reported before Hydra starts the first job."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from evoharness_rl.config import Config, ConfigError, validate

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        values = [[f"{o.input_line.split('=', 1)[0]}={v}" for v in o.sweep_string_iterator()]
                  if o.is_sweep_override() else [o.input_line] for o in parsed]
    except Exception as err:  # Hydra's override errors
        return _first_line(err)
    problem = _unknown_experiment(parsed, values)
    if problem:
        return problem
    first = [v[0] for v in values]
    variants = [(first, [vs[0] for vs in values if len(vs) > 1])]
    variants += [(first[:i] + [value] + first[i + 1:], [value]) for i, vs in enumerate(values) for value in vs[1:]]
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        for variant, swept in variants:
            try:
                composed = compose("config", overrides=variant)
            except Exception as err:  # Hydra's composition errors
                return _first_line(err)
            unknown = unknown_keys(OmegaConf.to_container(composed, resolve=False), Config)
            if unknown:
                return (f"{', '.join(unknown)}: no such config key (`+key=` adds keys that nothing reads); every key "
                        "is listed in docs/config.md")
            try:
                cfg = OmegaConf.to_object(composed)
            except Exception:  # an interpolation only a job resolves (${hydra:...}): the job validates it
                continue
            try:
                validate(cfg)
            except ConfigError as err:
                where = f" (in the sweep's job with {', '.join(swept)})" if len(variants) > 1 else ""
                return f"{err}{where}"
    return ""


def _unknown_experiment(parsed, values: list[list[str]]) -> str:
    """`experiment=NAME` must name a file of configs/experiment/ (Hydra skips an optional group's missing option)."""
    known = sorted(p.stem for p in (config_dir() / "experiment").glob("*.yaml"))
    for override, options in zip(parsed, values):
        if override.get_key_element().lstrip("+~") != "experiment":
            continue
        for option in options:
            name = option.split("=", 1)[1].strip("'\"")
            if name and name != "null" and name not in known:
                return f"experiment={name}: no such experiment; choose one of {', '.join(known)} (configs/experiment/)"
    return ""


def multirun_out_dir(overrides: list[str]) -> tuple[str, list[str]]:
    """(problem, overrides) of a --multirun: `out_dir=DIR` becomes the sweep's folder (job N writes to DIR/N);
    a swept out_dir is refused (the jobs would need one folder each)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    keys = {o.get_key_element().lstrip("+~"): o for o in parsed}
    out = keys.get("out_dir")
    if out is None:
        return "", overrides
    if out.is_sweep_override():
        return ("out_dir cannot be swept: with --multirun job N writes to out_dir/N; give one out_dir "
                "(or hydra.sweep.dir)"), overrides
    rest = [o for o in overrides if not o.lstrip("+~").startswith("out_dir=")]
    if "hydra.sweep.dir" in keys:
        return "give out_dir or hydra.sweep.dir with --multirun, not both (job N writes to DIR/N)", overrides
    return "", [*rest, f"hydra.sweep.dir={out.value()}"]


def unknown_keys(values: dict, schema: type, prefix: str = "") -> list[str]:
    """Dotted keys of `values` that the dataclass `schema` has no field for (dict-typed fields take any key)."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(schema)}
    unknown = []
    for key, value in values.items():
        if key not in fields:
            unknown.append(f"{prefix}{key}")
            continue
        default = fields[key].default_factory() if callable(fields[key].default_factory) else fields[key].default
        if dataclasses.is_dataclass(default) and isinstance(value, dict):
            unknown += unknown_keys(value, type(default), f"{prefix}{key}.")
    return unknown


def _first_line(err: BaseException) -> str:
    """Hydra's composition errors span several lines (the key, then the full key and the schema); keep the first,
    plus the cause's when Hydra wraps one."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    cause = err.__cause__
    reason = next((line.strip() for line in str(cause).splitlines() if line.strip()), "") if cause else ""
    if lines and reason and reason not in lines[0]:
        wanted = re.search(r"could not be converted to (\w+)", reason)
        if wanted:  # name the type the key takes
            reason = f"{reason}; the key takes {_TYPE_NAMES.get(wanted.group(1), wanted.group(1).lower())}"
        return f"{lines[0]}: {reason}"
    return lines[0] if lines else (reason or type(err).__name__)


_TYPE_NAMES = {"Integer": "an integer", "Float": "a number", "Boolean": "true or false"}


def _run(dict_cfg) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from evoharness_rl.config import ConfigError, validate
    from evoharness_rl.errors import UserError

    hydra_cfg = HydraConfig.get()
    redact_hydra_files(hydra_cfg, OmegaConf.to_container(dict_cfg, resolve=False))
    try:
        cfg = validate(OmegaConf.to_object(dict_cfg))
    except ConfigError as err:
        print(f"error: invalid configuration: {err}", file=sys.stderr)
        sys.exit(2)
    if hydra_cfg.mode == RunMode.MULTIRUN:
        cfg.out_dir = hydra_cfg.runtime.output_dir  # one run directory per sweep job
    _RUNNING[:] = [cfg]
    try:
        run_command(cfg)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (faults.Terminated)
        _report_interrupt(cfg)
    except Exception as err:  # noqa: BLE001 - a user's error or a full disk: one line; anything else: re-raised
        if not _report_failure(cfg, err):
            raise
    finally:
        _RUNNING.clear()


_RUNNING: list = []  # the Config of the job this process runs (for the interrupt watchdog's line)


def _report_failure(cfg, err: Exception) -> bool:
    """A UserError or a full disk (`faults.DiskFull`, or any error whose cause is one): its one line, exit 1.
    Any other error is a bug and keeps its traceback: False, the caller re-raises it."""
    from evoharness_rl.errors import UserError
    from evoharness_rl.faults import as_disk_full, release

    full = as_disk_full(err, _writes_to(cfg))
    if full is not None:
        release(err)  # files the failed writer still held open free their space: the line says what is free
        print(f"error: {full.describe()}, then {continue_hint(cfg)}", file=sys.stderr)
        sys.exit(1)
    if isinstance(err, UserError):
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    return False


def _report_interrupt(cfg) -> None:
    """Ctrl-C or SIGTERM: where the run stopped and how to continue, in one line; exit 130 / 143."""
    from evoharness_rl.faults import EXIT_CODES, claim_line, exit_now, received

    signum = received() or 2
    if claim_line():
        print(stop_line(cfg, signum), file=sys.stderr)
    exit_now(EXIT_CODES.get(signum, 130))


def _line_on_timeout(signum: int) -> None:
    """The watchdog's part when a run does not unwind in time: the line, and this job's temporary files removed."""
    from evoharness_rl.faults import remove_temps

    if not _RUNNING:
        print(f"interrupted ({_signal_name(signum)}) before a run started; nothing was written", file=sys.stderr)
        return
    cfg = _RUNNING[0]
    try:
        remove_temps(_writes_to(cfg), holds_lock=_holds_lock(cfg))
        if _holds_lock(cfg):
            (Path(cfg.out_dir) / ".lock").unlink(missing_ok=True)
    finally:
        print(stop_line(cfg, signum), file=sys.stderr)


def _holds_lock(cfg) -> bool:
    from evoharness_rl.fileio import LOCK_FILE, _lock_holder

    return cfg.command != "view" and _lock_holder(Path(cfg.out_dir) / LOCK_FILE) == os.getpid()


def _signal_name(signum: int) -> str:
    return "Ctrl-C" if signum == 2 else "SIGTERM" if signum == 15 else f"signal {signum}"


def _writes_to(cfg) -> str:
    """The directory a command writes its result to."""
    return cfg.out if cfg.command == "init-model" and cfg.out else cfg.out_dir


def continue_hint(cfg) -> str:
    """How to continue `cfg`'s command after a fault, in words that fit after "then"."""
    if cfg.command in ("sft", "grpo"):
        return "rerun the same command with resume=true: it continues from its last complete checkpoint"
    if cfg.command in ("eval", "collect"):
        return "rerun the same command: it keeps the episodes already recorded and plays the rest"
    if cfg.command == "consolidate":
        return "rerun the same command with overwrite=true (what it had written is moved aside)"
    return "rerun the same command"


def stop_line(cfg, signum: int) -> str:
    """`interrupted (Ctrl-C): grpo in OUT stopped after update 3 (checkpoint update_000003); rerun ...`."""
    return (f"interrupted ({_signal_name(signum)}): {cfg.command} in {_writes_to(cfg)} stopped {stopped_at(cfg)}; "
            f"{continue_hint(cfg)}")


def stopped_at(cfg) -> str:
    """Where an interrupted run's results end, read from its out_dir: its newest complete checkpoint (sft, grpo),
    the episodes recorded (eval, collect); "before it finished" otherwise."""
    out = Path(cfg.out_dir)
    try:
        if cfg.command == "grpo":
            from evoharness_rl.grpo.checkpoint import latest_checkpoint, read_trainer_state

            latest = latest_checkpoint(out)
            if latest is not None:
                return f"after update {read_trainer_state(latest).update} (its checkpoint {latest.name})"
            return "before its first checkpoint"
        if cfg.command == "sft":
            from evoharness_rl.sft.checkpoints import newest_complete

            latest = newest_complete(out / "checkpoints")
            return f"at its checkpoint {latest.name}" if latest is not None else "before its first checkpoint"
        if cfg.command in ("eval", "collect"):
            done = len(list((out / "trajectories").glob("*.json")))
            return f"with {done} episode{'' if done == 1 else 's'} recorded in {out / 'trajectories'}"
    except (OSError, ValueError):  # a damaged record says nothing more about where it stopped
        pass
    return "before it finished"


def redact_hydra_files(hydra_cfg, config: dict) -> None:
    """Hydra's own copies of the config and overrides (the sweep's multirun.yaml; .hydra/ when
    hydra.output_subdir is set) go through the redaction of config.yaml before the job does anything."""
    from hydra.types import RunMode

    from evoharness_rl.runlog import redact_file, secrets_in

    secrets = secrets_in(config) | secrets_in(list(hydra_cfg.overrides.task))
    files = []
    if hydra_cfg.mode == RunMode.MULTIRUN:
        files.append(Path(hydra_cfg.sweep.dir) / "multirun.yaml")
    if hydra_cfg.output_subdir:
        files += sorted((Path(hydra_cfg.runtime.output_dir) / hydra_cfg.output_subdir).glob("*.yaml"))
    for path in files:
        if path.is_file():
            redact_file(path, secrets)


def run_command(cfg) -> None:
    """Dispatch a validated `Config` to its command (heavy modules are imported here).

    Cheap refusals come first (`preflight`); then the job holds out_dir's lock. A job that
    refuses later on (`Refusal`) leaves out_dir as it found it: config.yaml and the logs
    it began are put back."""
    from contextlib import nullcontext

    from evoharness_rl.fileio import out_dir_lock
    from evoharness_rl.runlog import set_progress

    set_progress(cfg.logger.progress)
    if not cfg.logger.progress:
        _quiet_library_bars(cfg)
    if cfg.command == "view":  # out_dir is the site itself, replaced whole and atomically: no lock file in it
        write_run_config(cfg)
        _COMMANDS["view"](cfg)
        return
    preflight(cfg)
    main_process = os.environ.get("RANK", "0") == "0"  # under torchrun/accelerate the first process holds the lock
    if main_process:
        guard_result(cfg, _note)
    if cfg.command == "sft" and cfg.resume and _finished_sft(cfg):
        return
    with out_dir_lock(cfg.out_dir, _note) if main_process else nullcontext():
        with _kept_on_refusal(Path(cfg.out_dir)), _cleaned_on_failure(cfg, holds_lock=main_process):
            write_run_config(cfg)
            _COMMANDS[cfg.command](cfg)


def _quiet_library_bars(cfg) -> None:
    """logger.progress=false holds for the libraries' own bars too (transformers' weight loading and saving,
    datasets' map/filter): stderr keeps the run's log lines and, on a fault, its one error line. transformers is
    switched only where the command loads it anyway (importing it costs seconds); datasets reads its variable
    when it is imported."""
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    if "datasets" in sys.modules:
        from datasets.utils.logging import disable_progress_bar

        disable_progress_bar()
    if "transformers" in sys.modules or cfg.command in ("sft", "grpo", "init-model") or (
            cfg.command in ("eval", "collect") and cfg.policy.backend in ("hf", "vllm", "vllm_server")):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def preflight(cfg) -> None:
    """Refusals that need no model, engine or environment: a checkpoint that is not one, a GRPO re-run."""
    from evoharness_rl.errors import Refusal
    from evoharness_rl.models import check_checkpoint

    backend = cfg.policy.backend
    if cfg.command in ("sft", "grpo") or (cfg.command in ("eval", "collect") and backend in ("hf", "vllm")):
        check_checkpoint(cfg.model.path)
    elif cfg.command in ("eval", "collect") and backend == "vllm_server":
        check_checkpoint(cfg.model.path, weights=False)  # the tokenizer only; the server holds the weights
    if cfg.command in ("eval", "collect") and backend in ("openai", "vllm_server"):
        from evoharness_rl.engines.openai import check_reachable

        check_reachable(cfg.policy.base_url)  # a dead server: one line, not an eval of errored episodes
    exp = cfg.experience
    if exp.consolidator == "openai" and exp.base_url and (cfg.command in ("consolidate", "grpo") or (
            cfg.command in ("eval", "collect") and exp.evolve == "online")):
        from evoharness_rl.engines.openai import check_reachable

        check_reachable(exp.base_url, key="experience.base_url")  # a dead or hung consolidator: one line at once
    bank = cfg.experience.bank
    if bank and cfg.command in ("eval", "collect", "grpo", "consolidate") and not Path(bank).is_file():
        raise Refusal(f"experience.bank={bank!r} does not exist; give an existing bank file (`consolidate` or an "
                      "online eval writes one), or use experience.bank=null to start an empty bank")
    if bank and cfg.command in ("eval", "collect", "grpo", "consolidate") and Path(bank).is_file():
        from evoharness_rl.experience.bank import env_mismatch, file_env

        tagged = file_env(bank)
        if tagged and tagged != cfg.env.name:
            raise Refusal(env_mismatch(f"experience.bank={bank}", tagged, cfg.env.name))
    for name, value in (("out_dir", cfg.out_dir), ("out", cfg.out)):
        if value and Path(value).exists() and not Path(value).is_dir():
            raise Refusal(f"{name}={value} is a file; give a directory (a new one, or a run to continue)")


# ------------------------------------------------------------------ the one rule for results

RESULTS = {  # what in a command's output directory is a result that a new run must not replace
    "sft": ("merged", "adapter", "checkpoints", "dataset"),
    "eval": ("summary.json", "trajectories"),
    "collect": ("summary.json", "trajectories"),
    "consolidate": ("bank.json", "history.jsonl", "consolidation_report.json"),
}
LABELS = {"init-model": "model", "sft": "SFT run", "grpo": "GRPO run", "eval": "evaluation",
          "collect": "collection", "consolidate": "consolidated bank"}
# Keys that a resumed run may change without saying so: where and how fast it runs, not what it computes.
RESUME_FREE = ("command", "out_dir", "resume", "overwrite", "resume_changes", "logger.", "device", "env.num_workers",
               "env.pool", "env.ray_", "env.step_timeout_s", "env.max_live_episodes", "policy.batch_size",
               "policy.concurrency", "policy.request_timeout_s", "policy.max_retries", "experience.request_timeout_s",
               "experience.max_retries", "grpo.updates")


def result_in(cfg) -> tuple[Path, str]:
    """(the directory a command writes its result to, what result it already holds there: "" when none)."""
    target = Path(cfg.out if cfg.command == "init-model" else cfg.out_dir)
    if not target.is_dir():
        return target, ""
    if cfg.command == "init-model":
        found = sorted(p.name for p in target.iterdir() if not p.name.startswith("."))
    elif cfg.command == "grpo":
        from evoharness_rl.grpo.checkpoint import latest_checkpoint

        latest = latest_checkpoint(target)
        return target, f"latest checkpoint: {latest.name}" if latest is not None else ""
    else:
        found = [n for n in RESULTS.get(cfg.command, ()) if (target / n).is_file()
                 or ((target / n).is_dir() and any((target / n).iterdir()))]
    return target, ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")


def guard_result(cfg, note) -> None:
    """The rule of every stage that writes: a result already in its directory is never replaced unless asked.

    `resume=true` continues it with the settings it was run with (config.yaml; `resume_changes` names keys
    changed on purpose); `overwrite=true` moves it aside (`<dir>.replaced-<time>`) and starts afresh;
    otherwise the job is refused before it writes anything. An eval (or collect) re-run with the same
    configuration continues too: its records are fingerprinted, and another configuration is refused."""
    from evoharness_rl.errors import Refusal
    from evoharness_rl.fileio import move_aside

    target, found = result_in(cfg)
    if not found or cfg.command not in LABELS:
        return
    what = f"{LABELS[cfg.command]} ({found})"
    if cfg.overwrite:
        aside = move_aside(target)
        note(f"overwrite=true: the {what} in {target} was moved to {aside}")
        return
    if cfg.resume and cfg.command in ("sft", "grpo"):
        check_same_settings(cfg, target)
        if cfg.command == "grpo":
            check_usable_checkpoint(target)
        return
    if cfg.command in ("eval", "collect"):
        return
    key = "out" if cfg.command == "init-model" else "out_dir"
    cont = "" if cfg.command in ("init-model", "consolidate") else "pass resume=true to continue it, "
    raise Refusal(f"{target} already holds a {what}; {cont}pass overwrite=true to replace it (the old one is moved "
                  f"aside first), or choose another {key}")


def _finished_sft(cfg) -> bool:
    """`sft resume=true` on a finished run (its settings already checked the same): nothing to continue, so nothing
    is written (config.yaml, metrics.jsonl and the checkpoints stay byte-identical); its result is printed."""
    from evoharness_rl.sft.checkpoints import finished_result

    result = finished_result(cfg)
    if result is None:
        return False
    _note(f"the SFT run in {cfg.out_dir} has finished; resume=true has nothing to continue (pass overwrite=true "
          "to train it again)")
    print(f"SFT checkpoint: {result}")
    return True


def check_same_settings(cfg, target: Path) -> None:
    """A resumed run keeps the settings in its config.yaml: refuse one that differs in a key that decides what it
    computes (RESUME_FREE aside), unless `resume_changes` names that key."""
    from dataclasses import asdict

    from omegaconf import OmegaConf

    from evoharness_rl.errors import Refusal
    from evoharness_rl.runlog import redact

    saved_file = target / "config.yaml"
    try:
        saved = OmegaConf.to_container(OmegaConf.load(saved_file)) if saved_file.is_file() else None
    except Exception:  # an unreadable config.yaml: nothing to compare with
        saved = None
    if not isinstance(saved, dict):
        return
    now, before = _flat(redact(asdict(cfg))), _flat(saved)
    allowed = tuple(cfg.resume_changes)
    changed = [f"{k}: {before[k]!r} -> {now[k]!r}" for k in sorted(now) if k in before and before[k] != now[k]
               and not k.startswith(RESUME_FREE) and not any(k == a or k.startswith(a + ".") for a in allowed)]
    if changed:
        keys = ",".join(c.split(":", 1)[0] for c in changed)
        raise Refusal(f"{target} was run with other settings ({'; '.join(changed)}); resume=true continues it with "
                      f"its own: drop those overrides, or change them on purpose with resume_changes=[{keys}]")


def check_usable_checkpoint(target: Path) -> None:
    """A GRPO resume falls back past damaged checkpoints; when none is usable it is refused (a start at update 0
    would write over the run's checkpoints)."""
    from evoharness_rl.errors import Refusal
    from evoharness_rl.grpo.checkpoint import checkpoint_damage, latest_checkpoint, latest_usable_checkpoint

    if latest_usable_checkpoint(target, lambda message: None) is None:
        newest = latest_checkpoint(target)
        raise Refusal(f"no checkpoint of {target} is usable (the newest, {newest.name}: {checkpoint_damage(newest)}); "
                      "pass overwrite=true to start afresh (the run is moved aside first), or choose another out_dir")


def _flat(data, prefix: str = "") -> dict:
    if not isinstance(data, dict):
        return {prefix.rstrip("."): data}
    out = {}
    for key, value in data.items():
        out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


@contextmanager
def _kept_on_refusal(out: Path):
    """On a `Refusal`, put back config.yaml and cut run.log and metrics.jsonl to where they ended before."""
    from evoharness_rl.errors import Refusal

    config = out / "config.yaml"
    before = config.read_bytes() if config.is_file() else None
    sizes = {out / name: (out / name).stat().st_size if (out / name).is_file() else None
             for name in ("run.log", "metrics.jsonl")}
    try:
        yield
    except Refusal:
        if before is None:
            config.unlink(missing_ok=True)
        else:
            config.write_bytes(before)
        for path, size in sizes.items():
            if size is None:
                path.unlink(missing_ok=True)
            elif path.is_file():
                os.truncate(path, size)
        raise


@contextmanager
def _cleaned_on_failure(cfg, holds_lock: bool):
    """A job that fails or is interrupted removes its own temporary files (`faults.remove_temps`) and, for SFT,
    the checkpoint it had begun and not finished; finished files stay as they are."""
    from evoharness_rl.faults import DiskFull, as_disk_full, remove_temps, size_of

    try:
        yield
    except BaseException as err:
        # Is it a full disk? Asked before the cleanup frees space: torch's write errors count only on a full disk.
        full = as_disk_full(err, _writes_to(cfg)) if isinstance(err, Exception) else None
        remove_temps(cfg.out_dir, holds_lock=holds_lock)
        if _writes_to(cfg) != cfg.out_dir:  # init-model's out: this process's temporary files only (no lock there)
            remove_temps(_writes_to(cfg), holds_lock=False)
        if cfg.command == "sft" and holds_lock:
            from evoharness_rl.sft.checkpoints import newest_complete, remove_unfinished

            folder = Path(cfg.out_dir) / "checkpoints"
            unfinished = [(path, size_of(path)) for path in _unfinished(folder)]
            remove_unfinished(folder)
            if full is not None and unfinished and not isinstance(err, DiskFull):  # the checkpoint it was writing
                previous = newest_complete(folder)
                raise DiskFull(unfinished[-1][0], size_of(previous) if previous else None, unfinished[-1][1]) from err
        if full is not None and full is not err:
            raise full from err
        raise


def _unfinished(folder: Path) -> list[Path]:
    """SFT checkpoints newer than the newest complete one, oldest first."""
    from evoharness_rl.sft.checkpoints import checkpoints, newest_complete

    latest = newest_complete(folder)
    return [p for p in checkpoints(folder) if latest is None or int(p.name.split("-")[1]) > int(latest.name.split("-")[1])]


def _note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


def write_run_config(cfg) -> None:
    from dataclasses import asdict

    from omegaconf import OmegaConf

    from evoharness_rl.fileio import atomic_write_text
    from evoharness_rl.runlog import redact

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(redact(asdict(cfg)))))


def _prepare(cfg) -> None:
    from evoharness_rl.envs import prepare_env

    path = prepare_env(cfg.env)
    print(f"prepared {cfg.env.name} data in {path}")


def _collect(cfg) -> None:
    from evoharness_rl.eval.collect import collect

    _check_errors(cfg, collect(cfg))


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
    _check_errors(cfg, summary)  # an eval in which every episode errored prints its error, not a summary of nulls
    keys = ("success_rate", "score", "episodes", "errors", "harness_calls_per_episode")
    print(json.dumps({k: summary[k] for k in keys if k in summary}, indent=2))


def _check_errors(cfg, summary: dict) -> None:
    """A run in which every episode errored measured nothing: exit non-zero with the first error's reason; a share
    above `max_error_rate` is a warning."""
    from evoharness_rl.errors import UserError

    errors, played = summary.get("errors") or 0, summary.get("episodes") or 0
    first = (summary.get("error_examples") or ["unknown"])[0].splitlines()[0]
    if errors and not played:
        raise UserError(f"all {errors} episodes errored (first: {first}); see {cfg.out_dir}/summary.json")
    if errors / max(errors + played, 1) > cfg.max_error_rate:
        print(f"warning: {errors} of {errors + played} episodes errored, more than max_error_rate={cfg.max_error_rate} "
              f"(first: {first}); a re-run replays only them", file=sys.stderr)


def _consolidate(cfg) -> None:
    from evoharness_rl.experience.cli import consolidate_command

    consolidate_command(cfg)


def _bank(args: list[str]) -> None:
    from evoharness_rl.errors import UserError
    from evoharness_rl.experience.cli import bank_main

    try:
        bank_main(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)


def _report(cfg) -> None:
    from evoharness_rl.eval.report import report_command

    report_command(cfg)


def _view(cfg) -> None:
    from evoharness_rl.eval.view import view_command

    view_command(cfg)


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
    "view": _view,
}
