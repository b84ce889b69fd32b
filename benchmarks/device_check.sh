#!/usr/bin/env bash
# Accelerator check: trains Llama presets in bfloat16 on every local GPU/TPU and prints a table row
# per configuration: compile s, step ms, tokens/s, MFU (the project's count and the causal-halved
# one) against the device's datasheet peak (levanter.flops), HBM of the step and of the device.
# Configurations that do not fit the device's memory are refused in one line (estimate and fix).
#
#   benchmarks/device_check.sh                 # llama_150m 32x1024 on a GPU or TPU machine
#   benchmarks/device_check.sh --smoke         # llama_nano, 6 steps: checks the script on a CPU
#   benchmarks/device_check.sh --model llama_600m --batch-size 16 --seq-len 1024 --remat save_attention
#   benchmarks/device_check.sh --config llama_150m:32x1024 --config llama_150m:8x4096:full:splash \
#       --steps 40 --out results --profile      # several configurations in one process
#
# The project never needs this to build or test. Uses the project's environment (.venv, `make setup`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=".venv/bin/python"
if [[ ! -x "$PY" ]]; then
  echo "device_check: no .venv here; run 'make setup' first" >&2
  exit 2
fi
exec "$PY" -m benchmarks.device_check "$@"
