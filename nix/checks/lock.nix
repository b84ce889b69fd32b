# Does flake.lock still describe the inputs declared in flake.nix? Builtins only: this runs on a
# machine that has nix-instantiate but no nixpkgs and no network, and it never rewrites the lock.
#
#   nix-instantiate --eval --strict --json nix/checks/lock.nix --argstr root "$PWD"
#
# Returns a list of { check, ok, detail } rows; nix/check.sh prints one line per row.
{ root }:
let
  inherit (builtins)
    all attrNames concatStringsSep elemAt filter genericClosure hasAttr head isAttrs isList
    isString length map match split tail toJSON;

  rootPath = if builtins.isPath root then root else /. + root;
  declared = (import (rootPath + "/flake.nix")).inputs or { };
  lock = builtins.fromJSON (builtins.readFile (rootPath + "/flake.lock"));
  nodes = lock.nodes or { };
  rootNode = nodes.${lock.root or "root"} or { };
  rootInputs = rootNode.inputs or { };

  row = check: errors: {
    inherit check;
    ok = errors == [ ];
    detail = concatStringsSep "; " errors;
  };
  concatMap = f: xs: builtins.concatLists (map f xs);

  # "a/b" -> [ "a" "b" ], as flake.lock records a `follows`; "" follows the root flake itself.
  followsPath = s: if s == "" then [ ] else filter isString (split "/" s);

  # The `original` that Nix writes for a github:/gitlab: flake reference.
  parseUrl =
    url:
    let
      m = match "(github|gitlab):([^/?]+)/([^/?]+)(/([^?]+))?" url;
      ref = if m == null then null else elemAt m 4;
      isRev = ref != null && match "[0-9a-f]{40}" ref != null;
    in
    if m == null then
      null
    else
      {
        type = elemAt m 0;
        owner = elemAt m 1;
        repo = elemAt m 2;
      }
      // (if ref == null then { } else if isRev then { rev = ref; } else { inherit ref; });

  # Walk a follows path from the root node; null when it does not resolve.
  resolve =
    path:
    let
      step =
        nodeName: rest: depth:
        if depth > 64 then
          null
        else if rest == [ ] then
          nodeName
        else
          let
            ins = (nodes.${nodeName} or { }).inputs or { };
            next = ins.${head rest} or null;
          in
          if next == null then
            null
          else if isList next then
            let target = resolve next; in if target == null then null else step target (tail rest) (depth + 1)
          else
            step next (tail rest) (depth + 1);
    in
    step (lock.root or "root") path 0;

  # --- flake.nix inputs against the root node -------------------------------------------------
  nameErrors =
    let
      missing = filter (n: !(hasAttr n rootInputs)) (attrNames declared);
      extra = filter (n: !(hasAttr n declared)) (attrNames rootInputs);
    in
    map (n: "input '${n}' is in flake.nix but not in flake.lock") missing
    ++ map (n: "input '${n}' is in flake.lock but not in flake.nix") extra;

  inputErrors =
    name:
    let
      spec = if isAttrs declared.${name} then declared.${name} else { url = declared.${name}; };
      entry = rootInputs.${name} or null;
      node = if isString entry then nodes.${entry} or null else null;
      expected = if spec ? url then parseUrl spec.url else null;
      subSpecs = spec.inputs or { };
      nodeInputs = if node == null then { } else node.inputs or { };
      subErrors = concatMap (
        sub:
        let
          s = subSpecs.${sub};
          got = nodeInputs.${sub} or null;
        in
        if !(s ? follows) then
          [ "input '${name}.inputs.${sub}' overrides a url; lock checker only understands follows" ]
        else if got != followsPath s.follows then
          [ "input '${name}.inputs.${sub}' follows '${s.follows}' in flake.nix but flake.lock has ${toJSON got}" ]
        else
          [ ]
      ) (attrNames subSpecs);
      # A follows recorded in the lock but no longer declared: Nix would relock this input.
      staleFollows = map (sub: "flake.lock has '${name}.inputs.${sub}' following ${toJSON nodeInputs.${sub}}, flake.nix does not") (
        filter (sub: isList nodeInputs.${sub} && !(hasAttr sub subSpecs)) (attrNames nodeInputs)
      );
    in
    if entry == null then
      [ ]
    else if spec ? follows then
      (if entry == followsPath spec.follows then [ ] else [ "input '${name}' follows '${spec.follows}' but flake.lock has ${toJSON entry}" ])
    else if isList entry then
      [ "input '${name}' is a follows in flake.lock (${toJSON entry}) but has its own url in flake.nix" ]
    else if node == null then
      [ "root input '${name}' points at missing node '${entry}'" ]
    else if expected == null then
      [ "input '${name}': url '${spec.url or "<none>"}' is not a github:/gitlab: reference this checker understands" ]
    else
      (if node.original or null == expected then
        [ ]
      else
        [ "input '${name}': flake.nix says ${toJSON expected}, flake.lock original is ${toJSON (node.original or null)}" ])
      ++ (if (node.flake or true) == (spec.flake or true) then [ ] else [ "input '${name}': flake = ${toJSON (spec.flake or true)} in flake.nix but not in flake.lock" ])
      ++ subErrors
      ++ staleFollows;

  # --- the lock on its own --------------------------------------------------------------------
  nonRoot = filter (n: n != (lock.root or "root")) (attrNames nodes);

  pinErrors = concatMap (
    n:
    let
      locked = nodes.${n}.locked or { };
      original = nodes.${n}.original or { };
    in
    (if locked ? rev && match "[0-9a-f]{40}" locked.rev != null then [ ] else [ "node '${n}' has no 40-hex locked.rev" ])
    ++ (if locked ? narHash && match "sha256-[A-Za-z0-9+/]{43}=" locked.narHash != null then [ ] else [ "node '${n}' has no sha256 locked.narHash" ])
    ++ (if builtins.isInt (locked.lastModified or null) then [ ] else [ "node '${n}' has no locked.lastModified" ])
    ++ (if all (k: !(original ? ${k}) || original.${k} == (locked.${k} or null)) [ "type" "owner" "repo" "rev" ] then
      [ ]
    else
      [ "node '${n}': locked and original disagree on type/owner/repo/rev" ])
  ) nonRoot;

  edges = nodeName: map (v: if isList v then resolve v else v) (builtins.attrValues ((nodes.${nodeName} or { }).inputs or { }));

  referenceErrors = concatMap (
    n:
    concatMap (
      sub:
      let v = nodes.${n}.inputs.${sub}; in
      if isList v then
        (if resolve v == null then [ "node '${n}' input '${sub}' follows ${toJSON v}, which does not resolve" ] else [ ])
      else if hasAttr v nodes then
        [ ]
      else
        [ "node '${n}' input '${sub}' points at missing node '${v}'" ]
    ) (attrNames (nodes.${n}.inputs or { }))
  ) (attrNames nodes);

  reachable = map (x: x.key) (genericClosure {
    startSet = [ { key = lock.root or "root"; } ];
    operator = x: map (k: { key = k; }) (filter (k: k != null && hasAttr k nodes) (edges x.key));
  });
  orphanErrors = map (n: "node '${n}' is not reachable from the root (Nix would drop it on relock)") (
    filter (n: !(builtins.elem n reachable)) (attrNames nodes)
  );

  headerErrors =
    (if (lock.version or null) == 7 then [ ] else [ "flake.lock version is ${toJSON (lock.version or null)}, expected 7" ])
    ++ (if hasAttr (lock.root or "root") nodes then [ ] else [ "flake.lock has no root node" ]);
in
[
  (row "flake.lock: format (version 7, root node)" headerErrors)
  (row "flake.lock: input names match flake.nix (${toString (length (attrNames declared))} inputs)" nameErrors)
  (row "flake.lock: urls, flake flags and follows match flake.nix" (concatMap inputErrors (attrNames declared)))
  (row "flake.lock: every locked node has rev, narHash, lastModified (${toString (length nonRoot)} nodes)" pinErrors)
  (row "flake.lock: node references and follows resolve" referenceErrors)
  (row "flake.lock: no orphan nodes" orphanErrors)
]
