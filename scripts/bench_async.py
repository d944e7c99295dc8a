"""Seconds per GRPO update, synchronous (grpo.max_staleness=0) next to asynchronous (=1), on the same work.

    python scripts/bench_async.py --json bench_async.json            # after `make demo` (its SFT checkpoint)
    python scripts/bench_async.py --tasks choice --updates 4         # no demo needed

- `alfworld`: `make demo`'s GRPO (configs/experiment/demo.yaml: 8 tasks x 4, its horizon and
  batch sizes) from its SFT checkpoint (`--demo-dir`, default outputs/demo: the games in
  data/, the policy in sft/merged, the teacher's bank in collect/).
- `choice`: the peer check's settings (scripts/peer_check.py: 30 prompts x 4, one AdamW step per
  update) from its warm start.

Each run is a real `run_grpo` of `--updates` updates with the hf backend, one torch thread.
The two settings alternate (sync, async, sync, async, ... over `--rounds` rounds), so machine
noise hits both alike. The figure kept is a run's mean `update_s` (wait + train + consolidate:
one update's wall time, the first batch's fill included), median over rounds.
`async_vs_sync` is async seconds over sync seconds (< 1: asynchronous is faster).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["alfworld", "choice"], choices=["alfworld", "choice"])
    parser.add_argument("--updates", type=int, default=6, help="updates per run (the demo's GRPO has 6)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each setting, alternating")
    parser.add_argument("--demo-dir", default="outputs/demo", help="a finished `make demo` (alfworld)")
    parser.add_argument("--json", help="write the results to this JSON file")
    return parser.parse_args(argv)


def alfworld_run(args, out: Path, staleness: int) -> float:
    from bench_layouts import compose

    from evoharness_rl.grpo.trainer import run_grpo

    demo = Path(args.demo_dir)
    model, bank = demo / "sft" / "merged", demo / "collect" / "bank.json"
    if not (model / "config.json").exists():
        sys.exit(f"bench_async.py: no SFT checkpoint at {model}; run `make demo` first (or --tasks choice)")
    cfg = compose(["experiment=demo", f"env.data_dir={demo / 'data'}", f"model.path={model}", "policy=hf",
                   f"experience.bank={bank if bank.exists() else 'null'}", f"grpo.updates={args.updates}",
                   f"grpo.save_every={args.updates}", f"grpo.max_staleness={staleness}", "logger.progress=false",
                   f"out_dir={out}"])
    run_grpo(cfg)
    return _seconds_per_update(out)


def choice_run(args, out: Path, staleness: int, warm: Path) -> float:
    import peer_check

    peer_check.run_ours(warm, 0, args.updates, out, max_staleness=staleness)
    return _seconds_per_update(out)


def _seconds_per_update(out: Path) -> float:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return statistics.fmean(row["update_s"] for row in rows if "update_s" in row)


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch

    from evoharness_rl.runlog import cpu_model, set_progress

    torch.set_num_threads(1)
    set_progress(False)
    root = Path(tempfile.mkdtemp(prefix="bench_async_"))
    results: dict = {"cpu": cpu_model(), "updates": args.updates, "rounds": args.rounds, "command": " ".join(sys.argv)}
    warm = None
    if "choice" in args.tasks:
        import peer_check

        warm = peer_check.warm_start(root / "choice_models")
    for task in args.tasks:
        seconds: dict[int, list[float]] = {0: [], 1: []}
        for r in range(args.rounds):
            for staleness in (0, 1):
                out = root / f"{task}_k{staleness}_r{r}"
                run = alfworld_run(args, out, staleness) if task == "alfworld" else choice_run(args, out, staleness, warm)
                seconds[staleness].append(run)
                print(f"{task} k={staleness} round {r}: {run:.2f} s per update", flush=True)
        sync, ahead = statistics.median(seconds[0]), statistics.median(seconds[1])
        results[task] = {"sync_s_per_update": sync, "async_s_per_update": ahead, "async_vs_sync": ahead / sync,
                         "runs": {"sync": seconds[0], "async": seconds[1]}}
        print(f"{task}: sync {sync:.2f} s, async {ahead:.2f} s per update; async_vs_sync {ahead / sync:.2f}", flush=True)
    if args.json:
        from evoharness_rl.fileio import atomic_write_json

        atomic_write_json(args.json, results)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
