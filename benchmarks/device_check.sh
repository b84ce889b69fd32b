#!/usr/bin/env bash
# Accelerator check: trains llama_150m in bfloat16 for 300 steps on every local GPU/TPU and prints
# step time, tokens/s and MFU against the device's datasheet peak (levanter.flops).
#
#   benchmarks/device_check.sh                 # on a GPU or TPU machine (JAX with its CUDA/TPU plugin)
#   benchmarks/device_check.sh --smoke         # tiny model, 6 steps: checks the script on a CPU
#   benchmarks/device_check.sh --steps 500 --batch-size 64 --fsdp 8   # other sizes and meshes
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
