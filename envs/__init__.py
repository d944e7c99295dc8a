"""Environment adapters (installed as `evoharness_rl.envs`) and the one registry that finds them.

Each environment is one folder with an adapter implementing `base.Environment`, registered
here by name with where its parts live (`EnvEntry`), written as "module:attribute" so
that they import lazily: a missing optional dependency only matters for the environment
that needs it. Everything else asks this registry, never an env's module by name:

    env = make_env(cfg.env)                 # one instance in this process
    factory = env_factory(cfg.env)          # a picklable zero-argument builder for worker processes
    spec = env_spec("alfworld")             # its EnvSpec (prompts, prompt version) without building it
    path = prepare_env(cfg.env)             # `evoharness-rl prepare`: write the env's generated data
    register_env("myenv", "my_pkg.my_env:build")   # a new environment (tests register theirs)

tests/test_imports.py checks that no other module looks an environment up by name.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional, Union

from evoharness_rl.envs.base import Environment, EnvSpec, StepResult, Task, Teacher
from evoharness_rl.errors import UserError

__all__ = ["Environment", "EnvSpec", "StepResult", "Task", "Teacher", "EnvEntry", "make_env", "env_factory",
           "register_env", "env_names", "env_spec", "prepare_env", "env_part"]

Builder = Callable[[Any], Environment]
Ref = Union[str, Callable[..., Any], EnvSpec, None]  # "module:attribute", or the object itself


@dataclass(frozen=True)
class EnvEntry:
    """Where one environment's parts live; only `builder` is required."""

    builder: Union[str, Builder]  # env_cfg -> Environment
    spec: Ref = None  # its EnvSpec, or a zero-argument function returning it (read without building the env)
    prepare: Ref = None  # env_cfg -> Path: writes the env's generated data (`evoharness-rl prepare`)
    grounding: Ref = None  # () -> the Experience grounding of the heuristic consolidator (generic when None)
    tokenizer_text: Ref = None  # () -> base.TokenizerText: its part of `init-model`'s tokenizer training text (None:
    # none, so registering an environment never changes the tokenizer, nor the models, of the others)


_REGISTRY: dict[str, EnvEntry] = {
    "alfworld": EnvEntry(
        builder="evoharness_rl.envs.alfworld.adapter:AlfworldEnv.from_config",
        spec="evoharness_rl.envs.alfworld.prompts:alfworld_spec",
        prepare="evoharness_rl.envs.alfworld.prepare:prepare",
        grounding="evoharness_rl.envs.alfworld.grounding:make_grounding",
        tokenizer_text="evoharness_rl.envs.alfworld.prompts:tokenizer_text",
    ),
    "webshop": EnvEntry(
        builder="evoharness_rl.envs.webshop.adapter:make_webshop_env",
        spec="evoharness_rl.envs.webshop.prompts:WEBSHOP_SPEC",
        prepare="evoharness_rl.envs.webshop.catalogue:prepare",
        grounding="evoharness_rl.envs.webshop.grounding:make_grounding",
        tokenizer_text="evoharness_rl.envs.webshop.prompts:tokenizer_text",
    ),
    "diagnostics": EnvEntry(  # one harness capability per task, each with a control (docs/diagnostics.md)
        builder="evoharness_rl.envs.diagnostics.tasks:make_diagnostics_env",
        spec="evoharness_rl.envs.diagnostics.prompts:DIAGNOSTICS_SPEC",
        grounding="evoharness_rl.envs.diagnostics.grounding:make_grounding",
    ),
    "webarena": EnvEntry(
        builder="evoharness_rl.envs.webarena:make_webarena_env",
        spec="evoharness_rl.envs.webarena.prompts:WEBARENA_SPEC",
        prepare="evoharness_rl.envs.webarena.data:prepare",  # the local sites' database (the real backend needs none)
        tokenizer_text="evoharness_rl.envs.webarena.prompts:tokenizer_text",
    ),
    "choice": EnvEntry(  # no tokenizer text: init-model's tokenizer (and model) stay as they are
        builder="evoharness_rl.envs.choice:make_choice_env",
        spec="evoharness_rl.envs.choice.adapter:SPEC",
    ),
}


def register_env(name: str, builder: Union[str, Builder], **parts: Ref) -> None:
    """Make `env.name=<name>` build environments with `builder(env_cfg)`; `parts` are `EnvEntry`'s other fields."""
    _REGISTRY[name] = EnvEntry(builder, **parts)


def env_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def _resolve(ref: Ref) -> Any:
    if isinstance(ref, str):
        module, _, attribute = ref.partition(":")
        return functools.reduce(getattr, attribute.split("."), importlib.import_module(module))
    return ref


def _entry(name: str) -> EnvEntry:
    if name not in _REGISTRY:
        raise ValueError(f"env.name={name!r} has no adapter; registered environments: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def env_part(name: str, part: str) -> Any:
    """One part of a registered environment (`EnvEntry` field), imported on first use; None when it has none."""
    return _resolve(getattr(_entry(name), part))


def env_builder(name: str) -> Builder:
    """The builder registered under `name`, imported on first use."""
    return env_part(name, "builder")


def env_factory(env_cfg: Any) -> Callable[[], Environment]:
    """A zero-argument, picklable builder of the configured environment (for `EnvPool` workers).

    The builder is resolved here, so a worker process imports the adapter's module by
    itself and needs no registration of its own."""
    return functools.partial(env_builder(env_cfg.name), env_cfg)


def make_env(env_cfg: Any) -> Environment:
    """Build the adapter named by `env_cfg.name` from an `EnvConfig`."""
    return env_factory(env_cfg)()


def env_spec(name: str, env_cfg: Any = None) -> Optional[EnvSpec]:
    """The `EnvSpec` of `name`: the registered one, else (given `env_cfg`) the spec of a built env, else None."""
    if name not in _REGISTRY:
        return None
    spec = env_part(name, "spec")
    if callable(spec):
        spec = spec()
    if spec is None and env_cfg is not None:
        env = make_env(replace(env_cfg, name=name))
        try:
            spec = env.spec
        finally:
            env.close()
    return spec


def prepare_env(env_cfg: Any) -> Path:
    """Write the generated data of `env_cfg.name` (games, catalogue) and return where it is."""
    prepare = env_part(env_cfg.name, "prepare")
    if prepare is None:
        with_data = [name for name, entry in _REGISTRY.items() if entry.prepare is not None]
        raise UserError(f"env.name={env_cfg.name!r} has no embedded data to prepare ({', '.join(with_data)} do)")
    return Path(prepare(env_cfg))
