# Job helpers shared by scripts/demo.sh and scripts/diagnostics.sh (source it; needs $D, the run folder).
#
# Every job runs on one thread, at most two at a time (one per core): a model this small gains little from a
# second thread, and two OpenMP threads collapse (8x slower, measured) as soon as anything else wants a core.
# Logs: $D/logs/<job>.log; a failed job leaves $D/logs/<job>.failed.
# Progress: a running job's bars (evoharness_rl/runlog.py ProgressBar) are in $D/logs/<job>.progress; a monitor shows
# them on one line refreshed in place on a terminal, or prints them every PROGRESS_EVERY seconds (default 30) otherwise.
# Timing: every job and every `timed` step adds its seconds to $D/logs/timing.tsv; `write_timing` turns that into
# $D/report/timing.json.
start=${start:-$SECONDS}
MAX_JOBS=${MAX_JOBS:-2}
PROGRESS_EVERY=${PROGRESS_EVERY:-30}

stage() {
  [ -t 1 ] && printf '\r\033[K'  # clear the monitor's line
  printf '\n=== [%4ds] %s\n' $((SECONDS - start)) "$*"
}

# job <name> <command...>: run it with its output in $D/logs/<name>.log; a failure leaves <name>.failed.
job() {
  local name=$1 t0=$SECONDS; shift
  if ! EVOHARNESS_PROGRESS_FILE="$D/logs/$name.progress" OMP_NUM_THREADS=1 "$@" > "$D/logs/$name.log" 2>&1; then
    echo "$name failed; see $D/logs/$name.log" >&2
    touch "$D/logs/$name.failed"
  fi
  rm -f "$D/logs/$name.progress" "$D/logs/$name.progress.tmp"
  printf '%s\t%d\n' "$name" $((SECONDS - t0)) >> "$D/logs/timing.tsv"
}

# timed <name> <command...>: run a step in the foreground, adding its seconds to the timing.
timed() {
  local name=$1 t0=$SECONDS; shift
  "$@"
  printf '%s\t%d\n' "$name" $((SECONDS - t0)) >> "$D/logs/timing.tsv"
}

# progress_line: "<job>: <its bars>" for every running job that reports progress, joined by "  ||  ".
progress_line() {
  local f line out=""
  for f in "$D"/logs/*.progress; do
    [ -f "$f" ] || continue
    line=$(head -n 1 "$f" 2>/dev/null) || continue
    [ -n "$line" ] || continue
    out+="${out:+  ||  }$(basename "$f" .progress): $line"
  done
  printf '%s' "$out"
}

# monitor: runs beside the script (started below, outside the job table, so `wait` and the slots ignore it).
monitor() {
  local line shown="" last=$SECONDS width
  while sleep 2 && kill -0 "$$" 2>/dev/null; do  # ends with the script, even one killed by SIGKILL
    line=$(progress_line)
    if [ -t 1 ]; then
      width=$(tput cols 2>/dev/null || echo 120)
      [ -z "$line" ] && [ -z "$shown" ] && continue
      printf '\r\033[K%s' "${line:0:$((width - 1))}"
      shown=$line
    elif [ -n "$line" ] && (( SECONDS - last >= PROGRESS_EVERY )); then
      printf '    [%4ds] %s\n' $((SECONDS - start)) "$line"
      last=$SECONDS
    fi
  done
}

# write_timing <file>: {"total_s", "stages": {name: seconds}, "cpu", "commit"} for this invocation's steps.
write_timing() {
  mkdir -p "$(dirname "$1")"
  python3 - "$D/logs/timing.tsv" "$1" $((SECONDS - start)) <<'PY'
import json, os, subprocess, sys
rows, out, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
stages = {}
if os.path.exists(rows):
    for line in open(rows, encoding="utf-8"):
        name, seconds = line.rstrip("\n").split("\t")
        stages[name] = stages.get(name, 0) + int(seconds)
cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo", encoding="utf-8")
            if line.startswith("model name")), "unknown")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
data = {"total_s": total, "stages": stages, "cpu": cpu, "cores": os.cpu_count(), "commit": commit or "unknown"}
with open(out + ".tmp", "w", encoding="utf-8") as f:
    f.write(json.dumps(data, indent=2) + "\n")
os.replace(out + ".tmp", out)
PY
}

# launch <name> <command...>: start a job in the background once one of the MAX_JOBS slots is free.
launch() {
  while (( $(jobs -rp | wc -l) >= MAX_JOBS )); do wait -n || true; done
  stage "start $1 (log: $D/logs/$1.log)"
  job "$@" &
}

# after <file> <job>: wait (running jobs go on) until <job> has written <file>; stop if it failed. So a job can
# start as soon as the one it needs is done, while the others still run.
after() {
  while [ ! -f "$1" ]; do
    if [ -z "$(jobs -rp)" ] && [ ! -f "$1" ]; then  # (checked again: the job may have written it just now)
      [ -f "$D/logs/$2.failed" ] || echo "$2 finished without writing $1" >&2
      finished
      exit 1
    fi
    wait -n || true
  done
}

# finished: wait for every running job; stop if one failed.
finished() {
  wait
  if compgen -G "$D/logs/*.failed" > /dev/null; then exit 1; fi
}

mkdir -p "$D/logs"
rm -f "$D"/logs/*.failed "$D"/logs/*.progress "$D/logs/timing.tsv"
monitor &
MONITOR_PID=$!
disown "$MONITOR_PID"
trap 'kill "$MONITOR_PID" 2>/dev/null; [ -t 1 ] && printf "\r\033[K"' EXIT
