"""Wheels for a host without a package index: ``make wheelhouse`` writes them, ``make setup
WHEELHOUSE=dir`` installs from them alone.

    python3 nix/wheelhouse.py build --out DIR --platform manylinux_2_28_x86_64 [--python-version 3.11]
                                    [--exclude jax,jaxlib,...] [--no-uv] [--from-cache UV_CACHE] [--only a,b]
    python3 nix/wheelhouse.py install DIR [--venv .venv] [--system-site-packages]

``build`` (here, with a package index) takes the runtime dependencies ``uv.lock`` pins for the
workspace (``uv export``: no dev group, no workspace members), keeps those whose markers hold on the
target (Python version and platform), leaves out each ``--exclude``d package and what only it
needed (``uv export --prune``: a host's own JAX and what comes with it), and writes into ``DIR`` one
wheel of each: downloaded by pip for the target's platform tags, the hashes checked against the
lock; built from its sdist where a package publishes no wheel (word2number, sqlitedict: pure
Python). It adds the build backend the workspace's packages install with (hatchling and its
dependencies) and, unless ``--no-uv``, uv's own wheel. ``--from-cache`` takes every wheel from a
uv cache instead (re-zipped from what uv unpacked), with no network at all; ``--only`` keeps just
the named packages (tests build a small wheelhouse so). ``DIR/requirements.txt`` pins what was
written, ``DIR/wheelhouse.json`` says for what.

``install`` (there, without an index) makes the environment from ``DIR`` alone: uv (from the
wheelhouse when it is not installed, else ``python3 -m venv`` and pip), a virtual environment
(with ``--system-site-packages`` it sees the host's own packages: its JAX, jaxlib and libtpu),
every pinned wheel without resolving anything (``--no-deps``), and the workspace's packages
editable, as ``make setup`` installs them. It uses only the standard library.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKSPACE_PACKAGES = ("rigging", "fray", "iris", "zephyr", "levanter", "marin")
BUILD_REQUIREMENTS = ("hatchling>=1.25", "editables")
"""What the workspace's packages build with (their ``[build-system]``, and what hatchling asks for an
editable install): installed first, then the packages are installed editable without build
isolation (no index needed for a build environment)."""
_BUILD_PACKAGES = ("hatchling", "editables", "packaging", "pathspec", "pluggy", "trove-classifiers")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _packaging():
    """``packaging`` (markers, tags): the environment's, else the copy pip carries."""
    try:
        import packaging.markers
        import packaging.tags
        import packaging.utils

        return packaging
    except ImportError:
        from pip._vendor import packaging  # type: ignore[no-redef]

        return packaging


@dataclass(frozen=True)
class Target:
    """The Python and platform the wheels are for."""

    platform: str
    python_version: str

    @property
    def platforms(self) -> list[str]:
        """The platform tags this one accepts: a manylinux tag takes every older glibc's too."""
        found = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", self.platform)
        if not found:
            return [self.platform]
        major, minor, arch = int(found.group(1)), int(found.group(2)), found.group(3)
        tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 4, -1)]
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        return tags + [f"{legacy[m]}_{arch}" for m in (17, 12, 5) if m <= minor]

    def tags(self) -> list[str]:
        """Every wheel tag the target installs, most specific first."""
        tags = _packaging().tags
        version = tuple(int(p) for p in self.python_version.split(".")[:2])
        found = [*tags.cpython_tags(version, platforms=self.platforms),
                 *tags.compatible_tags(version, f"cp{version[0]}{version[1]}", self.platforms)]
        return [str(t) for t in found]

    def marker_environment(self) -> dict[str, str]:
        """What markers (``sys_platform == 'linux'``) are evaluated against."""
        machine = self.platform.rsplit("_", 1)[-1] if "_" in self.platform else self.platform
        if self.platform.startswith(("manylinux", "musllinux", "linux")):
            system, sys_platform = "Linux", "linux"
            machine = re.sub(r"^.*?_(x86_64|aarch64|ppc64le|s390x|i686|armv7l)$", r"\1", self.platform)
        elif self.platform.startswith("macosx"):
            system, sys_platform = "Darwin", "darwin"
        else:
            system, sys_platform, machine = "Windows", "win32", "AMD64"
        major_minor = ".".join(self.python_version.split(".")[:2])
        full = self.python_version if self.python_version.count(".") == 2 else f"{major_minor}.0"
        return {"python_version": major_minor, "python_full_version": full, "sys_platform": sys_platform,
                "platform_system": system, "platform_machine": machine, "os_name": "nt" if system == "Windows"
                else "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython"}


