#!/usr/bin/env python3
"""Build specops' execution environment (execution-environment.yml) on the local docker
engine, or reuse the one already built from the same inputs.

    scripts/release/build-ee.py [--tag specops/ee:latest] [--no-save] [--force]
    scripts/release/build-ee.py --file ee/upstream/execution-environment.yml --standin-base \
        [--tag specops/ee-upstream:latest]

The second builds the same content on an upstream EE base (Automation Platform's
ee-minimal: its Python, microdnf); ``--standin-base`` first builds the local stand-in of
that base (ee/upstream/standin/Containerfile, on the project's Debian image, with the
wheelhouse served) and gives it to the build as ``EE_BASE_IMAGE``, where no registry is
reachable (CI). Its saves go under ``$SPECOPS_CACHE/ee/upstream``.

1. The tools: a venv ``.cache/ee-tools`` with ansible-builder and ansible-navigator
   (:data:`TOOL_PINS`) from their lock ``ee/tools.lock`` (hash-checked), made again only
   when the lock changes.
2. The inputs the EE file names under ``.cache/ee/inputs/``: the collection tarball
   (scripts/release/build-collection.py) as ``specops-infra.tar.gz`` and the collections it
   depends on (galaxy.yml ``dependencies``), copied from the pinned ``ansible`` bundle
   of this interpreter's environment (Galaxy is not reached); and the controller's
   wheel (scripts/release/build-wheel.py) in ``wheel/``, which the definition installs by file
   (``specops @ file:///output/specops/<wheel>``: the build refuses a definition that
   names another file).
3. The inputs' hash (:func:`inputs_hash`): the EE file, ``ee/``, the tarball's and the
   wheel's contents (member names and bytes, not their timestamps), the dependency
   collections' manifests, the wheelhouse's requirements and the base image's id.
   An image labelled ``specops.ee.inputs=<hash>`` is the EE: nothing is built. Else a
   ``docker save`` of it under ``$SPECOPS_CACHE/ee/<hash>.tar`` (CI machines keep
   /var/cache/specops, not always their docker images) is loaded. Else:
4. The wheelhouse (``.cache/ee/wheelhouse``; ``pip download`` of the EE's lock
   ``ee/requirements.lock``, every file hash-checked, after checking that the lock holds
   everything the build installs; downloaded again only when the lock changes), served
   on 127.0.0.1 for the build: the build runs with
   the host's network (``--network host``) and the build arguments ``PIP_FIND_LINKS``
   and ``PIP_NO_INDEX`` (declared ``ARG`` in the EE file, so nothing of them stays in
   the image); then ``ansible-builder build``, labelled with the hash, and
   ``docker save`` of the result (the previous save is removed).

The last line printed is ``image=<tag> id=<image id> inputs=<hash> how=<built|cached|loaded>
seconds=<n>``; tests/ee/conftest.py reads it.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import hashlib
import http.server
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

__all__ = [
    "LABEL",
    "TOOL_PINS",
    "BuildError",
    "Decision",
    "decide",
    "digest_tarball",
    "digest_wheel",
    "inputs_hash",
    "wheelhouse_requirements",
]

REPO = Path(__file__).resolve().parents[2]
EE_FILE = REPO / "execution-environment.yml"
CACHE = REPO / ".cache/ee"
INPUTS = CACHE / "inputs"
WHEELHOUSE = CACHE / "wheelhouse"
TOOLS = REPO / ".cache/ee-tools"
SAVES = Path(os.environ.get("SPECOPS_CACHE", "/var/cache/specops")) / "ee"
DEFAULT_TAG = "specops/ee:latest"
UPSTREAM_FILE = REPO / "ee/upstream/execution-environment.yml"
UPSTREAM_TAG = "specops/ee-upstream:latest"
STANDIN_FILE = REPO / "ee/upstream/standin/Containerfile"
STANDIN_TAG = "specops/ee-minimal-standin:latest"
# How a definition names the controller's wheel (dependencies.python).
WHEEL_LINE = re.compile(r"^specops @ file:///output/specops/(specops-[^/\s]+\.whl)$")
LABEL = "specops.ee.inputs"
WHEELHOUSE_PORT = 47317
# The tools, pinned (PyPI). ansible-navigator brings ansible-runner and ansible-core.
TOOL_PINS = ("ansible-builder==3.2.0", "ansible-navigator==26.10.0")  # = ee/tools.txt
TOOLS_LOCK = REPO / "ee/tools.lock"
EE_LOCK = REPO / "ee/requirements.lock"
# What ansible-builder itself installs on top of the EE file's packages: its builder
# stage's tools, and the container init (options.container_init's default).
BUILDER_PACKAGES = ("bindep", "pyyaml", "packaging", "dumb-init==1.2.5")
BOOTSTRAP_PIP = re.compile(r"bootstrap-pip\.py\s+(pip==\S+)")
PIN = re.compile(r"^([A-Za-z0-9_.\[\],-]+)==\S+$")
COLLECTIONS = Path(sysconfig.get_paths()["purelib"]) / "ansible_collections"

Decision = Literal["cached", "load", "build"]


class BuildError(RuntimeError):
    """The EE could not be made (the message says which step and why)."""


# --- pure logic (tests/unit/test_build_ee.py)


def digest_tarball(path: Path) -> str:
    """sha256 over a tarball's members (names, types and bytes), not its timestamps:
    two builds of the same collection give the same digest."""
    h = hashlib.sha256()
    with tarfile.open(path) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            h.update(f"{member.name}\0{member.type!r}\0{member.mode:o}\0".encode())
            if member.isfile():
                data = tar.extractfile(member)
                h.update(data.read() if data else b"")
            h.update(b"\0")
    return h.hexdigest()


def digest_wheel(path: Path) -> str:
    """sha256 over a wheel's members (names and bytes), not the zip's timestamps."""
    h = hashlib.sha256()
    with zipfile.ZipFile(path) as whl:
        for name in sorted(whl.namelist()):
            h.update(name.encode() + b"\0" + whl.read(name) + b"\0")
    return h.hexdigest()


def inputs_hash(parts: Mapping[str, str]) -> str:
    """One hash of named input digests; the order they were gathered in does not count."""
    text = json.dumps(dict(sorted(parts.items())), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def decide(*, labelled: bool, saved: bool, force: bool = False) -> Decision:
    """What to do for an inputs hash: an image with its label is the EE (``cached``);
    else a saved image of it is loaded (``load``); else it is built (``build``).
    ``force`` always builds."""
    if force:
        return "build"
    if labelled:
        return "cached"
    return "load" if saved else "build"


def wheelhouse_requirements(
    definition: Mapping[str, Any], collection_requirements: Iterable[str]
) -> list[str]:
    """Every requirement the build installs from the wheelhouse, except the controller's
    own wheel (added as a file): pip (the base stage's bootstrap), ansible-core and
    ansible-runner, the EE file's Python packages, the dependency collections' and
    ansible-builder's own (:data:`BUILDER_PACKAGES`)."""
    deps = definition.get("dependencies") or {}
    out: list[str] = []
    steps = (definition.get("additional_build_steps") or {}).get("prepend_base") or []
    for step in steps if isinstance(steps, list) else str(steps).splitlines():
        if m := BOOTSTRAP_PIP.search(str(step)):
            out.append(m[1])
    if not out and (definition.get("options") or {}).get("skip_pip_install"):
        raise BuildError("the definition skips pip's install and has no `bootstrap-pip.py"
                         " pip==X` step")  # fmt: skip
    for key in ("ansible_core", "ansible_runner"):
        package = (deps.get(key) or {}).get("package_pip")
        if not package:
            raise BuildError(f"execution-environment.yml: dependencies.{key}.package_pip unset")
        out.append(str(package))
    python = deps.get("python") or []
    if not isinstance(python, list):
        raise BuildError("execution-environment.yml: dependencies.python must be a list")
    out += [str(r) for r in python if not str(r).startswith("specops")]
    out += list(collection_requirements)
    out += list(BUILDER_PACKAGES)
    return sorted(dict.fromkeys(out))


# --- steps


def _say(text: str) -> None:
    print(f"build_ee: {text}", flush=True)


def _run(argv: list[str], **kwargs: Any) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(argv[:4])} ... failed ({proc.returncode}):\n"
                         f"{proc.stdout[-4000:]}{proc.stderr[-4000:]}")  # fmt: skip
    return str(proc.stdout)


