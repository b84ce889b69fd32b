#!/usr/bin/env bash
# Issue 58's decode table on one TPU host, from the repository root after `bash nix/tpu-host.sh install 1`:
#
#   bash benchmarks/bench_generate_tpu.sh
#
# llama_150m at batch 64, 8, 1 with the first decoder (--decode full: every slot position read, XLA's
# batched writes) beside the default (auto: the live prefix read, the Pallas kernel's writes), then
# llama_1_4b at the same batches with the default; bfloat16, 128-token prompts + 128 new tokens.
# Each model runs under its own time limit (rows print, and the JSON is rewritten, as each is
# measured: a limit cuts the table short, not empty), the whole in under 8 minutes. With OUT set,
# each model's table (.txt) and rows (.json) go to $OUT/<model>/.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-.venv/bin/python}"

run() {  # run MODEL LIMIT_S ARGS...: one model's table
    local model="$1" limit="$2" dir=""
    shift 2
    if [ -n "${OUT:-}" ]; then
        dir="$OUT/$model"
        mkdir -p "$dir"
    fi
    OUT="$dir" timeout "$limit" "$PYTHON" -u -m benchmarks.bench_generate --preset "$model" --batches 64,8,1 \
        --no-compare "$@" 2>&1 | tee ${dir:+"$dir/table.txt"}
    echo "[$model: exit ${PIPESTATUS[0]}${dir:+, in $dir}]"
}

run llama_150m 220 --decode full,auto --reps 3
run llama_1_4b 240 --decode auto --reps 2
