"""Evidence of a serving container's GPU path, read on its PVE node and inside it.

The GPU doctor (``playbooks/verify.yml``, ``specops doctor``) reads, changes nothing:

- on the node (:func:`node_evidence`): the node's GPU facts (``gpu.gather_facts``: the
  module version, the char majors of ``/proc/devices``, the device nodes, each card's
  driver, Device Minor and holder VM) and the GPU lines of the container's
  ``/etc/pve/lxc/<vmid>.conf`` (every device allow and deny line with the key it uses,
  the ``lxc.mount.entry`` and ``devN`` entries of ``/dev/nvidia*`` nodes);
- inside the container (:func:`container_evidence`): each ``/dev/nvidia*`` node (there
  or not, its major:minor, what ``open(O_RDWR)`` answers: ``OK`` or the errno name),
  ``nvidia-smi``'s output and exit code, the userspace library (the file the dynamic
  loader resolves ``libnvidia-ml.so.1`` to, and :func:`nvidia_userspace.read_state`),
  CUDA initialisation (the driver API through ``libcuda.so.1``, then ``torch`` when the
  engine's Python has a CUDA build) with the engine venv's own Python, and the server's
  readiness (:func:`readiness.probe`).

Both return plain JSON-able dicts (``EVIDENCE_SCHEMA``): the playbook passes them from
the node and the container to the controller, and a device run records them as a
fixture. :mod:`gpu_doctor` turns them into findings.

Stdlib only: this runs on the PVE node and inside the containers (Python >= 3.7).
"""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import stat
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils import nvidia_userspace
from ansible_collections.specops.infra.plugins.module_utils.pve.conf import (
    PveConf,
    PveConfError,
    parse,
    parse_property_string,
)
from ansible_collections.specops.infra.plugins.module_utils.readiness import probe

__all__ = [
    "CUDA_PROBE",
    "EVIDENCE_SCHEMA",
    "conf_evidence",
    "container_evidence",
    "cuda_evidence",
    "device_evidence",
    "engine_python_from_units",
    "loader_paths",
    "node_evidence",
    "parse_allow",
    "required_paths",
]

EVIDENCE_SCHEMA = 1
ALLOW_KEYS = {"lxc.cgroup.devices.allow": 1, "lxc.cgroup2.devices.allow": 2}
DENY_KEYS = {"lxc.cgroup.devices.deny": 1, "lxc.cgroup2.devices.deny": 2}
_MOUNT_KEY = "lxc.mount.entry"
_GPU_PATH = re.compile(r"^/dev/nvidia")
_RULE = re.compile(r"^([abc])(?:\s+(\d+|\*):(\d+|\*))?(?:\s+([rwm]+))?$")
# Nodes a CUDA container needs beside its cards (lxc_gpu.plan_devices gives the same).
BASE_PATHS = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
_OUTPUT_TAIL = 2000


# --------------------------------------------------------------------------- node side


def parse_allow(value: str) -> dict[str, Any] | None:
    """``c 195:* rwm`` -> type, major, minor (None = ``*``), access; None if not a rule."""
    match = _RULE.match(value.strip())
    if not match:
        return None
    kind, major, minor, access = match.groups()
    return {
        "type": kind,
        "major": None if major in (None, "*") else int(major),
        "minor": None if minor in (None, "*") else int(minor),
        "access": access or "rwm",
    }


def conf_evidence(conf: PveConf) -> dict[str, Any]:
    """The device lines of a container conf's main section (snapshots are not applied)."""
    allow: list[dict[str, Any]] = []
    deny: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for key, value in conf.lxc():
        text = f"{key}: {value}"
        if key in ALLOW_KEYS or key in DENY_KEYS:
            rule = parse_allow(value)
            if rule is None:
                continue
            rule.update(cgroup=ALLOW_KEYS.get(key) or DENY_KEYS[key], text=text)
            (allow if key in ALLOW_KEYS else deny).append(rule)
        elif key == _MOUNT_KEY:
            parts = value.split()
            if len(parts) >= 2 and _GPU_PATH.match(parts[0]):
                mounts.append(
                    {
                        "source": parts[0],
                        "target": "/" + parts[1].lstrip("/"),
                        "options": parts[3] if len(parts) > 3 else "",
                        "text": text,
                    }
                )
    devs: list[dict[str, Any]] = []
    for idx, value in sorted(conf.indexed("dev").items()):
        try:
            props = parse_property_string(value, "path")
        except PveConfError:
            continue
        if _GPU_PATH.match(props.get("path", "")):
            devs.append({"key": f"dev{idx}", "path": props["path"], "text": f"dev{idx}: {value}"})
    return {
        # As PVE reads the option (pve_conf.get_bool: 1|yes|on|true, any case).
        "unprivileged": conf.get_bool("unprivileged"),
        "allow": allow,
        "deny": deny,
        "mounts": mounts,
        "devs": devs,
    }


