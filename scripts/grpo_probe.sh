#!/usr/bin/env bash
# One GRPO probe from the demo's SFT checkpoint: the demo's GRPO command with extra overrides, then greedy
# evaluation of every task of both validation splits without a bank (the demo's "GRPO, no bank" row).
#
#   scripts/grpo_probe.sh NAME [overrides...]     # e.g. scripts/grpo_probe.sh traj_s1 grpo.loss_agg=traj_mean seed=1
#   .venv/bin/python scripts/probe_table.py       # every probe under outputs/exp next to SFT without a bank
#
# Needs `make demo` once (the SFT checkpoint, the teacher's bank, the games, SFT's no-bank evaluations).
# One thread: run two probes side by side on a 2-core machine. Finished stages are skipped on a re-run.
set -uo pipefail
cd "$(dirname "$0")/.."
S=${DEMO_DIR:-outputs/demo}
N=${1:?usage: scripts/grpo_probe.sh NAME [overrides...]}; shift
O=${PROBE_DIR:-outputs/exp}/$N
[ -f "$S/sft/merged/config.json" ] || { echo "no SFT checkpoint at $S/sft/merged; run \`make demo\` first" >&2; exit 1; }
mkdir -p "$O"
export OMP_NUM_THREADS=1
CLI=(.venv/bin/python -m evoharness_rl)
if [ ! -f "$O/grpo/final/config.json" ]; then
  "${CLI[@]}" grpo experiment=demo "env.data_dir=$S/data" "model.path=$S/sft/merged" policy=hf \
    "experience.bank=$S/collect/bank.json" "out_dir=$O/grpo" logger.progress=false resume=true "$@" \
    > "$O/grpo.log" 2>&1 || { echo "$N: GRPO failed; see $O/grpo.log" >&2; exit 1; }
fi
for split in valid_seen valid_unseen; do
  [ -f "$O/eval_none_$split/summary.json" ] && continue
  "${CLI[@]}" eval experiment=demo "env.data_dir=$S/data" "model.path=$O/grpo/final" policy=hf "split=$split" \
    experience.bank=null env.num_workers=1 logger.progress=false "out_dir=$O/eval_none_$split" \
    > "$O/eval_$split.log" 2>&1 || { echo "$N: eval on $split failed; see $O/eval_$split.log" >&2; exit 1; }
done
echo "$N done: $O"
