#!/usr/bin/env bash
# `make nix-check`: everything about the Nix side that can be verified without nixpkgs and
# without network (apt aside). Prints one line per check and exits non-zero if any failed.
#
#   bash nix/check.sh [ROOT]     ROOT defaults to the repository this script lives in
#
# 1. nix-instantiate is present (Debian's nix-bin is installed when it is missing and we are
#    root, or can sudo, with apt-get).
# 2. every .nix file parses.
# 3. flake.lock matches the inputs declared in flake.nix (nix/checks/lock.nix); it is read,
#    never rewritten.
# 4. uv.lock matches the pyproject.toml files (`uv lock --check --offline`).
# 5. builtins-only facts: uv.lock version, workspace members, the marin console script, the
#    flake's outputs and the train-nano entry point (nix/checks/static.nix).
#
# Not verified here (needs nixpkgs and the binary caches): building the environment, `nix run`,
# `nix develop`, `nix flake check`. See docs/nix.md.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${1:-$here/..}" && pwd)" || { echo "nix-check: no such directory: ${1:-}" >&2; exit 2; }
python="${PYTHON:-python3}"

passed=0
failed=0
ok() { printf 'ok    %s\n' "$*"; passed=$((passed + 1)); }
fail() { printf 'FAIL  %s\n' "$*"; failed=$((failed + 1)); }
indent() { sed 's/^/        /'; }
# Without nix-instantiate no other check can run: the summary line, and a failed exit.
stop_here() { echo "nix-check: $passed passed, $failed failed"; exit 1; }

# --- 1. nix-instantiate ----------------------------------------------------------------------
# The lock is taken on a read-only descriptor, so a lock file another user made serves as well.
nix_lock="${TMPDIR:-/tmp}/marin-nix-bin.lock"
[ -e "$nix_lock" ] || : >>"$nix_lock"
install_nix_bin() {
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || return 1
    sudo="sudo -n"
  fi
  command -v apt-get >/dev/null 2>&1 || return 1
  # One installer at a time when several checks start together (pytest -n).
  (
    flock 9
    command -v nix-instantiate >/dev/null 2>&1 && exit 0
    echo "nix-check: installing Debian's nix-bin (apt-get)" >&2
    $sudo apt-get update -qq >&2 &&
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nix-bin >&2
  ) 9<"$nix_lock"
}

# Nix creates its store database on its first use, and first uses at once collide ("database is
# busy", "schema is corrupt"): one use under the lock creates it before the checks run in parallel.
init_nix_db() {
  ( flock 9; nix-instantiate --eval -E null >/dev/null ) 9<"$nix_lock"
}

if ! command -v nix-instantiate >/dev/null 2>&1; then
  install_nix_bin || true
fi
if ! command -v nix-instantiate >/dev/null 2>&1; then
  fail "nix-instantiate: not found and Debian's nix-bin could not be installed" \
    "(run as root with apt: apt-get install nix-bin; or install Nix)"
  stop_here
fi
if ! err="$(init_nix_db 2>&1)"; then
  fail "nix-instantiate: could not open the Nix store: $(printf '%s' "$err" | head -n 3 | tr '\n' ' ')"
  stop_here
fi
ok "nix-instantiate: $(nix-instantiate --version)"

# --- 2. parse every .nix file ----------------------------------------------------------------
mapfile -t nix_files < <(
  cd "$root" && find . \( -name .git -o -name .venv -o -name .marin -o -name node_modules -o -name result \) -prune \
    -o -type f -name '*.nix' -print | sed 's|^\./||' | LC_ALL=C sort
)
parse_errors=()
for f in "${nix_files[@]}"; do
  if ! err="$(nix-instantiate --parse "$root/$f" 2>&1 >/dev/null)"; then
    parse_errors+=("$f: $(printf '%s' "$err" | head -n 3 | tr '\n' ' ')")
  fi
done
if [ "${#nix_files[@]}" -eq 0 ]; then
  fail "parse: no .nix files found under $root"
elif [ "${#parse_errors[@]}" -eq 0 ]; then
  ok "parse: ${#nix_files[@]} .nix files (${nix_files[*]})"
else
  fail "parse: ${#parse_errors[@]} of ${#nix_files[@]} .nix files do not parse"
  printf '%s\n' "${parse_errors[@]}" | indent
fi

# --- 3 and 5. builtins-only evaluations ------------------------------------------------------
# Each check file returns [ { check, ok, detail } ]; print a line per row.
run_rows() {
  local label="$1" file="$2" out
  if ! out="$(nix-instantiate --eval --strict --json "$file" --argstr root "$root" 2>&1)"; then
    fail "$label: evaluation failed"
    printf '%s\n' "$out" | head -n 20 | indent
    return
  fi
  local lines
  if ! lines="$(printf '%s' "$out" | "$python" -c '
import json, sys
for row in json.load(sys.stdin):
    detail = "" if row["ok"] else ": " + row["detail"]
    print(("ok" if row["ok"] else "FAIL") + "\t" + row["check"] + detail)
')"; then
    fail "$label: could not read the evaluation result"
    return
  fi
  while IFS=$'\t' read -r status text; do
    if [ "$status" = ok ]; then ok "$text"; else fail "$text"; fi
  done <<<"$lines"
}

lock_digest() { [ -f "$root/flake.lock" ] && sha256sum "$root/flake.lock" | cut -d' ' -f1; }
lock_before="$(lock_digest)"
if [ ! -f "$root/flake.nix" ] || [ ! -f "$root/flake.lock" ]; then
  fail "flake.lock: flake.nix and flake.lock must both exist in $root"
else
  run_rows "flake.lock" "$here/checks/lock.nix"
fi

# --- 4. uv.lock against the pyproject files --------------------------------------------------
if command -v uv >/dev/null 2>&1; then
  uv_cmd=(uv)
elif [ -x "$HOME/.local/bin/uv" ]; then
  uv_cmd=("$HOME/.local/bin/uv")
elif "$python" -m uv --version >/dev/null 2>&1; then
  uv_cmd=("$python" -m uv)
else
  uv_cmd=()
fi
if [ "${#uv_cmd[@]}" -eq 0 ]; then
  fail "uv.lock: uv not found (make setup installs it: pip install --user uv)"
elif out="$(cd "$root" && UV_PYTHON_DOWNLOADS=never "${uv_cmd[@]}" lock --check --offline 2>&1)"; then
  ok "uv.lock: matches the pyproject.toml files (uv lock --check: $(printf '%s' "$out" | tail -n 1))"
else
  fail "uv.lock: out of date with the pyproject.toml files (run: uv lock)"
  printf '%s\n' "$out" | tail -n 10 | indent
fi

run_rows "static" "$here/checks/static.nix"

if [ "$(lock_digest)" = "$lock_before" ]; then
  ok "flake.lock: left unchanged by these checks"
else
  fail "flake.lock: was modified while checking"
fi

echo "nix-check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