def _load_script(name: str) -> Any:
    path = REPO / "scripts" / name
    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
    if spec is None or spec.loader is None:
        raise BuildError(f"{path}: not a Python script")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _require_current(name: str) -> None:
    """Refuse a lock made from other inputs than today's (scripts/release/lock.py check)."""
    problems = _load_script("release/lock.py").check([name])
    if problems:
        raise BuildError("; ".join(problems))


def _lock_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tools(venv: Path = TOOLS) -> Path:
    """The tool venv (ansible-builder, ansible-navigator) from ``ee/tools.lock``; made again
    when the lock changes."""
    _require_current("ee-tools")
    stamp = venv / ".specops-lock"
    want = _lock_digest(TOOLS_LOCK)
    if (venv / "bin/ansible-builder").exists() and stamp.is_file() and stamp.read_text() == want:
        return venv
    _say(f"tools: making {venv} from {TOOLS_LOCK.name} ({', '.join(TOOL_PINS)})")
    _run(["/usr/bin/python3", "-m", "venv", "--clear", str(venv)])
    _run([str(venv / "bin/pip"), "install", "-q", "--disable-pip-version-check",
          "--require-hashes", "--no-deps", "-r", str(TOOLS_LOCK)])  # fmt: skip
    stamp.write_text(want)
    return venv


