"""Environment adapters (installed as `evoharness_rl.envs`) and the one registry that finds them.

Each environment is one folder with an adapter implementing `base.Environment`, registered
here by name with its builder (a function of the `EnvConfig`), written as
"module:attribute" so that adapters import lazily: a missing optional dependency only
matters for the environment that needs it. Everything else asks this registry:

    env = make_env(cfg.env)                 # one instance in this process
    factory = env_factory(cfg.env)          # a picklable zero-argument builder for worker processes
    register_env("myenv", "my_pkg.my_env:build")   # a new environment (tests register theirs)
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, Union

from evoharness_rl.envs.base import Environment, EnvSpec, StepResult, Task, Teacher

__all__ = ["Environment", "EnvSpec", "StepResult", "Task", "Teacher", "make_env", "env_factory", "register_env",
           "env_names"]

Builder = Callable[[Any], Environment]
_REGISTRY: dict[str, Union[str, Builder]] = {
    "alfworld": "evoharness_rl.envs.alfworld.adapter:AlfworldEnv.from_config",
    "webshop": "evoharness_rl.envs.webshop.adapter:make_webshop_env",
    "webarena": "evoharness_rl.envs.webarena.adapter:make_webarena_env",
}


def register_env(name: str, builder: Union[str, Builder]) -> None:
    """Make `env.name=<name>` build environments with `builder(env_cfg)` ("module:attribute" or a function)."""
    _REGISTRY[name] = builder


def env_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def env_builder(name: str) -> Builder:
    """The builder registered under `name`, imported on first use."""
    if name not in _REGISTRY:
        raise ValueError(f"env.name={name!r} has no adapter; registered environments: {', '.join(_REGISTRY)}")
    builder = _REGISTRY[name]
    if isinstance(builder, str):
        module, _, attribute = builder.partition(":")
        builder = functools.reduce(getattr, attribute.split("."), importlib.import_module(module))
    return builder


def env_factory(env_cfg: Any) -> Callable[[], Environment]:
    """A zero-argument, picklable builder of the configured environment (for `EnvPool` workers).

    The builder is resolved here, so a worker process imports the adapter's module by
    itself and needs no registration of its own."""
    return functools.partial(env_builder(env_cfg.name), env_cfg)


def make_env(env_cfg: Any) -> Environment:
    """Build the adapter named by `env_cfg.name` from an `EnvConfig`."""
    return env_factory(env_cfg)()
