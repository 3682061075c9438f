#!/usr/bin/env bash
# The install as a user meets it, outside the source tree (`make dist-check`):
#  1. build the sdist and the wheel of the three distributions (`python -m build`: the wheel is
#     built from the sdist, so a file missing from the sdist fails here too);
#  2. `twine check --strict` on all six files;
#  3. check that every tracked file of each package (policies, vocabularies, prompts, the demo
#     corpus, py.typed, ...) is inside its wheel;
#  4. create a fresh venv, install the CPU build of torch first (as `make install` does), then the
#     three built wheels, the core with its [store] extra and the [llama-index] and [langchain]
#     extras that name the integrations (from the built files: not editable, not from the tree);
#  5. from a directory outside the repository: import the three packages (and check they come
#     from the fresh venv), `car-rag --version`, `car-rag fanin --help` (a harness command, found
#     through the wheel's entry points), `HF_HUB_OFFLINE=1 car-rag demo`.
# Everything is written under a temporary directory (see tmp_base), removed at the end (KEEP=1
# keeps it).
#
# Environment: PY, the Python that runs `build` and `twine` (default .venv/bin/python, which
# `make dist-check` gives both); BASE_PY, the interpreter of the fresh venv (default python3);
# TORCH and TORCH_FROM, the torch requirement and where it comes from, WHEELS, pip's --find-links
# for the rest (`make dist-check` passes the Makefile's; the defaults below are the same).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

PY="${PY:-$ROOT/.venv/bin/python}"
BASE_PY="${BASE_PY:-python3}"
TORCH="${TORCH:-torch==2.13.0}"
if [[ -z "${WHEELS+x}" ]]; then
    WHEELS=""
    [[ -d /opt/wheels ]] && WHEELS="--find-links /opt/wheels"
fi
TORCH_FROM="${TORCH_FROM:-${WHEELS:---index-url https://download.pytorch.org/whl/cpu}}"
DISTS=(. integrations/llama-index-retrievers-car integrations/langchain-car)

