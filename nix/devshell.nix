# `nix develop`: uv, the pinned Python, and the whole workspace installed editable.
{ pkgs, python }:
let
  venv = python.devVenv;
in
pkgs.mkShell {
  packages = [
    venv
    pkgs.uv
    pkgs.gnumake
  ];
  env = {
    # The venv comes from Nix; uv may edit uv.lock but must not sync or download Pythons.
    UV_NO_SYNC = "1";
    UV_PYTHON = python.python.interpreter;
    UV_PYTHON_DOWNLOADS = "never";
  };
  shellHook = ''
    unset PYTHONPATH
    export REPO_ROOT="$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
    . ${venv}/bin/activate
  '';
}