@dataclass
class Pin:
    """One package the lock pins, with the files it publishes."""

    name: str
    version: str
    wheels: list[dict] = field(default_factory=list)
    sdist: bool = False

    def wheel_for(self, tags: list[str]) -> dict | None:
        """The lock's wheel for the most specific of ``tags`` it has, or None."""
        rank = {tag: i for i, tag in enumerate(tags)}
        best = None
        for wheel in self.wheels:
            filename = wheel["url"].rsplit("/", 1)[-1]
            for tag in _packaging().utils.parse_wheel_filename(filename)[3]:
                if str(tag) in rank and (best is None or rank[str(tag)] < best[0]):
                    best = (rank[str(tag)], wheel)
        return best[1] if best is not None else None


def pinned(target: Target, exclude: list[str], prune: list[str], only: list[str], uv: str) -> list[Pin]:
    """The runtime dependencies the lock pins whose markers hold on ``target``, less ``exclude``
    (those packages alone: the host has them) and ``prune`` (those and what only they need: Ray
    on a host that cannot run it); just ``only`` when given."""
    # The workspace root depends on every member: its tree is the whole runtime environment.
    command = [uv, "export", "--frozen", "--no-dev", "--no-emit-workspace", "--no-hashes",
               "--no-header", "--no-annotate", "--format", "requirements.txt"]
    for name in prune:
        command += ["--prune", name]
    lines = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True).stdout.splitlines()
    markers = _packaging().markers
    environment = target.marker_environment()
    lock = {(_normalize(p["name"]), p["version"]): p for p in tomllib.loads((ROOT / "uv.lock").read_text())["package"]}
    pins = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        spec, _, marker = line.partition(";")
        if marker.strip() and not markers.Marker(marker.strip()).evaluate(environment):
            continue
        name, version = (part.strip() for part in spec.split("=="))
        if (only and _normalize(name) not in only) or _normalize(name) in exclude:
            continue
        entry = lock.get((_normalize(name), version), {})
        pins.append(Pin(name, version, entry.get("wheels", []), "sdist" in entry))
    return pins


def _run(command: list[str], **kwargs) -> None:
    print("+ " + " ".join(command), flush=True)
    subprocess.run(command, check=True, **kwargs)


def _pip_target(target: Target) -> list[str]:
    version = "".join(target.python_version.split(".")[:2])
    platforms = [arg for p in target.platforms for arg in ("--platform", p)]
    return ["--only-binary=:all:", "--python-version", version, "--implementation", "cp", *platforms]


def _download(pins: list[Pin], target: Target, out: Path) -> None:
    """Each pin's wheel by pip, its hash checked against the lock's; sdist-only pins built."""
    tags = target.tags()
    wanted, built = [], []
    for pin in pins:
        if pin.wheel_for(tags) is not None:
            hashes = " ".join(f"--hash={w['hash']}" for w in pin.wheels)
            wanted.append(f"{pin.name}=={pin.version} {hashes}")
        elif pin.sdist:
            built.append(pin)
        else:
            raise SystemExit(f"wheelhouse: {pin.name}=={pin.version} has no wheel for {target.platform} "
                             f"(Python {target.python_version}) and no sdist; leave it out with --exclude {pin.name}")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(wanted) + "\n")
    try:
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
              *_pip_target(target), "-d", str(out), "-r", f.name])
    finally:
        os.unlink(f.name)
    for pin in built:  # pure-Python sdists: the wheel built here installs anywhere
        _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-binary", pin.name, "-w", str(out),
              f"{pin.name}=={pin.version}"])


def _zip_unpacked(folder: Path, wheel: Path) -> None:
    """A wheel from the folder uv unpacked it into (its RECORD still lists every file)."""
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                z.write(path, path.relative_to(folder).as_posix())


def _wheel_tags(folder: Path) -> list[str]:
    """The tags an unpacked wheel's ``*.dist-info/WHEEL`` names (uv's cache names some entries by a
    hash of their tags, so the folder's name cannot be trusted to hold them)."""
    for wheel in folder.glob("*.dist-info/WHEEL"):
        return [line.split(":", 1)[1].strip() for line in wheel.read_text().splitlines() if line.startswith("Tag:")]
    return []


