# Facts about the workspace and the flake that need no nixpkgs, only Nix builtins:
# uv.lock's format, the six workspace members, the `marin` console script, and the flake's
# outputs (evaluated with every input replaced by a value that throws if touched).
#
#   nix-instantiate --eval --strict --json nix/checks/static.nix --argstr root "$PWD"
#
# Returns a list of { check, ok, detail } rows; nix/check.sh prints one line per row.
{ root }:
let
  inherit (builtins)
    all attrNames concatStringsSep elem filter fromTOML hasAttr map mapAttrs pathExists readDir
    readFile sort toJSON;

  rootPath = if builtins.isPath root then root else /. + root;

  row = check: errors: {
    inherit check;
    ok = errors == [ ];
    detail = concatStringsSep "; " errors;
  };
  concatMap = f: xs: builtins.concatLists (map f xs);
  # split searches (unanchored), so this works on multi-line text on every regex engine.
  hasInfix = needle: haystack: builtins.length (builtins.split needle haystack) > 1;
  expect = what: got: want: if got == want then [ ] else [ "${what} is ${toJSON got}, expected ${toJSON want}" ];

  members = [ "fray" "iris" "levanter" "marin" "rigging" "zephyr" ];
  systems = [ "x86_64-linux" "aarch64-linux" "aarch64-darwin" ];

  uvLock = fromTOML (readFile (rootPath + "/uv.lock"));
  pyproject = fromTOML (readFile (rootPath + "/pyproject.toml"));
  rootName = pyproject.project.name or "<root project without a name>";
  memberToml = name: rootPath + "/pkgs/${name}/pyproject.toml";

  # --- uv.lock ---------------------------------------------------------------------------------
  lockErrors =
    expect "uv.lock version" (uvLock.version or null) 1
    ++ (if builtins.isInt (uvLock.revision or null) then [ ] else [ "uv.lock has no integer revision" ])
    ++ expect "uv.lock requires-python" (uvLock.requires-python or null) ">=3.11, <3.13";

  # --- workspace members -----------------------------------------------------------------------
  pkgDirs = filter (d: pathExists (memberToml d)) (
    attrNames (if pathExists (rootPath + "/pkgs") then readDir (rootPath + "/pkgs") else { })
  );
  lockedByName = builtins.listToAttrs (map (p: { name = p.name; value = p; }) (uvLock.package or [ ]));
  memberErrors =
    expect "pyproject.toml [tool.uv.workspace] members" (pyproject.tool.uv.workspace.members or null) [ "pkgs/*" ]
    ++ expect "directories pkgs/*/ with a pyproject.toml" (sort builtins.lessThan pkgDirs) members
    ++ expect "uv.lock [manifest] members (without the root '${rootName}')" (
      sort builtins.lessThan (filter (m: m != rootName) (uvLock.manifest.members or [ ]))
    ) members
    ++ concatMap (
      name:
      (if pathExists (memberToml name) then
        expect "project.name in pkgs/${name}/pyproject.toml" ((fromTOML (readFile (memberToml name))).project.name or null) name
      else
        [ ])
      ++ expect "uv.lock source of ${name}" ((lockedByName.${name} or { }).source or null) { editable = "pkgs/${name}"; }
    ) members;

  # --- the marin console script ----------------------------------------------------------------
  marinToml = if pathExists (memberToml "marin") then fromTOML (readFile (memberToml "marin")) else { };
  scriptErrors = expect "pkgs/marin/pyproject.toml [project.scripts] marin" (marinToml.project.scripts.marin or null) "marin.cli.main:main";

  # --- flake outputs, evaluated without any input ----------------------------------------------
  flake = import (rootPath + "/flake.nix");
  stubInputs = mapAttrs (name: _: throw "static check: flake input '${name}' is not available here") (flake.inputs or { }) // {
    self = {
      outPath = toString rootPath;
    };
  };
  outputs = flake.outputs stubInputs;
  namesOf = set: if builtins.isAttrs set then attrNames set else [ ];
  wants = kind: system: names:
    let have = namesOf ((outputs.${kind} or { }).${system} or null); in
    map (n: "${kind}.${system}.${n} is missing") (filter (n: !(elem n have)) names);
  outputErrors = concatMap (
    system:
    wants "packages" system [ "default" ]
    ++ wants "apps" system [ "train-nano" "experiments" ]
    ++ wants "devShells" system [ "default" ]
    ++ wants "checks" system [ "tests" "lock" ]
  ) systems;

  # --- the train-nano entry point --------------------------------------------------------------
  appsSource = if pathExists (rootPath + "/nix/apps.nix") then readFile (rootPath + "/nix/apps.nix") else "";
  entryErrors =
    (if hasInfix "python -m experiments\\.train_nano" appsSource then [ ] else [ "nix/apps.nix does not run `python -m experiments.train_nano`" ])
    ++ (if hasInfix "marin run experiments/" appsSource then [ ] else [ "nix/apps.nix does not run `marin run experiments/`" ])
    ++ (if pathExists (rootPath + "/experiments/__init__.py") then [ ] else [ "experiments/__init__.py is missing (experiments must be a package)" ])
    ++ (if pathExists (rootPath + "/experiments/train_nano.py") then [ ] else [ "experiments/train_nano.py is missing" ]);
in
[
  (row "uv.lock: version 1 with a revision, requires-python >=3.11, <3.13" lockErrors)
  (row "workspace: members are ${concatStringsSep ", " members} (pyproject, pkgs/, uv.lock)" memberErrors)
  (row "marin: console script marin = marin.cli.main:main" scriptErrors)
  (row "flake: packages.default, apps train-nano/experiments, devShells.default, checks on ${concatStringsSep ", " systems}" outputErrors)
  (row "flake: app train-nano runs experiments.train_nano, app experiments runs marin run experiments/" entryErrors)
]
