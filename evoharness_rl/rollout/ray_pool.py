"""Environment workers as Ray actors (`env.pool=ray`): the pool contract of pool.py across machines.

Training stays on accelerate; only the environment side moves to Ray, because that is
what outgrows one machine first (WebArena needs a browser per live episode, an update
samples 128 trajectories). Each worker is one actor hosting many episodes, exactly like
a worker process of `EnvPool`: same commands, same replies, same failure rules, and
the routing and bookkeeping are shared (`pool.BasePool`).

Transport: every command is one actor call. A Ray actor runs the calls of one caller
in the order they were made, so a worker still answers its commands in order, and each
reply is available as soon as its command is done (the step timeout counts from the
last reply, as with processes). A dead actor fails its pending calls with
`RayActorError`; the pool then drops the actor and starts a new one.

Where the actors run: `env.ray_address` null joins the Ray instance this process
already started (a test, a notebook) or starts a local one; "auto" joins the cluster
of this node (`ray start` was run here); "HOST:PORT" or "ray://HOST:PORT" joins that
cluster. Actors reserve `env.ray_cpus_per_worker` CPUs each and are spread over the
nodes. Every node needs the project installed (the actors import it by name).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from evoharness_rl.envs.base import Environment
from evoharness_rl.errors import UserError
from evoharness_rl.rollout.pool import (DEAD, WORKER_HASH_SEED, BasePool, Command, Reply, _Worker, _WorkerState,
                                        prepare_worker_process)

CONNECT_TIMEOUT_S = 5.0  # how long a TCP probe of env.ray_address may take before the address counts as unreachable


class _EnvActor:
    """One Ray actor: the same worker state a worker process holds."""

    def __init__(self, env_factory: Callable[[], Environment]):
        prepare_worker_process()
        self.state = _WorkerState(env_factory)

    def pid(self) -> int:
        return os.getpid()

    def handle(self, cmd: Command) -> Reply:
        return self.state.handle(cmd)

    def close(self) -> None:
        self.state.close()


@dataclass
class _RayWorker(_Worker):
    actor: Any = None
    pid: int = 0
    calls: list = field(default_factory=list)  # (sequence number, ObjectRef) of the commands sent and not yet
    # answered, in order (an actor runs its calls one at a time, in order)
    death: str = ""  # why the actor died (Ray's words), once it has


def _ray():
    try:
        import ray
    except ImportError as err:
        raise UserError("env.pool=ray needs the ray package: pip install 'evoharness-rl[ray]' (make setup installs "
                        "it), or set env.pool=process") from err
    return ray


def connect(address: Optional[str]) -> bool:
    """Join (or start) the Ray instance for `address`; True when this call started it.

    An explicit HOST:PORT is probed over TCP first: `ray.init` itself retries an
    unreachable address for minutes before it fails."""
    ray = _ray()
    if ray.is_initialized():
        return False
    if address and address != "auto":
        host, _, port = address.removeprefix("ray://").rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
        except (OSError, ValueError) as err:
            raise UserError(f"env.ray_address={address!r}: no Ray cluster answers there ({err}); start one with "
                            "`ray start --head` and pass its address, or set env.ray_address=null for a local "
                            "instance") from err
    try:
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                 ignore_reinit_error=True)
    except ConnectionError as err:
        raise UserError(f"env.ray_address={address!r}: cannot join the Ray cluster ({err}); run `ray start --head` "
                        "on this node or set env.ray_address=null for a local instance") from err
    return True


class RayEnvPool(BasePool):
    """`num_workers` Ray actors hosting many episodes each (env.pool=ray)."""

    kind = "ray"

    def __init__(self, env_factory: Callable[[], Environment], num_workers: int = 2, step_timeout_s: float = 60.0,
                 address: Optional[str] = None, cpus_per_worker: float = 1.0):
        super().__init__(env_factory, num_workers, step_timeout_s)
        if cpus_per_worker < 0:
            raise ValueError(f"cpus_per_worker={cpus_per_worker} must be >= 0")
        self._started_ray = connect(address)
        ray = _ray()
        # PYTHONHASHSEED as for worker processes: the same (task, seed) episode plays the same on every node.
        hash_seed = os.environ.get("PYTHONHASHSEED", WORKER_HASH_SEED)
        self._actor_class = ray.remote(_EnvActor).options(
            num_cpus=cpus_per_worker, max_restarts=0, scheduling_strategy="SPREAD",
            runtime_env={"env_vars": {"PYTHONHASHSEED": hash_seed}},
        )
        self._workers = [self._launch(i) for i in range(num_workers)]
        pids = ray.get([w.actor.pid.remote() for w in self._workers])  # waits until every actor is up
        for worker, pid in zip(self._workers, pids):
            worker.pid = pid

    def worker_pids(self) -> list[int]:
        return [w.pid for w in self._workers]

    def _launch(self, index: int) -> _RayWorker:
        return _RayWorker(index, actor=self._actor_class.remote(self.env_factory))

    def _start(self, index: int) -> _RayWorker:
        worker = self._launch(index)
        worker.pid = _ray().get(worker.actor.pid.remote())
        return worker

    def _transmit(self, index: int, commands: list[tuple[int, Command]]) -> None:
        worker = self._workers[index]
        worker.calls.extend((seq, worker.actor.handle.remote(cmd)) for seq, cmd in commands)

    def _wait(self, indices: list[int], timeout: float) -> list[tuple[int, Any]]:
        ray = _ray()
        owner = {ref: i for i in indices for _, ref in self._workers[i].calls}
        if not owner:
            return []
        first, _ = ray.wait(list(owner), num_returns=1, timeout=timeout)
        if not first:
            return []
        ready, _ = ray.wait(list(owner), num_returns=len(owner), timeout=0)
        ready = set(ready) | set(first)
        arrived = []
        for i in indices:
            calls = self._workers[i].calls
            while calls and calls[0][1] in ready:
                seq, ref = calls.pop(0)
                try:
                    arrived.append((i, (seq, ray.get(ref))))
                except ray.exceptions.RayActorError as err:
                    self._workers[i].death = _death_detail(err)
                    arrived.append((i, DEAD))
                    break
        return arrived

    def _death(self, index: int) -> str:
        return f"Ray actor died: {self._workers[index].death or 'no detail'}"

    def _kill(self, index: int) -> None:
        worker = self._workers[index]
        worker.calls.clear()
        _ray().kill(worker.actor, no_restart=True)

    def _shutdown(self) -> None:
        ray = _ray()
        if not ray.is_initialized():
            return
        closing = [w.actor.close.remote() for w in self._workers]
        ray.wait(closing, num_returns=len(closing), timeout=5.0)
        for worker in self._workers:
            ray.kill(worker.actor, no_restart=True)
        if self._started_ray:
            ray.shutdown()


def _death_detail(err: Exception) -> str:
    """The one useful line of Ray's message about a dead actor (its exit type and detail)."""
    text = " ".join(str(err).split())
    marker = "Worker exit type:"
    if marker in text:
        text = text[text.index(marker):]
    return text.split(". Some common causes")[0][:300]
