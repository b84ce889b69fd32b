#!/usr/bin/env bash
# The project on one TPU host that has no route to a package index and no TCP socket (docs/scaling.md,
# "A TPU host without network"). Run from the repository root.
#
#   here:   bash nix/tpu-host.sh wheelhouse    build/wheelhouse-tpu-1 ... -N: the lock's wheels for the
#                                              host (manylinux x86_64, CPython 3.11), in parts of at most
#                                              SPLIT_MIB MiB (default 58: a part and the repository fit
#                                              one 64 MiB transfer); the host's own JAX left out
#   there:  bash nix/tpu-host.sh install K     part K into .venv (in order; the last part installs the
#                                              workspace and what the host's own index has: HOST_INDEX)
#           bash nix/tpu-host.sh probe         what the host shows: Python, JAX, device files, the chip's
#                                              lock, which of the lock's packages its own index has
#           bash nix/tpu-host.sh train-nano    `marin run experiments/train_nano.py` on an empty prefix
#                                              (expect 11 of 11 steps to run), then again (all cached)
#           bash nix/tpu-host.sh experiments   the smoke-size `make experiments` on the same prefix, for at
#                                              most LIMIT seconds (default 540: a device command may run
#                                              600); interrupted, it says so: run it again to go on
#           bash nix/tpu-host.sh measure nano  issue 56's measurement, on empty prefixes and an empty compilation
#                                              cache: train_nano with warm accelerator processes (first run and
#                                              rerun, per-step times), then with MARIN_ACCELERATOR_PROCESS=fresh,
#                                              and the two builds compared file by file (scores included)
#           bash nix/tpu-host.sh measure experiments   the smoke-size `make experiments` in one run (LIMIT, 540)
#
# Outputs are copied to $OUT when it is set (the device tool brings that folder back).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# In the host's own Python (its system site-packages, which .venv sees): JAX and what JAX needs.
HOST_HAS="jax jaxlib numpy scipy ml-dtypes opt-einsum"
# In the host's own index (HOST_INDEX), big: installed from there by the last part.
HOST_INDEX_HAS="${HOST_INDEX_HAS:-tensorstore pandas pyarrow datasets tokenizers lxml pydantic pydantic-core aiohttp multidict regex pytz \
matplotlib scikit-learn pillow fonttools kiwisolver pyyaml sqlalchemy greenlet grpcio babel nltk zstandard pygments \
setuptools uvloop contourpy}"
HOST_INDEX="${HOST_INDEX:-file:///opt/pypi/simple}"
# Ray cannot start without a TCP socket, and the local runner never needs it: left out, with what only it needs.
PRUNE="ray"
PARTS=build/wheelhouse-tpu
PREFIX_FILE=build/tpu-host-prefix

keep() {  # keep a copy of a file in $OUT, when there is one
    if [ -n "${OUT:-}" ]; then cp "$1" "$OUT/"; fi
}

prefix() {  # the run's prefix: made empty once, then the same for every later command
    if [ ! -s "$PREFIX_FILE" ]; then
        mkdir -p build
        mktemp -d "${TMPDIR:-/tmp}/marin-tpu-XXXXXX" >"$PREFIX_FILE"
    fi
    cat "$PREFIX_FILE"
}

case "${1:-}" in
wheelhouse)
    make wheelhouse PLATFORM=manylinux_2_28_x86_64 PYTHON_VERSION=3.11 WITH_UV=0 SPLIT_MIB="${SPLIT_MIB:-58}" \
        WHEELHOUSE_OUT="$PARTS" PRUNE="$PRUNE" EXCLUDE="$HOST_HAS $HOST_INDEX_HAS"
    ;;
install)
    part="${2:?usage: bash nix/tpu-host.sh install K (the number of the part carried here)}"
    if command -v make >/dev/null; then
        make setup WHEELHOUSE="$PARTS-$part" SYSTEM_SITE_PACKAGES=1 HOST_INDEX="$HOST_INDEX" PYTHON="${PYTHON:-python3}"
    else  # what that make target runs
        "${PYTHON:-python3}" nix/wheelhouse.py install "$PARTS-$part" --venv .venv --stamp .venv/.synced \
            --system-site-packages --host-index "$HOST_INDEX"
    fi
    ;;
probe)
    python3 -c 'import sys, jax, numpy; print(sys.version.split()[0], "jax", jax.__version__, "numpy", numpy.__version__)'
    ls -l /dev/accel* /dev/vfio 2>&1 || true
    env | grep -E '^(TPU_|JAX_|XLA_)' | sort || true
    ls -l /tmp/libtpu_lockfile 2>&1 || true
    index="${HOST_INDEX#file://}"
    if [ -d "$index" ]; then
        echo "in the host's index ($HOST_INDEX), of the packages the lock pins:"
        ls "$index" | tr 'A-Z_.' 'a-z--' | sort >/tmp/marin-host-index.txt
        grep -Eo '^name = "[^"]+"' uv.lock | cut -d'"' -f2 | tr 'A-Z_.' 'a-z--' | sort | comm -12 - /tmp/marin-host-index.txt | tr '\n' ' '
        echo
    fi
    ;;
