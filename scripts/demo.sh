#!/usr/bin/env bash
# `make demo`: the main job end to end on the embedded default (configs/experiment/demo.yaml).
#
#   1. prepare    generated ALFWorld games (720 train / 108 valid_seen / 108 valid_unseen) on the real engine
#   2. init-model a tiny local tokenizer + Qwen3-architecture model
#   3. collect    scripted-teacher traces with the BPE interface, the Experience bank evolving online
#                 between windows of episodes (so SFT sees real recalled entries), successful episodes only
#   4. sft        full-parameter SFT from scratch, merged checkpoint
#   5. grpo       cost-aware GRPO from the SFT checkpoint, starting from the teacher's bank and
#                 consolidating it between rollout batches
#   6. eval       greedy, every task of valid_seen and valid_unseen, for five rows: the untrained model,
#                 SFT and GRPO each without a bank and with GRPO's evolved bank
#   7. report     outputs/demo/report/{report.md,table.json,table.md} and plots
#   8. site       outputs/demo/site/index.html: every run and episode in a browser (`evoharness-rl view`)
#
# Running stages show their progress on one line (scripts/jobs.sh); outputs/demo/report/timing.json has the
# seconds of every stage this invocation ran, the CPU and the commit.
# Stages whose output already exists are skipped, so an interrupted demo resumes.
# DEMO_DIR (default outputs/demo) and extra Hydra overrides ("$@") are passed to every stage.
set -euo pipefail
cd "$(dirname "$0")/.."
D=${DEMO_DIR:-outputs/demo}
SIZE=${DEMO_MODEL_SIZE:-tiny}
PY=.venv/bin/python
CLI=("$PY" -m evoharness_rl)
COMMON=(experiment=demo "env.data_dir=$D/data" "$@")
source scripts/jobs.sh  # stage, job, launch, finished: one thread a job, two jobs at a time

stage "prepare ALFWorld games"
timed prepare "${CLI[@]}" prepare "${COMMON[@]}" "out_dir=$D/prepare"

stage "build a $SIZE local model"
[ -f "$D/model/config.json" ] || timed init-model "${CLI[@]}" init-model "size=$SIZE" "out=$D/model" "out_dir=$D/init-model"

stage "collect scripted-teacher traces (adaptive BPE use, Experience evolving online)"
[ -f "$D/collect/summary.json" ] || timed collect "${CLI[@]}" collect "${COMMON[@]}" policy=scripted split=train \
  experience.evolve=online "out_dir=$D/collect"

# evaluate <name> <model dir> <bank file or null>: greedy (the eval default), every task of both splits.
evaluate() {
  local name=$1 model=$2 bank=$3 split
  for split in valid_seen valid_unseen; do
    [ -f "$D/eval_${name}_${split}/summary.json" ] && continue
    launch "eval_${name}_${split}" "${CLI[@]}" eval "${COMMON[@]}" "model.path=$model" policy=hf "split=$split" \
      "experience.bank=$bank" env.num_workers=1 "out_dir=$D/eval_${name}_${split}"
  done
}

[ -f "$D/sft/merged/config.json" ] || launch sft "${CLI[@]}" sft "${COMMON[@]}" "model.path=$D/model" \
  "sft.data=$D/collect" "out_dir=$D/sft" resume=true
evaluate untrained_none "$D/model" null
finished

[ -f "$D/grpo/final/config.json" ] || launch grpo "${CLI[@]}" grpo "${COMMON[@]}" "model.path=$D/sft/merged" \
  policy=hf "experience.bank=$D/collect/bank.json" "out_dir=$D/grpo" resume=true
evaluate sft_none "$D/sft/merged" null
# The rows below need GRPO's checkpoint or its evolved bank.
while [ ! -f "$D/grpo/final/config.json" ]; do
  if compgen -G "$D/logs/*.failed" > /dev/null; then finished; fi
  [ -n "$(jobs -rp)" ] || { echo "GRPO ended without $D/grpo/final; see $D/logs/grpo.log" >&2; exit 1; }
  wait -n || true
done
BANK="$D/grpo/final/bank.json"
evaluate grpo_none "$D/grpo/final" null
evaluate sft_evolved "$D/sft/merged" "$BANK"
evaluate grpo_evolved "$D/grpo/final" "$BANK"
finished

stage "report"
runs=$(printf "$D/eval_%s," {untrained_none,sft_none,sft_evolved,grpo_none,grpo_evolved}_{valid_seen,valid_unseen})
timed report "${CLI[@]}" report "runs=[${runs}$D/grpo]" "out_dir=$D/report" > /dev/null
"$PY" scripts/demo_table.py "$D"
stage "site"
timed site "${CLI[@]}" view "runs=[$D/grpo,${runs%,}]" "out_dir=$D/site" > /dev/null
write_timing "$D/report/timing.json"
printf '\nDemo finished in %d s. Report: %s/report/report.md (time per stage: %s/report/timing.json); site: %s/site/index.html\n' \
  $((SECONDS - start)) "$D" "$D" "$D"