def _card(gpu: Mapping[str, Any]) -> dict[str, Any]:
    nv = gpu.get("nvidia") or {}
    return {
        "address": gpu.get("address"),
        "name": gpu.get("name"),
        "pci_id": gpu.get("pci_id"),
        "driver": gpu.get("driver"),
        "minor": nv.get("minor"),
        "held_by_running_vm": gpu.get("held_by_running_vm"),
        "free": bool(gpu.get("free", True)),
    }


def node_evidence(
    facts: Mapping[str, Any],
    vmid: int,
    conf_text: str | None,
    *,
    running: bool | None,
    char_devices: Mapping[int, str] | None = None,
) -> dict[str, Any]:
    """What the node says about container ``vmid``.

    ``facts`` is ``gpu.gather_facts(...).to_dict()`` (``ansible_facts.specops_gpu``);
    ``conf_text`` the container's conf (None: no such file on this node); ``running``
    what ``pct status`` said (None: not asked); ``char_devices`` every char major of the
    node's ``/proc/devices`` (to tell a stale NVIDIA major from another driver's).
    """
    module = facts.get("nvidia_module") or {}
    host = {
        "node": facts.get("node"),
        "pve_release": facts.get("pve_release"),
        "cgroup_version": (facts.get("cgroup") or {}).get("version"),
        "module_loaded": bool(module.get("loaded")),
        "module_version": module.get("version"),
        "module_flavour": module.get("flavour"),
        "nvidia_majors": dict(facts.get("char_majors") or {}),
        "uvm_major": facts.get("uvm_major"),
        "caps_major": facts.get("caps_major"),
        "other_majors": {
            str(major): name
            for major, name in sorted((char_devices or {}).items())
            if not name.startswith("nvidia")
        },
        "device_nodes": [
            {"path": n["path"], "major": n["major"], "minor": n["minor"]}
            for n in facts.get("device_nodes") or []
        ],
        "cards": [_card(g) for g in facts.get("gpus") or []],
    }
    conf = conf_evidence(parse(conf_text)) if conf_text is not None else None
    return {
        "schema": EVIDENCE_SCHEMA,
        "vmid": vmid,
        "running": running,
        "host": host,
        "conf": conf,
        "paths": required_paths(conf) if conf else [],
    }


def required_paths(conf: Mapping[str, Any]) -> list[str]:
    """The nodes to look at inside the container: those the conf gives, plus the base
    nodes every CUDA container needs once it has any GPU line."""
    given = {m["target"] for m in conf.get("mounts", [])} | {
        d["path"] for d in conf.get("devs", [])
    }
    if given or conf.get("allow"):
        given.update(BASE_PATHS)
    return sorted(given)


# --------------------------------------------------------------------------- container side


def _errno_name(code: int | None) -> str:
    return errno.errorcode.get(code or 0, f"errno {code}")


def device_evidence(paths: Iterable[str], dev_root: str = "/") -> list[dict[str, Any]]:
    """Each node: there or not, char major:minor, and what ``open(O_RDWR)`` answers."""
    wanted = set(paths)
    for pattern in ("dev/nvidia*", "dev/nvidia-caps/nvidia-cap*"):
        for real in glob.glob(os.path.join(dev_root, pattern)):
            wanted.add("/" + os.path.relpath(real, dev_root))
    out: list[dict[str, Any]] = []
    for shown in sorted(wanted):
        real = os.path.join(dev_root, shown.lstrip("/"))
        item: dict[str, Any] = {"path": shown, "present": False}
        try:
            st = os.lstat(real)
        except OSError as exc:
            item["open"] = _errno_name(exc.errno)
            out.append(item)
            continue
        if stat.S_ISDIR(st.st_mode):
            continue
        item["present"] = True
        item["char"] = stat.S_ISCHR(st.st_mode)
        item["major"] = os.major(st.st_rdev) if item["char"] else None
        item["minor"] = os.minor(st.st_rdev) if item["char"] else None
        item["mode"] = f"{st.st_mode & 0o7777:04o}"
        try:
            fd = os.open(real, os.O_RDWR | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            item["open"] = _errno_name(exc.errno)
        else:
            os.close(fd)
            item["open"] = "OK"
        out.append(item)
    return out


def _tail(text: str) -> str:
    return text[-_OUTPUT_TAIL:]


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str], timeout: float, runner: Runner | None = None) -> tuple[int, str]:
    run = runner or subprocess.run
    try:
        proc = run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        return 127, str(exc)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f} s"
    except OSError as exc:
        return 126, str(exc)
    return proc.returncode, (proc.stdout or "") + (proc.stderr or "")