train-nano)
    p="$(prefix)"
    echo "prefix: $p"
    .venv/bin/marin run experiments/train_nano.py --prefix "$p" 2>&1 | tee build/tpu-train-nano-1.txt
    keep build/tpu-train-nano-1.txt
    echo "--- again: every step cached"
    .venv/bin/marin run experiments/train_nano.py --prefix "$p" 2>&1 | tee build/tpu-train-nano-2.txt
    keep build/tpu-train-nano-2.txt
    ;;
experiments)
    p="$(prefix)"
    echo "prefix: $p"
    # What `make experiments` runs, at the smoke size. No experiment needs a TCP socket (each runs on the
    # local backend; Ray and the object-store emulators are only in the test suite), so none is left out.
    # Each accelerator step opens the chip in a process of its own (6-15 s each): the whole graph may
    # take longer than one device command, so it stops itself in time (SIGINT: the runner records
    # its running steps as interrupted and gives their leases back) and the next call goes on.
    log="build/tpu-experiments-$(date +%H%M%S).txt"
    set +e
    EXPERIMENTS_SCALE=smoke timeout -s INT -k 30 "${LIMIT:-540}" .venv/bin/marin run experiments/ --prefix "$p" \
        2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    set -e
    keep "$log"
    if [ "$status" = 124 ] || [ "$status" = 130 ]; then
        echo "experiments: stopped after ${LIMIT:-540}s with steps left to build: run \`bash nix/tpu-host.sh experiments\` again"
    fi
    exit "$status"
    ;;
measure)
    # Logs and times in $OUT (else build/measure-<time>). Accelerator steps keep their compiled programs in
    # the runner's compilation cache (compilation_cache; default ~/.cache/marin/jax): an empty one here,
    # so that the first run is a first run.
    out="${OUT:-build/measure-$(date +%H%M%S)}"
    mkdir -p "$out" build
    fresh_dir() { mktemp -d "${TMPDIR:-/tmp}/marin-measure-$1-XXXXXX"; }
    timed() {  # timed NAME CMD...: its output in $out/NAME.txt, its wall time in its last line
        local start end status
        start=$(date +%s.%N)
        set +e
        "${@:2}" 2>&1 | tee "$out/$1.txt"
        status=${PIPESTATUS[0]}
        set -e
        end=$(date +%s.%N)
        echo "$1: exit $status, wall $(python3 -c "print(round($end - $start, 1))") s" | tee -a "$out/$1.txt" "$out/summary.txt"
    }
    case "${2:-}" in
    nano)
        warm="$(fresh_dir warm)" fresh="$(fresh_dir fresh)"
        export MARIN_COMPILATION_CACHE="$(fresh_dir jax-warm)"
        timed train-nano-warm-1 .venv/bin/marin run experiments/train_nano.py --prefix "$warm"
        timed train-nano-warm-2 .venv/bin/marin run experiments/train_nano.py --prefix "$warm"
        MARIN_COMPILATION_CACHE="$(fresh_dir jax-fresh)" MARIN_ACCELERATOR_PROCESS=fresh \
            timed train-nano-fresh .venv/bin/marin run experiments/train_nano.py --prefix "$fresh"
        timed compare .venv/bin/python -m benchmarks.compare_builds "$warm" "$fresh"
        scores() { awk '/^scores:/ {on = 1; print; next} on && /^  / {print; next} {on = 0}' "$1"; }
        scores "$out/train-nano-warm-1.txt" >"$out/scores-warm.txt"
        scores "$out/train-nano-fresh.txt" >"$out/scores-fresh.txt"
        if [ ! -s "$out/scores-warm.txt" ]; then
            echo "scores: none printed by the warm run" | tee -a "$out/summary.txt"
        elif diff "$out/scores-warm.txt" "$out/scores-fresh.txt" >"$out/scores-diff.txt"; then
            echo "scores: warm and fresh print the same" | tee -a "$out/summary.txt"
        else
            echo "scores: DIFFER (see scores-diff.txt)" | tee -a "$out/summary.txt"
        fi
        ;;
    experiments)
        p="$(fresh_dir experiments)"
        export MARIN_COMPILATION_CACHE="$(fresh_dir jax-experiments)"
        EXPERIMENTS_SCALE=smoke timed experiments timeout -s INT -k 30 "${LIMIT:-540}" \
            .venv/bin/marin run experiments/ --prefix "$p"
        ;;
    *)
        echo "usage: bash nix/tpu-host.sh measure nano|experiments" >&2
        exit 2
        ;;
    esac
    cat "$out/summary.txt"
    ;;
*)
    sed -n '2,23p' "${BASH_SOURCE[0]}"
    exit 2
    ;;
esac