def _wheel_name(pin: Pin, tags: list[str]) -> str:
    """``<dist>-<version>-<python>-<abi>-<platform>.whl``, each part the set its tags use (``py2.py3``)."""
    parts = [sorted({t.split("-")[i] for t in tags}) for i in range(3)]
    return f"{pin.name.replace('-', '_')}-{pin.version}-" + "-".join(".".join(p) for p in parts) + ".whl"


def _from_cache(pins: list[Pin], target: Target, cache: Path, out: Path) -> list[str]:
    """Each pin's wheel from a uv cache (``wheels-v*``: wheels uv unpacked; ``sdists-v*``: wheels it
    built from sdists; the buckets' versions change with uv's); the names of those it lacks."""
    tags = set(target.tags())
    missing = []
    for pin in pins:
        name = _normalize(pin.name)
        unpacked = sorted(cache.glob(f"wheels-v*/pypi/{name}/{pin.version}-*"))
        usable = [p for p in unpacked if p.is_dir() and set(_wheel_tags(p)) & tags]
        built = sorted(cache.glob(f"sdists-v*/pypi/{name}/{pin.version}/*/*.whl"))
        if usable:
            _zip_unpacked(usable[0], out / _wheel_name(pin, _wheel_tags(usable[0])))
        elif built:
            shutil.copy2(built[0], out / built[0].name)
        else:
            missing.append(pin.name)
    return missing


def _build_requirements(target: Target, out: Path, cache: Path | None) -> list[str]:
    """The workspace's build backend into ``out``; returns its pins."""
    if cache is None:
        _run([sys.executable, "-m", "pip", "download", "--quiet", *_pip_target(target), "-d", str(out),
              *BUILD_REQUIREMENTS])
        return sorted(f"{n}=={v}" for n, v in _wheels_in(out) if n in _BUILD_PACKAGES)
    found = []
    for name in _BUILD_PACKAGES:
        versions = sorted(cache.glob(f"wheels-v*/pypi/{name}/*-py3-none-any"), key=lambda p: p.stat().st_mtime)
        if not versions:
            raise SystemExit(f"wheelhouse: the uv cache {cache} has no {name} wheel (the workspace builds with it)")
        pin = Pin(name, versions[-1].name.split("-")[0])
        _zip_unpacked(versions[-1], out / _wheel_name(pin, _wheel_tags(versions[-1])))
        found.append(f"{name}=={pin.version}")
    return found


def _wheels_in(folder: Path) -> list[tuple[str, str]]:
    out = []
    for wheel in folder.glob("*.whl"):
        name, version = wheel.name.split("-")[:2]
        out.append((_normalize(name), version))
    return out


def build(args: argparse.Namespace) -> None:
    target = Target(args.platform, args.python_version)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    exclude, prune, only = (sorted({_normalize(n) for n in text.replace(",", " ").split()})
                            for text in (args.exclude, args.prune, args.only))
    uv = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    pins = pinned(target, exclude, prune, only, uv)
    cache = Path(args.from_cache) if args.from_cache else None
    if cache is None:
        _download(pins, target, out)
    else:
        missing = _from_cache(pins, target, cache, out)
        if missing:
            raise SystemExit(f"wheelhouse: the uv cache {cache} lacks wheels of {', '.join(missing)} for "
                             f"{target.platform}; build without --from-cache (with an index)")
    build_pins = _build_requirements(target, out, cache)
    uv_version = None
    if not args.no_uv and cache is None:
        uv_version = subprocess.run([uv, "--version"], check=True, capture_output=True, text=True).stdout.split()[1]
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *_pip_target(target), "-d", str(out),
              f"uv=={uv_version}"])
    (out / "requirements.txt").write_text("".join(f"{p.name}=={p.version}\n" for p in pins))
    (out / "build-requirements.txt").write_text("".join(f"{p}\n" for p in build_pins))
    lock_digest = hashlib.sha256((ROOT / "uv.lock").read_bytes()).hexdigest()
    info = {"platform": target.platform, "python_version": target.python_version, "excluded": exclude,
            "pruned": prune, "only": only, "uv": uv_version, "uv_lock_sha256": lock_digest, "packages": len(pins)}
    (out / "wheelhouse.json").write_text(json.dumps(info, indent=2) + "\n")
    size = sum(p.stat().st_size for p in out.glob("*.whl"))
    print(f"wheelhouse: {len(list(out.glob('*.whl')))} wheels, {size / 2**20:.1f} MiB in {out} for "
          f"{target.platform}, Python {target.python_version}" + (f"; left out {', '.join(exclude + prune)}"
                                                                   if exclude or prune else ""))
    if args.split_mib:
        split(out, args.split_mib)


