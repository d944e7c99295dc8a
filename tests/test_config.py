"""Every YAML composes onto the typed schema; invalid overrides fail naming the field."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from evoharness_rl.cli import config_dir
from evoharness_rl.config import Config, ConfigError, iter_field_docs, validate

CONFIGS = config_dir()
GROUPS = sorted(p.name for p in CONFIGS.iterdir() if p.is_dir() and any(p.glob("*.yaml")) and p.name != "accelerate" and p.name != "hydra")


def _compose(overrides):
    ConfigStore.instance().store(name="base_config", node=Config)
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["out_dir=unused", *overrides])
    return cfg


def _group_options():
    for group in GROUPS:
        for yaml in sorted((CONFIGS / group).glob("*.yaml")):
            yield group, yaml.stem


@pytest.mark.parametrize("group,option", list(_group_options()))
def test_every_yaml_composes_and_validates(group, option):
    overrides = [f"{group}={option}"]
    if group == "model" and option == "hf":
        overrides.append("model.path=some/checkpoint")
    if group == "policy" and option == "replay":
        overrides.append("policy.path=responses.json")
    cfg = _compose(overrides)
    obj = OmegaConf.to_object(cfg)
    assert isinstance(obj, Config)
    validate(obj)


SELECTORS = {"policy": "backend", "harness": "mode", "logger": "backend"}  # the field an option of the group selects


@pytest.mark.parametrize("group,option", [(g, o) for g, o in _group_options() if g not in ("env", "experiment")])
def test_an_option_states_only_what_it_changes(group, option):
    """Defaults are written once, in the dataclasses of evoharness_rl/config.py (the schema Hydra composes onto):
    an option's YAML repeats none of them, except the field it selects. Environments and experiments are exempt:
    they list their settings side by side, whole."""
    import yaml

    values = yaml.safe_load((CONFIGS / group / f"{option}.yaml").read_text()) or {}
    section = getattr(Config(), group)
    repeated = [key for key, value in values.items()
                if key != SELECTORS.get(group) and getattr(section, key, object()) == value]
    assert not repeated, f"configs/{group}/{option}.yaml repeats the schema defaults of {repeated}"


def test_env_groups_set_paper_defaults():
    webshop = OmegaConf.to_object(_compose(["env=webshop"]))
    assert (webshop.env.max_steps_eval, webshop.env.recall_k, webshop.grpo.mini_batch_trajectories) == (20, 6, 32)
    alfworld = OmegaConf.to_object(_compose([]))
    assert (alfworld.env.max_steps_train, alfworld.env.max_steps_eval, alfworld.reward.success_scale) == (70, 50, 10.0)


def test_webarena_sets_the_paper_table_10_values():
    cfg = OmegaConf.to_object(_compose(["env=webarena"]))
    assert (cfg.env.context, cfg.env.max_steps_eval, cfg.env.recall_k, cfg.env.webarena.backend) == (
        "accumulated", 15, 3, "local")
    assert cfg.grpo.horizon_curriculum == [8, 10, 15] and cfg.sft.epochs == 3.0
    assert (cfg.policy.max_prompt_tokens, cfg.policy.max_trajectory_tokens) == (2048, 8192)
    assert (cfg.reward.success_scale, cfg.reward.invalid_penalty, cfg.reward.repeat_penalty,
            cfg.reward.lambda_div_max, cfg.reward.lambda_eff) == (1.0, 0.01, 0.01, 0.02, 0.02)
    assert (cfg.grpo.group_size, cfg.grpo.prompts_per_update, cfg.grpo.mini_batch_trajectories,
            cfg.grpo.inner_epochs, cfg.policy.max_new_tokens) == (4, 32, 4, 2, 512)


ENVS = sorted(p.stem for p in (CONFIGS / "env").glob("*.yaml"))
ABLATIONS = {"no_diversity": ("lambda_div_max", 0.0), "no_efficiency": ("lambda_eff", 0.0)}


EXPERIMENTS = [None] + sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))


def test_every_reward_ablation_is_covered():
    assert sorted(ABLATIONS) == sorted(p.stem for p in (CONFIGS / "reward").glob("*.yaml") if p.stem != "default")


@pytest.mark.parametrize("experiment", EXPERIMENTS)
@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("ablation", sorted(ABLATIONS))
def test_a_reward_ablation_wins_over_the_env_and_experiment_defaults(env, ablation, experiment):
    """The env (and an experiment) set their reward values; a chosen ablation still zeroes its weight (and only
    that one), whatever the order of the overrides."""
    chosen = [f"env={env}"] + ([f"experiment={experiment}"] if experiment else [])
    base = OmegaConf.to_object(_compose(chosen)).reward
    ablated = OmegaConf.to_object(_compose(chosen + [f"reward={ablation}"])).reward
    assert ablated == OmegaConf.to_object(_compose([f"reward={ablation}"] + chosen)).reward
    field, value = ABLATIONS[ablation]
    assert getattr(ablated, field) == value and getattr(base, field) > 0
    others = {k: v for k, v in vars(base).items() if k != field}
    assert {k: v for k, v in vars(ablated).items() if k != field} == others


def test_accumulated_context_needs_room_for_one_completion_per_trajectory():
    obj = OmegaConf.to_object(_compose(["env=webarena", "policy.max_trajectory_tokens=100"]))
    with pytest.raises(ConfigError, match=r"policy\.max_trajectory_tokens=100 is below policy\.max_new_tokens=512"):
        validate(obj)
    validate(OmegaConf.to_object(_compose(["env=webshop", "policy.max_trajectory_tokens=100"])))  # per_turn: unused


def test_a_command_line_override_beats_the_env_defaults():
    cfg = OmegaConf.to_object(_compose(["env=webshop", "env.recall_k=2"]))
    assert cfg.env.recall_k == 2


@pytest.mark.parametrize(
    "override,field",
    [
        ("harness.mode=bogus", "harness.mode"),
        ("policy.backend=gpt", "policy.backend"),
        ("env.max_steps_eval=-1", "env.max_steps_eval"),
        ("grpo.group_size=0", "grpo.group_size"),
        ("policy.top_p=1.5", "policy.top_p"),
        ("env.context=sometimes", "env.context"),
        ("port=70000", "port"),
        ("env.prompt_style=terse", "env.prompt_style"),
        ("policy.teacher_slip_rate=1.5", "policy.teacher_slip_rate"),
        ("harness.schedule=reverse", "harness.schedule"),
        ("harness.schedule=timing_shuffle", "harness.schedule_source"),  # a control needs its source run
        ("harness.schedule_retries=-1", "harness.schedule_retries"),
        ("harness.schedule=type_shuffle harness.schedule_source=x harness.mode=env_only", "harness.mode"),
        ("experience.validate_tasks=0", "experience.validate_tasks"),
        ("experience.validate_margin=-0.1", "experience.validate_margin"),
    ],
)
def test_invalid_values_name_the_field(override, field):
    obj = OmegaConf.to_object(_compose(override.split()))
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        validate(obj)


def test_schedule_ablations_are_eval_only():
    obj = OmegaConf.to_object(_compose(["harness.schedule=frequency_matched", "harness.schedule_source=runs/x"]))
    assert validate(obj).harness.schedule == "frequency_matched"  # eval (the default command) accepts it
    obj.command = "grpo"
    with pytest.raises(ConfigError, match=r"harness\.schedule=frequency_matched is an eval ablation"):
        validate(obj)


def test_unknown_key_and_wrong_type_fail_at_compose():
    with pytest.raises(Exception, match="bogus"):
        _compose(["harness.bogus=1"])
    with pytest.raises(Exception, match="max_steps_eval"):
        OmegaConf.to_object(_compose(["env.max_steps_eval=many"]))


def test_every_field_is_documented():
    undocumented = [name for name, _, doc in iter_field_docs(Config) if not doc]
    assert undocumented == []


def test_cli_rejects_a_bad_mode_quickly_without_heavy_imports(tmp_path):
    start = time.time()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    code = (
        "import sys\n"
        "from evoharness_rl.cli import main\n"
        "try:\n"
        f"    main(['eval', 'env=alfworld', 'harness.mode=bogus', 'out_dir={tmp_path / 'run'}'])\n"
        "finally:\n"
        "    heavy = [m for m in ('torch', 'transformers', 'vllm', 'alfworld', 'textworld') if m in sys.modules]\n"
        "    print('HEAVY', heavy, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    elapsed = time.time() - start
    assert proc.returncode != 0
    assert "harness.mode" in proc.stderr and "env_only, always_on, adaptive" in proc.stderr
    assert "HEAVY []" in proc.stderr
    assert elapsed < 30


def test_cli_help_lists_every_command():
    proc = subprocess.run([sys.executable, "-m", "evoharness_rl", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for command in ("prepare", "collect", "sft", "grpo", "eval", "consolidate", "report", "init-model"):
        assert command in proc.stdout
