#!/usr/bin/env bash
# `make diagnostics`: does cost-aware GRPO teach the policy *when* a harness call is worth its step?
# (configs/experiment/diagnostics.yaml; docs/diagnostics.md)
#
#   1. init-model  a tiny local model
#   2. collect     teacher banks of experience worlds 0 and 1, then the random-call teacher in each harness mode
#                  (env_only, always_on, adaptive) in world 0, starting from world 0's bank
#   3. sft         one policy per seed on all three collections (every task, variant and mode mixed)
#   4. grpo        one run per mode and seed from that seed's SFT checkpoint, in experience world 1 (vaults and doors
#                  the weights have never seen), the bank starting from 128 teacher episodes of world 1 and
#                  consolidated after every rollout batch
#   5. eval        greedy, valid_seen: SFT and GRPO of every mode and seed, without a bank and with GRPO's evolved one
#   6. report      outputs/diagnostics/report/{table.json,table.md,curves.json} and figures
#
# Running stages show their progress on one line (scripts/jobs.sh); outputs/diagnostics/report/timing.json has the
# seconds of every stage this invocation ran, the CPU and the commit.
# Stages whose output already exists are skipped, so an interrupted run resumes.
# DIAG_DIR (default outputs/diagnostics), DIAG_SEEDS (default "0 1 2"), DIAG_MODES (default all three),
# DIAG_TASKS (a Hydra list, default all three tasks) and extra Hydra overrides ("$@") reach every stage.
set -euo pipefail
cd "$(dirname "$0")/.."
D=${DIAG_DIR:-outputs/diagnostics}
SEEDS=${DIAG_SEEDS:-0 1 2}
MODES=${DIAG_MODES:-env_only always_on adaptive}
PY=.venv/bin/python
CLI=("$PY" -m evoharness_rl)
COMMON=(experiment=diagnostics "$@")
[ -n "${DIAG_TASKS:-}" ] && COMMON+=("env.diagnostics.tasks=$DIAG_TASKS")
# collect: experience world 0, 32 vaults (so weights cannot learn a door by heart)
COLLECT=(env.diagnostics.experience_world=0 env.diagnostics.experience_vaults=32)
source scripts/jobs.sh

stage "build a tiny local model"
[ -f "$D/model/config.json" ] || timed init-model "${CLI[@]}" init-model size=tiny "out=$D/model" "out_dir=$D/init-model"

# Teacher banks, one per experience world: what 128 teacher episodes saw of its vaults' doors (any explorer that
# opens them teaches the same facts). World 0's is the bank collect starts from, so every `recall` in the SFT traces
# returns its vault's door and the teacher's next move copies it (from an empty bank, the first traces' recalls came
# back empty and the teacher opened the right door anyway: SFT learned to ignore what recall returns, and copied a
# recalled door in 10 of 19 episodes). World 1's is the bank GRPO starts from (adaptive and always_on); GRPO
# consolidates more into it after every rollout batch.
BANK0=null BANK=null
if [[ -z "${DIAG_TASKS:-}" || "$DIAG_TASKS" == *experience* ]]; then
  BANK0="$D/bank_world0/bank.json" BANK="$D/bank_world1/bank.json"
  for world in 0 1; do
    world_args=()
    [ "$world" = 0 ] && world_args=("${COLLECT[@]}")
    [ -f "$D/bank_world$world/bank.json" ] || launch "bank_world$world" "${CLI[@]}" collect experiment=diagnostics "$@" \
      policy=scripted split=train harness.mode=adaptive experience.evolve=online "env.diagnostics.tasks=[experience]" \
      env.diagnostics.train_tasks=64 "${world_args[@]}" "out_dir=$D/bank_world$world"
  done
  finished
fi

for mode in $MODES; do
  bank=$BANK0
  [ "$mode" = env_only ] && bank=null  # env_only has no Experience to read
  [ -f "$D/collect/$mode/summary.json" ] || launch "collect_$mode" "${CLI[@]}" collect "${COMMON[@]}" \
    policy=scripted split=train "harness.mode=$mode" "experience.bank=$bank" experience.evolve=online "${COLLECT[@]}" \
    "out_dir=$D/collect/$mode"
done
finished

for seed in $SEEDS; do
  [ -f "$D/sft_s$seed/merged/config.json" ] || launch "sft_s$seed" "${CLI[@]}" sft "${COMMON[@]}" "seed=$seed" \
    "model.path=$D/model" "sft.data=$D/collect" "out_dir=$D/sft_s$seed" resume=true
done

# A seed's GRPO runs start as soon as its SFT is done, on the core a later seed's SFT leaves free.
for seed in $SEEDS; do
  after "$D/sft_s$seed/merged/config.json" "sft_s$seed"
  for mode in $MODES; do
    [ -f "$D/grpo_${mode}_s$seed/final/config.json" ] || launch "grpo_${mode}_s$seed" "${CLI[@]}" grpo \
      "${COMMON[@]}" "seed=$seed" "harness.mode=$mode" "model.path=$D/sft_s$seed/merged" policy=hf \
      "experience.bank=$BANK" "out_dir=$D/grpo_${mode}_s$seed" resume=true
  done
done

# evaluate <name> <model dir> <mode> <bank file or null>: greedy, every valid_seen task of every task and variant.
# Each evaluation starts as soon as its GRPO run is done (on a core the last GRPO runs leave free).
evaluate() {
  local name=$1 model=$2 mode=$3 bank=$4
  [ -f "$D/eval/$name/summary.json" ] && return
  after "$model/config.json" "$(basename "$(dirname "$model")")"
  launch "eval_$name" "${CLI[@]}" eval "${COMMON[@]}" "model.path=$model" policy=hf split=valid_seen \
    "harness.mode=$mode" "experience.bank=$bank" "out_dir=$D/eval/$name"
}
for seed in $SEEDS; do
  for mode in $MODES; do
    evaluate "sft_${mode}_s${seed}_none" "$D/sft_s$seed/merged" "$mode" null
    evaluate "grpo_${mode}_s${seed}_none" "$D/grpo_${mode}_s$seed/final" "$mode" null
    if [ "$mode" != env_only ]; then  # env_only has no Experience to read
      bank="$D/grpo_${mode}_s$seed/final/bank.json"
      evaluate "sft_${mode}_s${seed}_evolved" "$D/sft_s$seed/merged" "$mode" "$bank"
      evaluate "grpo_${mode}_s${seed}_evolved" "$D/grpo_${mode}_s$seed/final" "$mode" "$bank"
    fi
  done
done
finished

stage "report"
timed report "$PY" scripts/diagnostics_report.py "$D"
write_timing "$D/report/timing.json"
printf '\nDiagnostics finished in %d s. Report: %s/report/table.md (time per stage: %s/report/timing.json)\n' \
  $((SECONDS - start)) "$D" "$D"