# The fresh venv is ~2 GB in ~55,000 files: on a busy disk deleting it alone takes a minute or
# two, so it goes to /dev/shm (RAM) when that has room and so does memory; DIST_CHECK_TMP overrides.
tmp_base() {
    local shm_kb mem_kb
    shm_kb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $4}')
    mem_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null)
    if [[ -w /dev/shm && "${shm_kb:-0}" -gt 6000000 && "${mem_kb:-0}" -gt 8000000 ]]; then
        echo /dev/shm
    else
        echo "${TMPDIR:-/tmp}"
    fi
}
WORK="$(mktemp -d "${DIST_CHECK_TMP:-$(tmp_base)}/car-rag-dist-check.XXXXXX")"
cleanup() { if [[ "${KEEP:-0}" == 1 ]]; then echo "kept: $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT
DIST="$WORK/dist"
VENV="$WORK/venv"
step() { printf '\n== %s (%ss)\n' "$*" "$SECONDS"; }

step "build: sdist and wheel of ${#DISTS[@]} distributions, from a copy of the tree's files"
# From a copy holding only the files git tracks or would track (.gitignore): setuptools reuses an
# existing *.egg-info/SOURCES.txt (which `make install`'s editable installs leave in the tree), so
# a build in place can ship files the package data no longer names.
SRC="$WORK/src"
mkdir -p "$SRC"
git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do [[ -e "$f" ]] && printf '%s\0' "$f"; done \
    | tar --null -T - -cf - | tar -xf - -C "$SRC"
for d in "${DISTS[@]}"; do
    "$PY" -m build --outdir "$DIST" "$SRC/$d" >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
done
ls -1 "$DIST"
n_sdist=$(find "$DIST" -name '*.tar.gz' | wc -l)
n_wheel=$(find "$DIST" -name '*.whl' | wc -l)
[[ "$n_sdist" == "${#DISTS[@]}" && "$n_wheel" == "${#DISTS[@]}" ]] \
    || { echo "expected ${#DISTS[@]} sdists and ${#DISTS[@]} wheels, got $n_sdist and $n_wheel" >&2; exit 1; }

step "twine check --strict"
"$PY" -m twine check --strict "$DIST"/*

step "every tracked package file is in its wheel"
"$PY" - "$DIST" <<'EOF'
import subprocess, sys, zipfile
from pathlib import Path

dist = Path(sys.argv[1])
# distribution folder -> (wheel name prefix, the package folders it ships)
layout = {
    ".": ("car_rag-", ["car_rag", "car_rag_evals"]),
    "integrations/llama-index-retrievers-car": ("llama_index_retrievers_car-", ["llama_index"]),
    "integrations/langchain-car": ("langchain_car-", ["langchain_car"]),
}
missing = []
for folder, (prefix, packages) in layout.items():
    (wheel,) = dist.glob(f"{prefix}*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(["git", "ls-files", "--", *packages], cwd=folder, check=True,
                             capture_output=True, text=True).stdout.split()
    tracked = [f for f in tracked if "/tests/" not in f"/{f}" and not f.endswith(".pyc")]
    lost = [f for f in tracked if f not in names]
    missing += [f"{wheel.name}: {f}" for f in lost]
    print(f"{wheel.name}: {len(tracked)} tracked files, all in the wheel" if not lost else
          f"{wheel.name}: {len(lost)} of {len(tracked)} tracked files missing")
if missing:
    sys.exit("not in the wheel:\n  " + "\n  ".join(missing))
EOF

step "fresh venv ($BASE_PY), CPU torch first: $TORCH $TORCH_FROM"
"$BASE_PY" -m venv "$VENV"
VPIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
# shellcheck disable=SC2086  # TORCH_FROM and WHEELS are lists of options (WHEELS may be empty)
"${VPIP[@]}" $TORCH_FROM "$TORCH"
"$VENV/bin/python" -W ignore -c 'import torch; assert not torch.version.cuda, torch.__version__; print("torch", torch.__version__)'

step "install the built wheels: car-rag[store,llama-index,langchain], llama-index-retrievers-car, langchain-car"
core=$(find "$DIST" -name 'car_rag-*.whl')
llama=$(find "$DIST" -name 'llama_index_retrievers_car-*.whl')
lang=$(find "$DIST" -name 'langchain_car-*.whl')
# The built files by path; the core's llama-index and langchain extras must resolve to them (and
# the integrations' bounded car-rag requirement to the built core), never to an index. The torch
# already installed satisfies the store's requirement: it must not be replaced.
# shellcheck disable=SC2086
"${VPIP[@]}" $WHEELS --find-links "$DIST" "${core}[store,llama-index,langchain]" "$llama" "$lang"
"$VENV/bin/python" -W ignore -c 'import torch; assert not torch.version.cuda, "torch was replaced: " + torch.__version__'
"$VENV/bin/python" -m pip check

step "smoke test from outside the repository"
mkdir "$WORK/outside"
cd "$WORK/outside"
unset PYTHONPATH
"$VENV/bin/python" - "$VENV" <<'EOF'
import sys
from pathlib import Path

import car_rag, langchain_car, llama_index.retrievers.car, llama_index.postprocessor.car  # noqa: E401

venv = Path(sys.argv[1]).resolve()
for mod in (car_rag, langchain_car, llama_index.retrievers.car, llama_index.postprocessor.car):
    where = Path(mod.__file__).resolve()
    assert venv in where.parents, f"{mod.__name__} imported from {where}, not from the fresh venv"
    print(f"{mod.__name__}: {where.relative_to(venv)}")
EOF
version=$("$VENV/bin/car-rag" --version)
echo "$version"
[[ "$version" == "car-rag $("$VENV/bin/python" -c 'import car_rag; print(car_rag.__version__)')" ]]
fanin=$("$VENV/bin/car-rag" fanin --help)  # the harness's own options, not the "not installed" stand-in
[[ "$fanin" == *"--reader READER"* ]]
HF_HUB_OFFLINE=1 "$VENV/bin/car-rag" demo
cd "$ROOT"

step "dist-check passed"
