#!/usr/bin/env bash
# Runs `make test` RUNS times (default 1), then `go test -race ./...` RACE_RUNS times (default
# 0), beside a CPU load that keeps every core busy, the way a shared CI runner or a laptop
# building something else is busy: the test gate must pass there. The race runs get
# `-timeout 30m`: the simulator's packages replay rows at larger time scales on a busy machine.
# The load is stress-ng where it is installed, else one shell busy loop per core, so that this
# needs nothing but bash. Prints each run's result and time, and the load average.
set -uo pipefail
runs=${RUNS:-1}
race_runs=${RACE_RUNS:-0}
cores=$(nproc)
pids=()
stop_load() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap stop_load EXIT
if command -v stress-ng >/dev/null; then
  stress-ng --cpu "$cores" --quiet & pids+=($!)
  echo "load: stress-ng --cpu $cores"
else
  for _ in $(seq "$cores"); do (while :; do :; done) & pids+=($!); done
  echo "load: $cores shell busy loops (stress-ng is not installed)"
fi
failed=0
for run in $(seq "$runs"); do
  start=$(date +%s)
  if make --no-print-directory test; then result=passed; else result=FAILED; failed=$((failed + 1)); fi
  echo "make test under load, run $run of $runs: $result in $(( $(date +%s) - start )) s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
for run in $(seq "$race_runs"); do
  start=$(date +%s)
  if go test -race -count=1 -timeout 30m ./...; then result=passed; else result=FAILED; failed=$((failed + 1)); fi
  echo "go test -race ./... under load, run $run of $race_runs: $result in $(( $(date +%s) - start )) s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "$((runs + race_runs - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
