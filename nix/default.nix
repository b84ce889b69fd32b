# Flake outputs. flake.nix only declares inputs; this file wires them together.
#
# The per-system attribute names below are literal (no `//` over computed sets, no nixpkgs
# helpers to build them) so nix/checks/static.nix can list the outputs with builtins only,
# on a machine that has nix-instantiate but no nixpkgs.
{ inputs, root }:
let
  inherit (inputs) nixpkgs uv2nix pyproject-nix pyproject-build-systems;

  systems = [
    "x86_64-linux"
    "aarch64-linux"
    "aarch64-darwin"
  ];
  forAllSystems =
    f:
    builtins.listToAttrs (
      map (system: {
        name = system;
        value = f system;
      }) systems
    );

  # Reads pyproject.toml, pkgs/*/pyproject.toml and uv.lock; nothing is resolved here, uv.lock
  # is the single source of versions.
  workspace = uv2nix.lib.workspace.loadWorkspace { workspaceRoot = root; };

  # The flake's own source (tracked files only), used by the apps and the checks.
  src = inputs.self;

  perSystem = forAllSystems (
    system:
    let
      pkgs = nixpkgs.legacyPackages.${system};
      python = import ./python.nix {
        inherit pkgs workspace pyproject-nix pyproject-build-systems;
      };
    in
    {
      inherit pkgs python;
    }
  );
in
{
  packages = forAllSystems (system: {
    # The environment with marin (and every workspace package) installed, from uv.lock.
    default = perSystem.${system}.python.venv;
    # Same plus the dev dependency group (pytest, ruff, ...), non-editable; used by checks.
    test-env = perSystem.${system}.python.testVenv;
  });

  apps = forAllSystems (
    system:
    import ./apps.nix {
      inherit (perSystem.${system}) pkgs;
      inherit src;
      venv = perSystem.${system}.python.venv;
    }
  );

  devShells = forAllSystems (system: {
    default = import ./devshell.nix {
      inherit (perSystem.${system}) pkgs python;
    };
  });

  checks = forAllSystems (
    system:
    import ./checks {
      inherit (perSystem.${system}) pkgs python;
      inherit src root;
    }
  );
}
