"""The normalised digest of a step function's code: what counts as a change, how far it follows."""

from __future__ import annotations

import functools
import importlib
import itertools
import os
import sys
import textwrap
import types
from collections.abc import Iterator
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from marin.execution.core.identity import workspace_root
from marin.execution.store import code_digest as code_digest_module
from marin.execution.store.code_digest import CLOSURE_LIMIT, UNAVAILABLE, CodeDigest, code_digest

_TICK = itertools.count(1)


class Package:
    """A package written into a temporary folder and imported from there."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder, self.name = folder, name
        (folder / name).mkdir(parents=True)
        self.write("__init__", "")

    def write(self, module: str, text: str) -> None:
        """Write ``module`` with a modification time of its own (two writes in one tick differ too)."""
        path = self.folder / self.name / f"{module}.py"
        path.write_text(textwrap.dedent(text))
        stamp = 1_700_000_000_000_000_000 + next(_TICK) * 1_000_000_000
        os.utime(path, ns=(stamp, stamp))

    def load(self, module: str) -> types.ModuleType:
        """Import ``module`` afresh (its package's other modules too)."""
        for name in [n for n in sys.modules if n == self.name or n.startswith(self.name + ".")]:
            del sys.modules[name]
        importlib.invalidate_caches()
        return importlib.import_module(f"{self.name}.{module}")

    def digest(self, module: str, fn: str = "step") -> CodeDigest:
        return code_digest(getattr(self.load(module), fn), roots=[str(self.folder)])


@pytest.fixture
def pkg(tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Package]:
    name = "cd_" + "".join(c if c.isalnum() else "_" for c in request.node.name.removeprefix("test_"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # no stale bytecode for a file rewritten at once
    package = Package(tmp_path, name)
    yield package
    for module in [n for n in sys.modules if n == name or n.startswith(name + ".")]:
        del sys.modules[module]


def names(digest: CodeDigest) -> list[str]:
    return [name for name, _ in digest.functions]


STEP = '''
    def step(config, output_path):
        total = 0
        for i in range(config["n"]):
            total += i * 2
        return total
'''


def test_comments_docstrings_and_formatting_keep_the_digest(pkg: Package) -> None:
    pkg.write("m", STEP)
    before = pkg.digest("m")
    pkg.write("m", '''
        # a comment above
        def step(config,
                 output_path):  # trailing
            """A docstring, added."""

            total = 0  # start
            for i in range(config['n']):
                total += (i * 2)
            return total
    ''')
    after = pkg.digest("m")
    assert after == before
    assert after.changed_since(before) == ()


def test_a_body_change_changes_the_digest_and_names_the_function(pkg: Package) -> None:
    pkg.write("m", STEP)
    before = pkg.digest("m")
    pkg.write("m", STEP.replace("i * 2", "i * 3"))
    after = pkg.digest("m")
    assert after.digest != before.digest
    assert after.changed_since(before) == (f"{pkg.name}.m:step",)


def test_annotations_and_defaults_count(pkg: Package) -> None:
    pkg.write("m", "def step(config: int, output_path: str, n=1):\n    return n\n")
    plain = pkg.digest("m")
    pkg.write("m", "def step(config: float, output_path: str, n=1):\n    return n\n")
    annotated = pkg.digest("m")
    pkg.write("m", "def step(config: float, output_path: str, n=2):\n    return n\n")
    assert len({plain.digest, annotated.digest, pkg.digest("m").digest}) == 3


HELPERS = '''
    def scale(x):
        return x * 2

    def shift(x):
        return x + 1

    def lazy(x):
        return x - 1

    def unused(x):
        return x
'''

USES_HELPERS = '''
    from . import helpers
    from .helpers import scale

    def step(config, output_path):
        from .helpers import lazy
        return lazy(helpers.shift(scale(config)))
'''


@pytest.mark.parametrize("helper", ["scale", "shift", "lazy"])
def test_a_changed_helper_in_the_workspace_is_named(pkg: Package, helper: str) -> None:
    """Reached by a global name, a module attribute, an import inside the step function."""
    pkg.write("helpers", HELPERS)
    pkg.write("m", USES_HELPERS)
    before = pkg.digest("m")
    assert names(before) == [f"{pkg.name}.m:step"] + [f"{pkg.name}.helpers:{n}" for n in ("lazy", "scale", "shift")]
    pkg.write("helpers", HELPERS.replace(f"def {helper}(x):\n        return x", f"def {helper}(x):\n        return -x"))
    assert pkg.digest("m").changed_since(before) == (f"{pkg.name}.helpers:{helper}",)


def test_a_module_imported_inside_the_step_is_read_not_imported(pkg: Package) -> None:
    """The digest is the same whether or not a worker has imported the step's work yet."""
    pkg.write("work", "import json\n\ndef run(x):\n    return helper(x)\n\ndef helper(x):\n    return json.dumps(x)\n")
    pkg.write("m", "def step(config, output_path):\n    from .work import run\n    return run(config)\n")
    step = pkg.load("m").step
    cold = code_digest(step, roots=[str(pkg.folder)])
    assert f"{pkg.name}.work" not in sys.modules
    assert names(cold)[1:] == [f"{pkg.name}.work:helper", f"{pkg.name}.work:run"]
    step(1, "out")
    assert code_digest(step, roots=[str(pkg.folder)]) == cold


def test_functions_outside_the_workspace_are_not_followed(pkg: Package) -> None:
    pkg.write("m", '''
        import json
        import os.path
        from json import dumps

        def step(config, output_path):
            return os.path.join(output_path, dumps(json.loads(config)))
    ''')
    assert names(pkg.digest("m")) == [f"{pkg.name}.m:step"]


def test_marin_engine_is_not_followed(pkg: Package) -> None:
    pkg.write("m", "from marin.execution.core.identity import fn_identity\n\n"
                   "def step(config, output_path):\n    return fn_identity(step)\n")
    step = pkg.load("m").step
    root = workspace_root()
    assert root is not None
    assert names(code_digest(step, roots=[str(pkg.folder), root])) == [f"{pkg.name}.m:step"]


def test_recursion_terminates(pkg: Package) -> None:
    pkg.write("m", '''
        def step(config, output_path):
            return ping(config) + step(config - 1, output_path) if config else 0

        def ping(n):
            return pong(n - 1) if n else 0

        def pong(n):
            return ping(n - 1) if n else 1
    ''')
    assert names(pkg.digest("m")) == [f"{pkg.name}.m:{n}" for n in ("step", "ping", "pong")]


def test_lambdas_and_builtins_do_not_raise(pkg: Package) -> None:
    pkg.write("m", '''
        double = lambda x: x * 2  # noqa: E731
        pick = sorted([3, 1], key=lambda v: (
            v))
        handlers = dict(a=1,
                        b=lambda x: x + 1)  # its line alone does not parse

        def step(config, output_path):
            return double(len(config)) + max(pick) + sum(map(lambda v: v, config))
    ''')
    module = pkg.load("m")
    digest = code_digest(module.step, roots=[str(pkg.folder)])
    assert names(digest) == [f"{pkg.name}.m:step", f"{pkg.name}.m:<lambda>"]
    assert code_digest(len).functions == (("builtins:len", UNAVAILABLE),)
    assert code_digest(module.double, roots=[str(pkg.folder)]).functions[0][1] != UNAVAILABLE
    assert code_digest(module.handlers["b"], roots=[str(pkg.folder)]).functions[0][1] != UNAVAILABLE
    assert code_digest(eval("lambda x: x")).functions[0][1] == UNAVAILABLE  # no source to read
    assert code_digest(functools.partial(module.step, {}), roots=[str(pkg.folder)]) == digest
    assert code_digest(object()).functions[0][1] == UNAVAILABLE


def test_a_class_is_digested_whole_and_named_where_it_is_defined(
        pkg: Package, monkeypatch: pytest.MonkeyPatch) -> None:
    # A moved class keeps its old module name as its identity (keep_identity); whether that old
    # module is in sys.modules depends on what the process imported: the digest does not.
    source = '''
        import dataclasses

        @dataclasses.dataclass(frozen=True)
        class Config:
            n: int = 3

            def total(self):
                return self.n * 2

            def rounded(self):
                return helper(self.n)

        class Refused(ValueError):
            """No method of its own: only its module says where it lives."""

        Config.__module__ = Refused.__module__ = "elsewhere"  # moved, its identity kept

        def helper(n):
            return round(n)

        def step(config: Config, output_path):
            if config.n < 0:
                raise Refused(config.n)
            return config.total()
    '''
    pkg.write("m", source)
    before = pkg.digest("m")
    assert names(before) == [f"{pkg.name}.m:step", f"{pkg.name}.m:Config", f"{pkg.name}.m:Refused", f"{pkg.name}.m:helper"]
    assert UNAVAILABLE not in dict(before.functions).values()
    module = sys.modules[f"{pkg.name}.m"]
    monkeypatch.setitem(sys.modules, "elsewhere", module)  # the old name imported, as Marin's old paths do
    assert code_digest(module.step, roots=[str(pkg.folder)]) == before
    monkeypatch.delitem(sys.modules, "elsewhere")
    pkg.write("m", source.replace("self.n * 2", "self.n * 4"))
    assert pkg.digest("m").changed_since(before) == (f"{pkg.name}.m:Config",)


def test_a_decorated_step_is_digested_with_its_decorator(pkg: Package) -> None:
    pkg.write("m", '''
        import functools

        def logged(fn):
            @functools.wraps(fn)
            def wrapper(*args):
                return fn(*args)
            return wrapper

        @logged
        def step(config, output_path):
            return config
    ''')
    assert names(pkg.digest("m")) == [f"{pkg.name}.m:step", f"{pkg.name}.m:logged"]


def test_appeared_and_disappeared_functions_are_named_step_first(pkg: Package) -> None:
    pkg.write("m", "def step(c, o):\n    return old(c)\n\ndef old(c):\n    return c\n")
    before = pkg.digest("m")
    pkg.write("m", "def step(c, o):\n    return new(c)\n\ndef new(c):\n    return c\n")
    assert pkg.digest("m").changed_since(before) == tuple(f"{pkg.name}.m:{n}" for n in ("step", "new", "old"))


def test_the_closure_is_followed_to_its_end_and_a_walk_cut_short_says_so(
        pkg: Package, monkeypatch: pytest.MonkeyPatch) -> None:
    depth = 40  # the old walk stopped after 8 hops, quietly
    chain = "".join(f"def f{i}(x):\n    return f{i + 1}(x)\n\n" for i in range(depth))
    pkg.write("chain", f"def step(c, o):\n    return f0(c)\n\n{chain}def f{depth}(x):\n    return x\n")
    deep = pkg.digest("chain")
    assert len(deep.functions) == depth + 2 and deep.incomplete is None
    assert CLOSURE_LIMIT >= 5_000, "the bound is a safety valve far beyond any real step's closure"
    monkeypatch.setattr(code_digest_module, "CLOSURE_LIMIT", 25)
    fan = "".join(f"def g{i}(x):\n    return x\n\n" for i in range(45))
    calls = " + ".join(f"g{i}(c)" for i in range(45))
    pkg.write("fan", f"def step(c, o):\n    return {calls}\n\n{fan}")
    cut = pkg.digest("fan")
    assert len(cut.functions) == 25 and cut.incomplete == "the walk stopped at 25 functions"
    assert cut.made_otherwise(cut) == "code digest incomplete: the walk stopped at 25 functions"
    assert CodeDigest.from_json(cut.to_json()).incomplete == cut.incomplete


def test_a_name_re_exported_past_what_the_reader_follows_makes_the_digest_incomplete(pkg: Package) -> None:
    pkg.write("r9", "def target(x):\n    return x\n")
    for i in range(9):
        pkg.write(f"r{i}", f"from {pkg.name}.r{i + 1} import target\n")
    pkg.write("m", f"def step(c, o):\n    from {pkg.name}.r0 import target\n    return target(c)\n")
    assert "is re-exported more than" in (pkg.digest("m").incomplete or "")
    pkg.write("m", f"def step(c, o):\n    from {pkg.name}.r5 import target\n    return target(c)\n")
    near = pkg.digest("m")
    assert near.incomplete is None and f"{pkg.name}.r9:target" in names(near)


def test_a_script_function_is_named_by_its_real_module(pkg: Package, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg.write("script", "def step(c, o):\n    return c\n")
    step = pkg.load("script").step
    main = types.ModuleType("__main__")
    main.__spec__ = ModuleSpec(f"{pkg.name}.script", None)
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(step, "__module__", "__main__")
    assert names(code_digest(step, roots=[str(pkg.folder)])) == [f"{pkg.name}.script:step"]


def test_a_package_of_the_same_name_elsewhere_is_read_where_it_is_now(
        tmp_path: Path, pkg: Package, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg.write("helpers", HELPERS)
    pkg.write("m", USES_HELPERS)
    first = pkg.digest("m")
    monkeypatch.syspath_prepend(str(tmp_path / "moved"))
    moved = Package(tmp_path / "moved", pkg.name)
    moved.write("helpers", HELPERS.replace("x - 1", "x - 2"))
    moved.write("m", USES_HELPERS)
    assert moved.digest("m").changed_since(first) == (f"{pkg.name}.helpers:lazy",)


def test_json_round_trip_and_damaged_records(pkg: Package) -> None:
    pkg.write("helpers", HELPERS)
    pkg.write("m", USES_HELPERS)
    digest = pkg.digest("m")
    assert CodeDigest.from_json(digest.to_json()) == digest
    for damaged in (None, [], {"digest": "x"}, {"digest": "x", "functions": [["only-a-name"]]}):
        with pytest.raises(ValueError):
            CodeDigest.from_json(damaged)


def test_the_installed_modules_the_code_reaches_are_named(pkg: Package) -> None:
    pkg.write("tools", '''
        import re
        import numpy as np

        _PATTERN = re.compile("x")

        def helper(x):
            return np.asarray(x)
    ''')
    pkg.write("m", f'''
        from {pkg.name}.tools import helper

        def step(c, o):
            import xxhash
            from tokenizers import Tokenizer
            return helper(c), xxhash.xxh64(o), Tokenizer
    ''')
    digest = pkg.digest("m")
    assert digest.modules == ("numpy", "tokenizers", "xxhash")  # not re (the standard library), nor the package itself
    environment = digest.environment()
    assert {"numpy", "tokenizers", "xxhash", "huggingface-hub", "python"} <= environment.keys()  # with what they require
    built = CodeDigest.from_json(digest.to_json())
    assert built.packages == environment and digest.made_otherwise(built) is None
    older = CodeDigest.from_json({**digest.to_json(), "packages": {**environment, "xxhash": "0.1"}})
    assert digest.made_otherwise(older) == f"environment changed: xxhash 0.1 → {environment['xxhash']}"
    unknown = CodeDigest.from_json({k: v for k, v in digest.to_json().items() if k != "packages"})
    assert digest.made_otherwise(unknown) == "the build recorded no package versions"
