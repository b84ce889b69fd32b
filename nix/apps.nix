# `nix run .#train-nano` and `nix run .#experiments`.
#
# Both run against a checkout when started inside one (a directory with experiments/ and
# uv.lock), so edits to experiments are picked up and outputs land in that checkout's store.
# Started anywhere else (e.g. `nix run github:...#train-nano`), they run the experiments shipped
# in the flake source; that copy is read-only, so the store then defaults to
# $XDG_CACHE_HOME/marin/store unless MARIN_PREFIX (or --prefix) says otherwise.
# Extra arguments pass through: `nix run .#experiments -- --cache gs://bucket/cache`.
{
  pkgs,
  venv,
  src,
}:
let
  projectRoot = ''
    if [ -d experiments ] && [ -f uv.lock ]; then
      root="$PWD"
    else
      root="${src}"
      export MARIN_PREFIX="''${MARIN_PREFIX:-''${XDG_CACHE_HOME:-$HOME/.cache}/marin/store}"
    fi
    cd "$root"
    export PYTHONPATH="$root''${PYTHONPATH:+:$PYTHONPATH}"
  '';

  mkApp = name: description: command: {
    type = "app";
    program = "${
      pkgs.writeShellApplication {
        inherit name;
        runtimeInputs = [ venv ];
        text = projectRoot + command;
      }
    }/bin/${name}";
    meta.description = description;
  };
in
{
  # The tutorial graph end to end: corpus -> tokenizer -> shards -> nano Llama (as `make train-nano`).
  train-nano = mkApp "marin-train-nano" "Run the tutorial graph (experiments.train_nano)" ''
    exec python -m experiments.train_nano "$@"
  '';

  # Every experiment in experiments/ (as `make experiments`).
  experiments = mkApp "marin-experiments" "Run every experiment in experiments/" ''
    exec marin run experiments/ "$@"
  '';
}