def split(out: Path, limit_mib: float) -> list[Path]:
    """Copies of ``out`` in parts (``out-1``, ``out-2`` ...) of at most ``limit_mib`` of wheels each
    (each with the pins, the settings and its number), for a transfer that limits its size: install
    them in order; every part but the last installs its wheels alone, the last the rest."""
    wheels = sorted(out.glob("*.whl"), key=lambda p: p.stat().st_size, reverse=True)
    parts: list[list[Path]] = []
    sizes: list[int] = []
    for wheel in wheels:  # largest first, each into the first part it fits
        size = wheel.stat().st_size
        if size > limit_mib * 2**20:
            raise SystemExit(f"wheelhouse: {wheel.name} ({size / 2**20:.1f} MiB) alone exceeds {limit_mib} MiB")
        room = next((i for i, used in enumerate(sizes) if used + size <= limit_mib * 2**20), None)
        if room is None:
            parts.append([])
            sizes.append(0)
            room = len(parts) - 1
        parts[room].append(wheel)
        sizes[room] += size
    folders = []
    info = json.loads((out / "wheelhouse.json").read_text())
    for i, part in enumerate(parts, start=1):
        folder = out.with_name(f"{out.name}-{i}")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for path in [*part, out / "requirements.txt", out / "build-requirements.txt"]:
            shutil.copy2(path, folder / path.name)
        (folder / "wheelhouse.json").write_text(json.dumps({**info, "part": i, "parts": len(parts)}, indent=2) + "\n")
        folders.append(folder)
        print(f"wheelhouse: part {i} of {len(parts)}: {folder} ({sizes[i - 1] / 2**20:.1f} MiB, {len(part)} wheels)")
    return folders


def _uv(wheelhouse: Path) -> str | None:
    """uv: installed, or installed now from the wheelhouse (``pip --user``, as ``make setup`` does); None: neither."""
    for candidate in (shutil.which("uv"), str(Path.home() / ".local" / "bin" / "uv")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    if not list(wheelhouse.glob("uv-*.whl")):
        return None
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--user", "--quiet", "--no-index", "--find-links",
                           str(wheelhouse), "uv"], check=False)
    installed = Path.home() / ".local" / "bin" / "uv"
    return str(installed) if done.returncode == 0 and installed.exists() else None