def loader_paths(names: Iterable[str], runner: Runner | None = None) -> dict[str, str | None]:
    """Where the dynamic loader finds each soname (``ldconfig -p``), resolved to its file."""
    rc, text = _run(["ldconfig", "-p"], 30, runner)
    if rc == 127:
        rc, text = _run(["/sbin/ldconfig", "-p"], 30, runner)
    found: dict[str, list[tuple[str, str]]] = {}
    if rc == 0:
        for line in text.splitlines():
            left, sep, right = line.partition("=>")
            words = left.split(None, 1)
            if sep and words:
                found.setdefault(words[0], []).append((left, right.strip()))
    out: dict[str, str | None] = {}
    for name in names:
        entries = found.get(name, [])
        # Prefer the 64-bit entry ("(libc6,x86-64)"); a bare "(libc6)" is 32-bit on x86.
        best = next((path for tag, path in entries if "64" in tag), None)
        if best is None and entries:
            best = entries[0][1]
        out[name] = os.path.realpath(best) if best else None
    return out


_LIB_VERSION = re.compile(r"\.so\.(\d+\.\d+(?:\.\d+)?)$")


def _userspace(kernel_root: str, runner: Runner | None) -> dict[str, Any]:
    state = nvidia_userspace.read_state("/", kernel_root).to_dict()
    resolved = loader_paths(["libnvidia-ml.so.1", "libcuda.so.1"], runner)
    ml = resolved["libnvidia-ml.so.1"]
    match = _LIB_VERSION.search(ml or "")
    cuda = resolved["libcuda.so.1"]
    cuda_match = _LIB_VERSION.search(cuda or "")
    state.update(
        loader_nvml=ml,
        loader_version=match.group(1) if match else None,
        loader_cuda=cuda,
        loader_cuda_version=cuda_match.group(1) if cuda_match else None,
    )
    return state


def _nvidia_smi(runner: Runner | None) -> dict[str, Any]:
    rc, out = _run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], 60, runner
    )
    if rc == 127:
        return {"present": False, "rc": rc, "output": ""}
    answer = nvidia_userspace.classify_nvidia_smi(rc, out)
    return {
        "present": True,
        "rc": rc,
        "output": _tail(out),
        "ok": answer.ok,
        "mismatch": answer.mismatch,
        "driver_version": answer.driver_version,
        "library_version": answer.library_version,
    }


# Runs with the engine's own Python (any 3.x): the CUDA driver API through libcuda.so.1
# (init, a context, a 1 MiB allocation), then torch when that Python has a CUDA build.
CUDA_PROBE = r"""
import ctypes, json, sys
out = {"python": sys.executable, "driver_api": None, "torch": None}
def err(lib, rc):
    s = ctypes.c_char_p()
    try:
        if lib.cuGetErrorName(rc, ctypes.byref(s)) == 0 and s.value:
            return s.value.decode()
    except Exception:
        pass
    return str(rc)
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    out["driver_api"] = {"ok": False, "step": "load libcuda.so.1", "error": str(exc)}
else:
    d = {"ok": False}
    out["driver_api"] = d
    rc = lib.cuInit(0)
    d["cuInit"] = err(lib, rc)
    if rc != 0:
        d["step"] = "cuInit"
    else:
        v = ctypes.c_int()
        lib.cuDriverGetVersion(ctypes.byref(v))
        d["driver_version"] = v.value
        n = ctypes.c_int()
        rc = lib.cuDeviceGetCount(ctypes.byref(n))
        d["devices"] = n.value
        dev = ctypes.c_int()
        ctx = ctypes.c_void_p()
        ptr = ctypes.c_uint64()
        lib.cuCtxCreate_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint, ctypes.c_int]
        lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        lib.cuCtxDestroy_v2.argtypes = [ctypes.c_void_p]
        for step, call in (
            ("cuDeviceGetCount", lambda: rc),
            ("cuDeviceGet", lambda: lib.cuDeviceGet(ctypes.byref(dev), 0)),
            ("cuCtxCreate", lambda: lib.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev.value)),
            ("cuMemAlloc", lambda: lib.cuMemAlloc_v2(ctypes.byref(ptr), 1 << 20)),
            ("cuMemFree", lambda: lib.cuMemFree_v2(ptr.value)),
            ("cuCtxDestroy", lambda: lib.cuCtxDestroy_v2(ctx)),
        ):
            code = call()
            if code != 0:
                d["step"] = step
                d["error"] = err(lib, code)
                break
        else:
            d["ok"] = True
try:
    import torch
except Exception as exc:
    out["torch"] = {"present": False, "error": "%s: %s" % (type(exc).__name__, exc)}
else:
    t = {"present": True, "version": torch.__version__, "cuda": torch.version.cuda}
    if torch.version.cuda:
        try:
            x = torch.ones(1024, device="cuda")
            t["sum"] = float(x.sum())
            t["device"] = torch.cuda.get_device_name(0)
            t["ok"] = True
        except Exception as exc:
            t["ok"] = False
            t["error"] = ("%s: %s" % (type(exc).__name__, exc))[:1500]
    out["torch"] = t
print(json.dumps(out))
"""


