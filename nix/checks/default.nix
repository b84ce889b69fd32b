# `nix flake check`: the fast test suite, and the lock checks that `make nix-check` runs.
{
  pkgs,
  python,
  src,
  root,
}:
let
  inherit (pkgs) lib;

  # The builtins-only checks evaluate at eval time; a failure names the rows that failed.
  rows = import ./lock.nix { inherit root; } ++ import ./static.nix { inherit root; };
  failed = builtins.filter (r: !r.ok) rows;
  report = lib.concatMapStrings (r: "ok    ${r.check}\n") rows;
in
{
  # pytest over a writable copy of the source against the (non-editable) test environment.
  # tests/infra/test_nix_check.py is left out: it drives nix-instantiate and apt, which belong to
  # `make nix-check` on a host, not to the build sandbox; its substance is the `lock` check.
  tests = pkgs.runCommand "marin-tests" { nativeBuildInputs = [ python.testVenv ]; } ''
    cp -r ${src} source
    chmod -R u+w source
    cd source
    export HOME="$TMPDIR" MARIN_PREFIX="$TMPDIR/store"
    pytest -q -m "not slow" -p no:cacheprovider --ignore=tests/infra/test_nix_check.py
    touch $out
  '';

  lock =
    if failed != [ ] then
      throw ("lock checks failed:\n" + lib.concatMapStrings (r: "FAIL  ${r.check}: ${r.detail}\n") failed)
    else
      pkgs.runCommand "marin-lock-check"
        {
          nativeBuildInputs = [ pkgs.uv ];
          passAsFile = [ "report" ];
          inherit report;
        }
        ''
          cp -r ${src} source
          chmod -R u+w source
          cd source
          export HOME="$TMPDIR" UV_CACHE_DIR="$TMPDIR/uv-cache" UV_PYTHON_DOWNLOADS=never
          export UV_PYTHON="${python.python.interpreter}"
          uv lock --check --offline
          cp "$reportPath" $out
        '';
}