def constraints() -> list[str]:
    """The EE lock's ``name==version`` pins (ee/requirements.lock, no hashes, no markers)."""
    lock = _load_script("release/lock.py")
    return [f"{key.split(' ; ')[0]}=={version}" for key, version in lock.pins(EE_LOCK).items()]


def missing_from_lock(requirements: Iterable[str], pinned: Mapping[str, str]) -> list[str]:
    """The requirements (``name[extra] <specifier>``) the lock's pins do not satisfy."""
    from packaging.requirements import Requirement  # noqa: PLC0415 - the venv's
    from packaging.utils import canonicalize_name  # noqa: PLC0415

    versions = {canonicalize_name(k.split(" ; ")[0]): v for k, v in pinned.items()}
    out = []
    for text in requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        have = versions.get(canonicalize_name(req.name))
        if have is None or not req.specifier.contains(have, prereleases=True):
            out.append(f"{text} (the lock has {have or 'nothing'})")
    return out


def build_wheel(out: Path) -> Path:
    """The controller package's wheel (scripts/release/build-wheel.py: ``pip wheel .`` from a
    copy, nothing left in the checkout)."""
    return Path(_load_script("release/build-wheel.py").build(REPO, out))


def dependency_collections() -> list[str]:
    """galaxy.yml's dependencies (``namespace.name``)."""
    galaxy = yaml.safe_load(
        (REPO / "collections/ansible_collections/specops/infra/galaxy.yml").read_text()
    )
    return sorted(galaxy.get("dependencies") or {})


def collection_requirements(root: Path, names: Iterable[str], excluded: Iterable[str]) -> list[str]:
    """The Python requirements ansible-builder's introspection reads from the collections
    under ``root`` (meta/execution-environment.yml's python file, else requirements.txt),
    without those of ``excluded``."""
    out: list[str] = []
    skip = set(excluded)
    for name in names:
        if name in skip:
            continue
        path = root / "ansible_collections" / name.replace(".", "/")
        meta = path / "meta/execution-environment.yml"
        req = path / "requirements.txt"
        if meta.is_file():
            python = ((yaml.safe_load(meta.read_text()) or {}).get("dependencies") or {}).get(
                "python"
            )
            req = path / python if isinstance(python, str) else path / "__none__"
        if req.is_file():
            for raw in req.read_text().splitlines():
                line = raw.split("#", 1)[0].strip()
                if line:
                    out.append(line)
    return out


def wheel_named(definition: Mapping[str, Any]) -> str:
    """The file name of the controller's wheel the definition installs (by file)."""
    for line in (definition.get("dependencies") or {}).get("python") or []:
        if m := WHEEL_LINE.match(str(line)):
            return m[1]
    raise BuildError("the definition installs no `specops @ file:///output/specops/<wheel>`"
                     " (the controller's wheel, by file: never a name from an index)")  # fmt: skip