def cuda_evidence(
    python: str, runner: Runner | None = None, timeout: float = 300
) -> dict[str, Any]:
    """CUDA initialisation with ``python`` (the engine venv's own interpreter)."""
    rc, out = _run([python, "-c", CUDA_PROBE], timeout, runner)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    try:
        result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    except ValueError:
        result = {}
    result.update(python=python, rc=rc)
    if not lines:
        result["output"] = _tail(out)
    return result


def engine_python_from_units(unit_dir: str = "/etc/systemd/system") -> str | None:
    """The Python of a venv that a system unit runs (``ExecStart=<venv>/bin/python ...``)."""
    for path in sorted(glob.glob(os.path.join(unit_dir, "*.service"))):
        try:
            with open(path) as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        for line in lines:
            key, sep, value = line.partition("=")
            if not sep or key.strip() != "ExecStart" or not value.strip():
                continue
            first = value.strip().lstrip("-@:+!").split()[0]
            venv = os.path.dirname(os.path.dirname(first))
            if os.path.basename(first).startswith("python") and os.path.isfile(
                os.path.join(venv, "pyvenv.cfg")
            ):
                return first
    return None


def build_evidence(python: str | None) -> dict[str, Any] | None:
    """The engine build a unit's venv holds, from its stamp (``.specops-engine.json``,
    written by ``inference_engine``): engine, version or git ref and commit, and the pull
    requests applied on it in order. None when there is no stamped venv."""
    if not python:
        return None
    venv = os.path.dirname(os.path.dirname(python))
    try:
        with open(os.path.join(venv, ".specops-engine.json"), encoding="utf-8") as fh:
            stamp = json.load(fh)
    except (OSError, ValueError):
        return None
    key = stamp.get("key") if isinstance(stamp, dict) else None
    if not isinstance(key, dict):
        return None
    return {
        "venv": venv,
        "engine": str(key.get("engine", "")),
        "version": str(key.get("version", "")),
        "git_ref": str(key.get("git_ref", "")),
        "git_commit": str(key.get("git_commit", "")),
        "git_patches": [str(p) for p in key.get("git_patches", []) or []],
    }


def container_evidence(
    paths: Iterable[str],
    *,
    engine_python: str | None = None,
    fallback_python: str | None = None,
    cuda: bool = True,
    kernel_root: str = "/",
    server_url: str | None = None,
    served_model_name: str | None = None,
    api_key: str | None = None,
    dev_root: str = "/",
    runner: Runner | None = None,
) -> dict[str, Any]:
    """What the container itself shows of its GPU path; reads and probes, writes nothing.
    ``api_key``: the server's key, sent by the readiness probe as a bearer token."""
    evidence: dict[str, Any] = {
        "schema": EVIDENCE_SCHEMA,
        "reachable": True,
        "devices": device_evidence(paths, dev_root),
        "nvidia_smi": _nvidia_smi(runner),
        "userspace": _userspace(kernel_root, runner),
        "cuda": None,
        "server": None,
    }
    evidence["build"] = build_evidence(engine_python or engine_python_from_units())
    if cuda:
        python = engine_python or engine_python_from_units() or fallback_python
        if python:
            evidence["cuda"] = cuda_evidence(python, runner)
            evidence["cuda"]["engine_python"] = bool(engine_python) or python != fallback_python
    if server_url:
        result = probe(server_url, served_model_name or "", api_key=api_key)
        evidence["server"] = {
            "url": server_url,
            "served_model_name": served_model_name,
            "ok": result.ok,
            "stage": result.stage,
            "detail": result.detail,
        }
    return evidence
