"""`evoharness-rl prepare env=alfworld`: generate the games once, then reuse them.

    root = prepare(cfg.env)    # <data_dir>/alfworld/<size>-seed<seed>/{train,valid_seen,valid_unseen}/...

The folder is written under a temporary name and moved into place whole; its
`manifest.json` (parameters, per-split counts, time taken) and the `.done` marker are
written last, so an interrupted run never looks finished. A second call with the same
parameters returns at once; changed parameters regenerate the folder.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from evoharness_rl.envs.alfworld import generator
from evoharness_rl.fileio import atomic_replace_dir, atomic_write_json, atomic_write_text
from evoharness_rl.runlog import ProgressBar

GENERATOR_VERSION = 1  # bump when generated games change for the same parameters (invalidates caches)
DONE_MARKER = ".done"
log = logging.getLogger(__name__)


def generated_root(env_cfg: Any) -> Path:
    """Where `prepare` writes the games for this config."""
    a = env_cfg.alfworld
    return Path(env_cfg.data_dir).expanduser() / "alfworld" / f"{a.size}-seed{a.generator_seed}"


def parameters(env_cfg: Any) -> dict[str, Any]:
    """Everything the generated games depend on (the cache key)."""
    a = env_cfg.alfworld
    return {
        "generator_version": GENERATOR_VERSION,
        "size": a.size,
        "seed": a.generator_seed,
        "expert": a.expert,
        "counts": {"train": a.train_games, "valid_seen": a.valid_seen_games, "valid_unseen": a.valid_unseen_games},
    }


def is_prepared(root: Path, params: dict[str, Any] | None = None) -> bool:
    """Whether `root` holds a finished generation (with exactly `params`, if given)."""
    marker = Path(root) / DONE_MARKER
    if not marker.is_file():
        return False
    return params is None or json.loads(marker.read_text(encoding="utf-8")) == params


def prepare(env_cfg: Any, workers: int | None = None) -> Path:
    """Generate (or reuse) the ALFWorld games for `env_cfg`; returns the data root."""
    root = generated_root(env_cfg)
    params = parameters(env_cfg)
    if is_prepared(root, params):
        return root
    counts = {split: n for split, n in params["counts"].items() if n > 0}
    tmp = root.with_name(f".{root.name}.tmp.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    start = time.time()
    log.info("generating ALFWorld games %s into %s", counts, root)
    with ProgressBar(sum(counts.values()), description="ALFWorld games") as bar:
        ids = generator.write_splits(tmp, counts, params["size"], params["seed"], params["expert"], workers,
                                     on_game=lambda _game: bar.advance())
    elapsed = round(time.time() - start, 1)
    per_split = {split: sum(1 for i in ids if i.startswith(split + "/")) for split in counts}
    atomic_write_json(tmp / "manifest.json", {**params, "games": per_split, "seconds": elapsed})
    atomic_write_text(tmp / DONE_MARKER, json.dumps(params))
    root.parent.mkdir(parents=True, exist_ok=True)
    atomic_replace_dir(tmp, root)
    log.info("generated %d games in %.1f s", len(ids), elapsed)
    return root