def prepare_inputs(
    definition: Mapping[str, Any], definition_path: Path = EE_FILE
) -> tuple[dict[str, str], Path, list[str]]:
    """The tarball, the dependency collections and the wheel; their digests."""
    parts: dict[str, str] = {}
    INPUTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        built = _load_script("release/build-collection.py").build(REPO, Path(tmp))
        shutil.copyfile(built, INPUTS / "specops-infra.tar.gz")
    parts["collection"] = digest_tarball(INPUTS / "specops-infra.tar.gz")
    names = dependency_collections()
    root = INPUTS / "collections"
    shutil.rmtree(root, ignore_errors=True)
    for name in names:
        src = COLLECTIONS / name.replace(".", "/")
        if not (src / "MANIFEST.json").is_file():
            raise BuildError(f"{name}: not installed at {src} (the `ansible` bundle's copy)")
        shutil.copytree(src, root / "ansible_collections" / name.replace(".", "/"),
                        ignore=shutil.ignore_patterns("__pycache__", "tests"))  # fmt: skip
        manifest = (src / "MANIFEST.json").read_bytes() + (src / "FILES.json").read_bytes()
        parts[f"collection:{name}"] = hashlib.sha256(manifest).hexdigest()
    wheel = build_wheel(CACHE / "dist")
    named = wheel_named(definition)
    if named != wheel.name:
        raise BuildError(
            f"{definition_path.relative_to(REPO)} installs {named}, the wheel built is"
            f" {wheel.name} (scripts/release/release.py bump writes both)"
        )
    shutil.rmtree(INPUTS / "wheel", ignore_errors=True)
    (INPUTS / "wheel").mkdir()
    shutil.copy2(wheel, INPUTS / "wheel" / wheel.name)
    parts["wheel"] = digest_wheel(wheel)
    excluded = ((definition.get("dependencies") or {}).get("exclude") or {}).get(
        "all_from_collections"
    ) or []
    own = collection_requirements(REPO / "collections", ["specops.infra"], [])
    reqs = wheelhouse_requirements(
        definition, [*own, *collection_requirements(root, names, excluded)]
    )
    parts["wheelhouse"] = json.dumps([reqs, _lock_digest(EE_LOCK)])
    # ee/'s helpers and locks; a definition elsewhere under ee/ with the files beside it
    # (the upstream one: its stand-in), so that one's change leaves the other's EE cached
    ee_files = [p for p in (REPO / "ee").iterdir() if p.is_file()]
    if definition_path.parent not in (REPO, REPO / "ee"):
        ee_files += [p for p in definition_path.parent.rglob("*") if p.is_file()]
    for path in sorted(ee_files):
        parts[str(path.relative_to(REPO))] = hashlib.sha256(path.read_bytes()).hexdigest()
    parts["definition"] = hashlib.sha256(definition_path.read_bytes()).hexdigest()
    parts["tools"] = _lock_digest(TOOLS_LOCK)
    return parts, wheel, reqs


def base_image(definition: Mapping[str, Any], override: str | None = None) -> tuple[str, str]:
    """The base image's name (``override``, else the definition's) and what identifies its
    content: its layers' digests and its config's env, command and labels, not its id
    (``scripts/setup.sh image`` imports the same cached rootfs on a fresh machine under a
    new id: the saved EE still fits)."""
    name = override or str(definition["images"]["base_image"]["name"])
    fmt = ("{{json .RootFS.Layers}} {{json .Config.Env}} {{json .Config.Cmd}} "
           "{{json .Config.Labels}}")  # fmt: skip
    out = subprocess.run(["docker", "image", "inspect", "-f", fmt, name],
                         capture_output=True, text=True, check=False)  # fmt: skip
    if out.returncode != 0:
        raise BuildError(f"base image {name}: not on this docker engine "
                         "(scripts/setup.sh image makes it)")  # fmt: skip
    return name, hashlib.sha256(out.stdout.strip().encode()).hexdigest()


def labelled_image(digest: str, tag: str = DEFAULT_TAG) -> str | None:
    """The EE built from ``digest``: the image with its label. An image built FROM the EE
    inherits the label until it sets its own, and docker lists the newest step of a
    build in progress: of several, the one whose parent has no such label (the EE, not
    a step above it), and of those the one ``tag`` names."""
    # -a: the steps above the EE too (they are the EE's children: not roots)
    out = _run(["docker", "images", "-a", "-q", "--no-trunc", "--filter",
                f"label={LABEL}={digest}"])  # fmt: skip
    ids = list(dict.fromkeys(out.split()))
    if len(ids) <= 1:
        return ids[0] if ids else None
    parents = {i: _run(["docker", "image", "inspect", "-f", "{{.Parent}}", i]).strip() for i in ids}
    roots = [i for i in ids if parents[i] not in ids]
    tagged = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag],
                            capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    if tagged in roots:
        return tagged
    return (roots or ids)[0]


