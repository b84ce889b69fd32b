# The Python package set and virtual environments, built from uv.lock by uv2nix.
#
# Every third-party package in uv.lock has a wheel, so wheels are preferred and no build
# system needs guessing; the six workspace packages build with hatchling from their src layout.
{
  pkgs,
  workspace,
  pyproject-nix,
  pyproject-build-systems,
  # requires-python is ">=3.11,<3.13" (see pyproject.toml); uv.lock resolves both.
  python ? pkgs.python312,
}:
let
  inherit (pkgs) lib;

  members = [
    "rigging"
    "fray"
    "iris"
    "zephyr"
    "levanter"
    "marin"
  ];

  baseSet = pkgs.callPackage pyproject-nix.build.packages { inherit python; };

  pythonSet = baseSet.overrideScope (
    lib.composeManyExtensions [
      pyproject-build-systems.overlays.wheel
      (workspace.mkPyprojectOverlay { sourcePreference = "wheel"; })
    ]
  );

  # For the dev shell: workspace members are installed as editable paths under $REPO_ROOT
  # (exported by the shell hook), so edits to pkgs/*/src need no rebuild.
  editableSet = pythonSet.overrideScope (
    lib.composeManyExtensions [
      (workspace.mkEditablePyprojectOverlay { root = "$REPO_ROOT"; })
      # hatchling builds editable wheels through the `editables` package.
      (
        final: prev:
        lib.genAttrs members (
          name:
          prev.${name}.overrideAttrs (old: {
            nativeBuildInputs = (old.nativeBuildInputs or [ ]) ++ final.resolveBuildSystem { editables = [ ]; };
          })
        )
      )
    ]
  );
in
{
  inherit python pythonSet editableSet;
  venv = pythonSet.mkVirtualEnv "marin-env" workspace.deps.default;
  testVenv = pythonSet.mkVirtualEnv "marin-test-env" workspace.deps.all;
  devVenv = editableSet.mkVirtualEnv "marin-dev-env" workspace.deps.all;
}