class _Installer:
    """Installs into one virtual environment, made on first use: by uv where there is one, else by
    this interpreter's ``venv`` and pip; never from an index unless one is given."""

    def __init__(self, venv: Path, wheelhouse: Path, system_site_packages: bool):
        self.python = venv / "bin" / "python"
        self.uv = _uv(wheelhouse)
        site = ["--system-site-packages"] if system_site_packages else []
        if self.uv is not None:
            self.env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
            if not self.python.exists():
                _run([self.uv, "venv", "--quiet", *site, "--python", sys.executable, str(venv)], env=self.env)
            self.pip = [self.uv, "pip", "install", "--quiet", "--python", str(self.python)]
            return
        self.env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
        self.pip = [str(self.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--no-compile"]
        if self.python.exists():
            if subprocess.run([*self.pip[:3], "--version"], capture_output=True, check=False).returncode == 0:
                return
        elif subprocess.run([sys.executable, "-m", "venv", *site, str(venv)], check=False).returncode == 0:
            return
        # No ensurepip for this interpreter: its own pip installs into the environment.
        if not self.python.exists():
            _run([sys.executable, "-m", "venv", "--without-pip", *site, str(venv)])
        self.pip = [sys.executable, "-m", "pip", "--python", str(self.python), "install", "--quiet", "--no-compile",
                    "--disable-pip-version-check"]

    def install(self, *args: str) -> None:
        _run([*self.pip, *args], env=self.env)

    def from_index(self, index: str, names: list[str]) -> None:
        """``names`` from the host's own index (its versions, no dependencies): all at once, else
        each alone, so that one the index lacks leaves the others installed."""
        command = [*self.pip, "--index-url", index, "--only-binary=:all:", "--no-deps"]
        if subprocess.run([*command, *names], env=self.env, check=False).returncode != 0:
            for name in names:
                subprocess.run([*command, name], env=self.env, check=False)

    def missing(self, names: list[str]) -> list[str]:
        """Which of ``names`` the environment (with what it sees of the host's) does not have."""
        code = ("import importlib.metadata as m, sys\nfor n in sys.argv[1:]:\n    try: m.distribution(n)\n"
                "    except m.PackageNotFoundError: print(n)")
        found = subprocess.run([str(self.python), "-c", code, *names], check=True, capture_output=True, text=True)
        return found.stdout.split()


def install(args: argparse.Namespace) -> None:
    wheelhouse = Path(args.wheelhouse).resolve()
    info_file = wheelhouse / "wheelhouse.json"
    requirements = [wheelhouse / "requirements.txt", wheelhouse / "build-requirements.txt"]
    for path in [info_file, *requirements]:
        if not path.is_file():
            raise SystemExit(f"wheelhouse: {path} is missing: is {wheelhouse} a folder `make wheelhouse` wrote?")
    offline = ["--no-index", "--find-links", str(wheelhouse), "--no-deps"]
    info = json.loads(info_file.read_text())
    installer = _Installer(Path(args.venv), wheelhouse, args.system_site_packages)
    if info.get("part", 1) < info.get("parts", 1):
        wheels = sorted(str(w) for w in wheelhouse.glob("*.whl") if not w.name.startswith("uv-"))
        installer.install(*offline, *wheels)
        print(f"wheelhouse: part {info['part']} of {info['parts']}: {len(wheels)} wheels installed into {args.venv}; "
              "install the next part")
        return
    if info.get("parts", 1) > 1:
        here = {name for name, _version in _wheels_in(wheelhouse)}
        pins = [line.split("==")[0] for r in requirements for line in r.read_text().split()]
        lacking = installer.missing([p for p in pins if _normalize(p) not in here])
        if lacking:
            raise SystemExit(f"wheelhouse: {wheelhouse} is the last of {info['parts']} parts, and the environment "
                             f"lacks what the others hold ({', '.join(lacking[:8])}{' ...' if len(lacking) > 8 else ''}): "
                             "install parts 1 to {} first".format(info["parts"] - 1))
    installer.install(*offline, *(a for r in requirements for a in ("-r", str(r))))
    excluded = info.get("excluded", [])
    absent = installer.missing(excluded) if excluded else []
    if absent and args.host_index:
        installer.from_index(args.host_index, absent)
        absent = installer.missing(absent)
    editable = [arg for p in WORKSPACE_PACKAGES for arg in ("-e", str(ROOT / "pkgs" / p))] + ["-e", str(ROOT)]
    installer.install(*offline, "--no-build-isolation", *editable)
    print(f"wheelhouse: {args.venv} made from {wheelhouse} with no index"
          + (" (it sees this host's own packages too)" if args.system_site_packages else ""))
    if args.stamp:
        Path(args.stamp).touch()
    if absent:
        print(f"wheelhouse: left out of the wheelhouse and not found here: {', '.join(absent)} "
              "(neither this Python nor the host's index has them: install them, or give --host-index)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="wheelhouse", description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    b = verbs.add_parser("build", help="write the lock's wheels for a platform into a folder (needs an index)")
    b.add_argument("--out", required=True)
    b.add_argument("--platform", required=True, help="a wheel platform tag: manylinux_2_28_x86_64, macosx_14_0_arm64")
    b.add_argument("--python-version", default="3.11")
    b.add_argument("--exclude", default="", help="packages the host provides (comma- or space-separated)")
    b.add_argument("--prune", default="", help="packages left out with what only they need (ray)")
    b.add_argument("--split-mib", type=float, default=None, help="also write parts of at most this many MiB")
    b.add_argument("--only", default="", help="just these packages, comma-separated (a small wheelhouse)")
    b.add_argument("--no-uv", action="store_true", help="leave uv's own wheel out")
    b.add_argument("--from-cache", default=None, metavar="UV_CACHE", help="take the wheels from this uv cache (no network)")
    i = verbs.add_parser("install", help="make a virtual environment from a wheelhouse alone (no index)")
    i.add_argument("wheelhouse")
    i.add_argument("--venv", default=".venv")
    i.add_argument("--system-site-packages", action="store_true",
                   help="let the environment see this host's own packages (its JAX and libtpu)")
    i.add_argument("--stamp", default=None, help="a file to touch once the environment is complete")
    i.add_argument("--host-index", default=None, metavar="URL",
                   help="the host's own index (file:///opt/pypi/simple), for the packages left out that it lacks")
    args = parser.parse_args(argv)
    build(args) if args.verb == "build" else install(args)


if __name__ == "__main__":
    main()