def wheelhouse(reqs: list[str], wheel: Path, pip: Path) -> Path:
    """Every wheel the build installs (downloaded again only when ``reqs`` or the
    wheel's own requirements change), plus the controller's wheel."""
    with zipfile.ZipFile(wheel) as whl:
        meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        requires = sorted(line for line in whl.read(meta).decode().splitlines()
                          if line.startswith("Requires-Dist:"))  # fmt: skip
    _require_current("ee")
    missing = missing_from_lock(
        [*reqs, *(r.removeprefix("Requires-Dist:").strip() for r in requires)],
        _load_script("release/lock.py").pins(EE_LOCK),
    )
    if missing:
        raise BuildError(f"{EE_LOCK.relative_to(REPO)} does not hold what the EE installs: "
                         f"{'; '.join(missing)}; name it in ee/requirements.txt (or "
                         "pyproject.toml) and run `scripts/release/lock.py update ee`")  # fmt: skip
    want = hashlib.sha256(json.dumps([reqs, requires, _lock_digest(EE_LOCK)]).encode()).hexdigest()
    stamp = WHEELHOUSE / ".specops-requirements"
    if not (stamp.is_file() and stamp.read_text() == want):
        _say(f"wheelhouse: pip download of {EE_LOCK.name} (hash-checked) into {WHEELHOUSE}")
        shutil.rmtree(WHEELHOUSE, ignore_errors=True)
        WHEELHOUSE.mkdir(parents=True)
        # Only the locked versions are there to choose when the build installs from it.
        _run([str(pip), "download", "-q", "--disable-pip-version-check",
              "--only-binary=:all:", "--require-hashes", "--no-deps",
              "-d", str(WHEELHOUSE), "-r", str(EE_LOCK)])  # fmt: skip
        stamp.write_text(want)
    for old in WHEELHOUSE.glob("specops-*.whl"):
        old.unlink()
    shutil.copy2(wheel, WHEELHOUSE / wheel.name)
    return WHEELHOUSE


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve(directory: Path, port: int = WHEELHOUSE_PORT) -> Iterator[str]:
    """``directory`` over HTTP on 127.0.0.1 for the build; its URL. The same port each
    time where it is free (the URL is a build argument: docker's layer cache keeps the
    layers after it only while it stays the same), else any free one."""
    handler = functools.partial(_Quiet, directory=str(directory))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@dataclass(frozen=True)
class Result:
    tag: str
    image_id: str
    digest: str
    how: str
    seconds: float

    def line(self) -> str:
        return (f"image={self.tag} id={self.image_id} inputs={self.digest} how={self.how} "
                f"seconds={self.seconds:.1f}")  # fmt: skip


