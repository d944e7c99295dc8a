"""Do two GRPO runs with one seed agree? The peer check's `choice` run twice per lag, compared.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/repro_check.py --json repro.json      # ~2 min

For grpo.max_staleness 0 and 1: two runs of `peer_check.run_ours` (seed 0, `--updates` updates,
one warm start) in one process. Reports whether every update's success rate is the same and the
largest difference between the two final checkpoints' weights. What is expected (docs/async.md):
the same tasks and draws, and weights equal up to the float noise of the hf engine's decode
batches, which form as environments answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--json", help="write the results to this JSON file")
    args = parser.parse_args(argv)

    import torch
    from safetensors.torch import load_file

    import peer_check
    from evoharness_rl.runlog import set_progress

    torch.set_num_threads(1)
    set_progress(False)
    root = Path(tempfile.mkdtemp(prefix="repro_check_"))
    warm = peer_check.warm_start(root / "models")
    results: dict = {"updates": args.updates, "command": " ".join(sys.argv)}
    for lag in (0, 1):
        runs = [peer_check.run_ours(warm, 0, args.updates, root / f"k{lag}_{i}", max_staleness=lag) for i in (0, 1)]
        a, b = (load_file(str(root / f"k{lag}_{i}" / "final" / "model.safetensors")) for i in (0, 1))
        results[f"max_staleness_{lag}"] = {
            "same_success": runs[0]["success"] == runs[1]["success"],
            "max_weight_diff": max((a[name] - b[name]).abs().max().item() for name in a),
            "success": [runs[0]["success"], runs[1]["success"]],
        }
        r = results[f"max_staleness_{lag}"]
        print(f"max_staleness={lag}: same success every update: {r['same_success']}; largest weight difference "
              f"{r['max_weight_diff']:.2e}", flush=True)
    if args.json:
        from evoharness_rl.fileio import atomic_write_json

        atomic_write_json(args.json, results)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
