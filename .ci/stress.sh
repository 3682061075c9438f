#!/usr/bin/env bash
# The suite under load: pytest on the given tests (default: the tiers most exposed to timing: the
# servers, the shared store, streaming inserts) with busy loops beside it, `stress-ng --cpu $STRESS_CPUS`
# (default 2; Debian's stress-ng; `apt-get install -y stress-ng` as root), else as many Python busy
# loops. Two loops with the tests gave a load average of 2-5 on two cores; `STRESS_CPUS=6`, with
# a fresh clone's `make test` beside it, 7-10 (the level CI's machines reach when busy). The log,
# with the load average before, during and after, goes to evals/results/stress/<UTC time>.log.
#
#   .ci/stress.sh                                   # the exposed tiers
#   .ci/stress.sh tests/unit tests/integration      # any pytest arguments
#
# PY: the interpreter (default .venv/bin/python, as `make test`). Exits with pytest's status.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
STRESS_CPUS=${STRESS_CPUS:-2}
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false ANONYMIZED_TELEMETRY=False
if [ $# -eq 0 ]; then
  set -- tests/integration/test_serve.py tests/integration/test_serve_inserts.py tests/integration/test_serve_tenancy.py \
    tests/integration/test_serve_shared.py tests/integration/test_shared_store.py tests/integration/test_streaming.py \
    tests/integration/test_serve_hardening.py tests/integration/test_serve_trust.py tests/integration/test_serve_trust_shared.py
fi
mkdir -p evals/results/stress
LOG=evals/results/stress/$(date -u +%Y-%m-%dT%H%MZ).log

if command -v stress-ng >/dev/null; then
  LOADER="stress-ng --cpu $STRESS_CPUS"
  stress-ng --cpu "$STRESS_CPUS" --quiet &
else
  LOADER="$STRESS_CPUS Python busy loops"
  "$PY" -c "import multiprocessing as m
def spin():
    while True: pass
ps = [m.Process(target=spin, daemon=True) for _ in range($STRESS_CPUS)]
[p.start() for p in ps]; [p.join() for p in ps]" &
fi
STRESS=$!
sampler() { while sleep 30; do echo "# $(date -u +%H:%M:%S) load average: $(cut -d' ' -f1-3 /proc/loadavg)"; done; }
SAMPLES=$(mktemp)
sampler >"$SAMPLES" &
SAMPLER=$!
stop() {
  kill "$SAMPLER" 2>/dev/null; pkill -P "$STRESS" 2>/dev/null; kill "$STRESS" 2>/dev/null; wait 2>/dev/null
  cat "$SAMPLES" >>"$LOG"; rm -f "$SAMPLES"
}
trap stop EXIT

{
  echo "# .ci/stress.sh $* (load: $LOADER; $(getconf _NPROCESSORS_ONLN) cores; commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ', with local changes'))"
  echo "# $(date -u +%H:%M:%S) load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >>"$LOG"
sleep 20  # let the stressors raise the load average first
"$PY" -m pytest -q -p no:cacheprovider --durations=15 -rfE "$@" >>"$LOG" 2>&1
STATUS=$?
echo "# $(date -u +%H:%M:%S) load average after: $(cut -d' ' -f1-3 /proc/loadavg); pytest exit $STATUS; every 30 s meanwhile:" >>"$LOG"
echo "$LOG: pytest exit $STATUS"
exit $STATUS