@contextmanager
def _locked() -> Iterator[None]:
    """One build at a time per checkout (the two CI lanes may both ask for the EE: the
    second waits, then finds it built)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def make(
    tag: str = DEFAULT_TAG,
    *,
    save: bool = True,
    force: bool = False,
    definition: Path = EE_FILE,
    standin_base: bool = False,
) -> Result:
    """The EE of ``definition`` for this checkout under ``tag`` (see the module's doc)."""
    with _locked():
        return _make(tag, save=save, force=force, path=definition, standin_base=standin_base)


def standin(reqs: list[str], wheel: Path, pip: Path) -> str:
    """The local stand-in of the upstream base (ee/upstream/standin/Containerfile) under
    :data:`STANDIN_TAG`, built with the wheelhouse served (docker's layer cache keeps
    it while its inputs stay)."""
    house = wheelhouse(reqs, wheel, pip)
    with serve(house) as url:
        _say(f"stand-in base {STANDIN_TAG} (wheelhouse served at {url})")
        _run(["docker", "build", "--network", "host", "-q", "-t", STANDIN_TAG,
              "-f", str(STANDIN_FILE), "--build-arg", f"PIP_FIND_LINKS={url}",
              "--build-arg", "PIP_NO_INDEX=1", str(REPO / "ee")],
             env={**os.environ, "DOCKER_BUILDKIT": "0"})  # fmt: skip
    return STANDIN_TAG


def _make(tag: str, *, save: bool, force: bool, path: Path, standin_base: bool) -> Result:
    start = time.monotonic()
    definition = yaml.safe_load(path.read_text())
    venv = tools()
    parts, wheel, reqs = prepare_inputs(definition, path)
    base = standin(reqs, wheel, venv / "bin/pip") if standin_base else None
    _, parts["base"] = base_image(definition, base)
    digest = inputs_hash(parts)
    saves = SAVES if path == EE_FILE else SAVES / path.parent.name
    saved = saves / f"{digest}.tar"
    found = labelled_image(digest, tag)
    how = decide(labelled=found is not None, saved=saved.is_file(), force=force)
    if how == "cached" and found:
        _say(f"image {found[:19]} has label {LABEL}={digest[:16]}...: nothing to build")
    elif how == "load":
        _say(f"loading {saved}")
        _run(["docker", "load", "-i", str(saved)])
        found = labelled_image(digest, tag)
        if found is None:
            raise BuildError(f"{saved}: loaded, but no image has label {LABEL}={digest}")
    else:
        found = _build(venv, wheel, reqs, digest, tag, path=path, base=base)
        if save:
            _save(found, digest, saves)
    _run(["docker", "tag", found, tag])
    _prune_replaced(found)
    said = {"build": "built", "load": "loaded"}.get(how, how)
    return Result(tag, found, digest, said, time.monotonic() - start)


def _build(
    venv: Path, wheel: Path, reqs: list[str], digest: str, tag: str, *, path: Path,
    base: str | None,
) -> str:  # fmt: skip
    house = wheelhouse(reqs, wheel, venv / "bin/pip")
    context = CACHE / ("context" if path == EE_FILE else f"context-{path.parent.name}")
    shutil.rmtree(context, ignore_errors=True)
    with serve(house) as url:
        _say(f"ansible-builder build of {path.relative_to(REPO)} (wheelhouse {house} served"
             f" at {url}{f'; base {base}' if base else ''})")  # fmt: skip
        argv = [str(venv / "bin/ansible-builder"), "build", "-f", str(path),
                "-c", str(context), "--container-runtime", "docker", "-t", tag, "-v", "3",
                "--build-arg", f"PIP_FIND_LINKS={url}", "--build-arg", "PIP_NO_INDEX=1",
                *(["--build-arg", f"EE_BASE_IMAGE={base}"] if base else []),
                "--extra-build-cli-args", f"--network host --label {LABEL}={digest}"]  # fmt: skip
        log = context.with_name(f"build{context.name.removeprefix('context')}.log")
        with log.open("w") as out:
            env = {**os.environ, "DOCKER_BUILDKIT": "0"}  # the classic builder: --network host
            proc = subprocess.run(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                  check=False, env=env)  # fmt: skip
        if proc.returncode != 0:
            tail = log.read_text()[-6000:]
            raise BuildError(f"ansible-builder build failed ({proc.returncode}; {log}):\n{tail}")
    found = labelled_image(digest, tag)
    if found is None:
        raise BuildError(f"ansible-builder built no image with label {LABEL}={digest}")
    return found


def _prune_replaced(current: str) -> None:
    """Remove the EEs this build replaced (labelled, no longer tagged). The builder's
    intermediate stages stay: they are docker's layer cache for the next build."""
    out = _run(["docker", "images", "-q", "--no-trunc", "--filter", f"label={LABEL}",
                "--filter", "dangling=true"])  # fmt: skip
    for image in out.split():
        if image != current:
            subprocess.run(["docker", "rmi", image], capture_output=True, check=False)


def _save(image_id: str, digest: str, saves: Path = SAVES) -> None:
    """``docker save`` under $SPECOPS_CACHE/ee[/<definition>]/<hash>.tar; older saves of
    the same definition removed."""
    try:
        saves.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _say(f"not saved ({saves}: {exc})")
        return
    part = saves / f"{digest}.tar.part"
    _run(["docker", "save", "-o", str(part), image_id])
    part.rename(saves / f"{digest}.tar")
    for old in saves.glob("*.tar"):
        if old.name != f"{digest}.tar":
            old.unlink()
    _say(f"saved {saves / f'{digest}.tar'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tag", default=DEFAULT_TAG)
    parser.add_argument(
        "--no-save", action="store_true",
        help="do not docker save the built image under $SPECOPS_CACHE/ee",
    )  # fmt: skip
    parser.add_argument("--force", action="store_true", help="build even when cached")
    parser.add_argument(
        "--file", type=Path, default=EE_FILE,
        help="the definition (default execution-environment.yml; the upstream-base one:"
        " ee/upstream/execution-environment.yml)",
    )  # fmt: skip
    parser.add_argument(
        "--standin-base", action="store_true",
        help="build the local stand-in of the definition's upstream base and build on it",
    )  # fmt: skip
    args = parser.parse_args(argv)
    path = args.file if args.file.is_absolute() else Path.cwd() / args.file
    tag = args.tag
    if path.resolve() == UPSTREAM_FILE and tag == DEFAULT_TAG:
        tag = UPSTREAM_TAG
    try:
        result = make(tag, save=not args.no_save, force=args.force, definition=path.resolve(),
                      standin_base=args.standin_base)  # fmt: skip
    except BuildError as exc:
        print(f"build_ee: {exc}", file=sys.stderr)
        return 1
    print(result.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
