#!/usr/bin/env python3
"""The GPU doctor on a real NVIDIA machine: LXC containers on the host's own GPU.

Runs as root on the device tool's NVIDIA machine (no network there) and does the whole
real-hardware proof in one go:

1. LXC from Debian bookworm's packages (lxc 5.0.2, liblxc1 and the libraries they need,
   downloaded here with ``apt-get download``), unpacked with ``dpkg -x`` into a private
   prefix and run with ``LD_LIBRARY_PATH``; the prefix's config files point at the prefix;
2. the project's GPU facts of the host (``gpu.gather_facts``, the ``gpu_facts`` module's
   code);
3. the passthrough lines for the first card on the nvidia driver (``lxc_gpu.plan_devices``
   + ``lxc_gpu.merge``, raw lines with the host's cgroup key: what the
   ``lxc_gpu_passthrough`` role writes on PVE < 8.1) merged into a PVE container conf;
4. the LXC config PVE would make of that conf (the lab's translation,
   ``specops_lab.pve.lxcconf.build_lxc_config``) plus a short block for this machine:
   the prefix's rootfs mount point, no AppArmor profile, and a root that binds the
   host's ``/usr`` (driver libraries and nvidia-smi included), ``/etc`` (the loader
   cache), ``/opt`` (the engine Python with torch) and the doctor's code read-only;
5. for three cases - the generated lines; the GPU allow lines removed; the nvidia-uvm
   allow lines with a stale major - the container is started, the doctor's evidence is
   read on the node (``gpu_doctor.evidence.node_evidence``) and inside the container
   (``container_evidence`` through ``lxc-attach``), diagnosed (``gpu_doctor.diagnose``)
   and the container stopped;
6. everything is written to ``OUT/h200-doctor-<date>.json`` (committed as
   ``tests/fixtures/doctor/``) with one LXC log per case.

Usage::

    # here: a bundle folder (ignored by git) that the device tool carries
    .venv/bin/python scripts/device/gpu-doctor-device.py bundle .cache/gpu-doctor-device
    # there (device tool, repo root = the bundle's parent):
    python3 .cache/gpu-doctor-device/scripts/device/gpu-doctor-device.py run \\
        --debs .cache/gpu-doctor-device/debs --out "$OUT"
    # a dry run on a machine without NVIDIA: a simulated host tree (mknod'd nodes, so an
    # allowed node opens with ENXIO instead of OK, and there is no CUDA):
    python3 scripts/device/gpu-doctor-device.py run --debs DIR --out DIR --host-root TREE

Stdlib only besides the repository's own code (the device's python3 has no Ansible).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


if __name__ == "__main__":  # nothing installed (a copied tree): run on its packages
    from tree_packages import run_on_the_tree

    run_on_the_tree(REPO)

# The repository's own code (installed, or from the tree: tree_packages.py).
from ansible_collections.specops.infra.plugins.module_utils import gpu, lxc_gpu  # noqa: E402
from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor import (  # noqa: E402
    diagnosis as gpu_doctor,
)
from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor import (  # noqa: E402
    evidence as gpu_doctor_evidence,
)
from ansible_collections.specops.infra.plugins.module_utils.pve import conf as pve_conf  # noqa: E402

from specops_lab.pve.conf import parse_pct_config  # noqa: E402
from specops_lab.pve.layout import Node  # noqa: E402
from specops_lab.pve.lxcconf import build_lxc_config, machine_cgroup_version  # noqa: E402

# lxc-templates ships /usr/share/lxc/config/<ostype>.common.conf, which PVE's start path
# includes (lxc-pve has it on a node).
PACKAGES = (
    "lxc",
    "liblxc1",
    "liblxc-common",
    "lxc-templates",
    "libapparmor1",
    "libcap2",
    "libseccomp2",
    "libselinux1",
    "libpcre2-8-0",
)
# What the bundle copies from the repository: the script, the controller package (the
# lab's PVE reader and conf -> LXC translation import its schema and format modules)
# and the collection's module_utils.
BUNDLE_FILES = ("scripts/device/gpu-doctor-device.py", "scripts/device/tree_packages.py")
BUNDLE_TREES = ("src/specops", "lab/src/specops_lab")
MODULE_UTILS = "collections/ansible_collections/specops/infra/plugins/module_utils"
VMID = 900
NAME = f"doctor-{VMID}"
# The container's base settings (what pve_container would create), before GPU lines.
BASE_CONF = """\
arch: amd64
hostname: doctor-h200
memory: 8192
ostype: debian
rootfs: local:900/vm-900-disk-0.raw,size=8G
console: 0
tty: 0
entrypoint: /usr/bin/sleep infinity
"""
# Inside the container: the doctor's evidence (the repo's collection on PYTHONPATH).
IN_CT = """
import json, sys
from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.evidence import (
    container_evidence,
)
args = json.loads(sys.argv[1])
ev = container_evidence(args["paths"], engine_python=args["engine_python"],
                        fallback_python=sys.executable, cuda=args["cuda"])
print("SPECOPS-EVIDENCE " + json.dumps(ev))
"""
STALE_CANDIDATES = (511, 510, 509, 508, 507, 506, 505, 504)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(
    argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 120
) -> tuple[int, str]:
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except FileNotFoundError as exc:
        return 127, str(exc)
    except subprocess.TimeoutExpired as exc:
        parts = [
            p.decode(errors="replace") if isinstance(p, bytes) else p
            for p in (exc.stdout, exc.stderr)
        ]
        return 124, f"timed out after {timeout} s: " + "".join(p or "" for p in parts)
    return proc.returncode, proc.stdout + proc.stderr


# --------------------------------------------------------------------------- bundle


def bundle(dest: Path) -> None:
    """Here: the script, the code it imports and the .deb files, in the repo's layout."""
    if dest.exists():
        shutil.rmtree(dest)
    for rel in BUNDLE_FILES:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, target)
    for tree in (*BUNDLE_TREES, MODULE_UTILS):
        shutil.copytree(REPO / tree, dest / tree, ignore=shutil.ignore_patterns("__pycache__"))
    from tree_packages import carry_ansible  # noqa: PLC0415 - scripts/, run as __main__

    carry_ansible(dest)
    debs = dest / "debs"
    debs.mkdir()
    # The package lists first: a fresh machine has none (apt-get download exits 100).
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "download", *PACKAGES], cwd=debs, check=True)
    for deb in debs.iterdir():  # plain names (the tool carries letters, digits, . _ -)
        deb.rename(debs / deb.name.replace("%3a", "_"))
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    print(f"bundle {dest}: {size / 1e6:.1f} MB")


# --------------------------------------------------------------------------- LXC prefix


def _extract_deb(deb: Path, dest: Path) -> None:
    """``dpkg -x`` when dpkg is there, else the deb's ar members read here."""
    if shutil.which("dpkg"):
        subprocess.run(["dpkg", "-x", str(deb), str(dest)], check=True)
        return
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise SystemExit(f"{deb}: not a .deb")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos : pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        body = data[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size % 2)
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tar:
                tar.extractall(dest)  # noqa: S202 - Debian's own package


def lxc_prefix(debs: Path, prefix: Path) -> dict[str, str]:
    """Unpack the packages, point their configs at the prefix; the tools' environment."""
    if prefix.exists():
        shutil.rmtree(prefix)
    prefix.mkdir(parents=True)
    for deb in sorted(debs.glob("*.deb")):
        _extract_deb(deb, prefix)
    share = prefix / "usr/share/lxc"
    for conf in share.rglob("*.conf"):
        text = conf.read_text()
        conf.write_text(text.replace("/usr/share/lxc", str(share)))
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(
        str(prefix / d) for d in ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu")
    )
    env["PATH"] = f"{prefix}/usr/bin:{prefix}/usr/sbin:{env.get('PATH', '/usr/bin:/bin')}"
    return env


# --------------------------------------------------------------------------- container


def _rootfs(work: Path) -> Path:
    root = work / "rootfs"
    if root.exists():
        shutil.rmtree(root)
    for d in ("dev", "proc", "sys", "tmp", "run", "root", "usr", "etc", "opt", "srv/specops"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    for d in ("bin", "sbin", "lib", "lib64", "lib32", "libx32"):
        host = Path("/") / d
        if host.is_symlink():
            (root / d).symlink_to(os.readlink(host))
        elif host.is_dir():
            (root / d).mkdir()
    return root


def _binds(engine_python: str) -> list[str]:
    """The machine block's bind mounts: the host's /usr, /etc, /opt (read-only), any
    other /bin-like directory that is not a link, the engine Python's prefix, the code."""
    out = [
        "lxc.mount.entry = /usr usr none rbind,ro,create=dir 0 0",
        "lxc.mount.entry = /etc etc none rbind,ro,create=dir 0 0",
        "lxc.mount.entry = /opt opt none rbind,ro,create=dir,optional 0 0",
    ]
    for d in ("bin", "sbin", "lib", "lib64", "lib32", "libx32"):
        host = Path("/") / d
        if host.is_dir() and not host.is_symlink():
            out.append(f"lxc.mount.entry = {host} {d} none rbind,ro,create=dir 0 0")
    real = os.path.realpath(engine_python)
    top = "/" + real.lstrip("/").split("/", 1)[0]
    if top not in ("/usr", "/opt", "/bin", "/lib", "/lib64"):
        base = os.path.dirname(os.path.dirname(real))
        out.append(f"lxc.mount.entry = {base} {base.lstrip('/')} none rbind,ro,create=dir 0 0")
    out.append(
        f"lxc.mount.entry = {REPO / 'collections'} srv/specops/collections none "
        "bind,ro,create=dir 0 0"
    )
    # Ansible's module_utils: the device payload's site (scripts/device/tree_packages.py), else
    # (a dry run on a controller) the site-packages this process's Ansible comes from.
    site = REPO / "device-site"
    if not site.is_dir():
        spec = importlib.util.find_spec("ansible")
        site = Path(spec.origin).parents[1] if spec and spec.origin else site
    if site.is_dir():
        out.append(f"lxc.mount.entry = {site} srv/specops/device-site none bind,ro,create=dir 0 0")
    return out


def machine_block(prefix: Path, engine_python: str) -> str:
    lines = [
        "# This machine (not PVE): the prefix's rootfs mount point, no AppArmor profile,",
        "# a root made of the host's /usr, /etc and /opt (read-only) and the doctor's code.",
        f"lxc.rootfs.mount = {prefix}/usr/lib/x86_64-linux-gnu/lxc/rootfs",
        "lxc.apparmor.profile = unconfined",
        "lxc.autodev = 1",
        *_binds(engine_python),
    ]
    return "".join(f"{ln}\n" for ln in lines)


def lxc(
    env: dict[str, str], tool: str, lxcpath: Path, *args: str, timeout: float = 120
) -> tuple[int, str]:
    return run([tool, "-n", NAME, "-P", str(lxcpath), *args], env=env, timeout=timeout)


def state(env: dict[str, str], lxcpath: Path) -> str:
    rc, out = lxc(env, "lxc-info", lxcpath, "-s", "-H", timeout=30)
    return out.strip() if rc == 0 else f"unknown ({out.strip()})"


def stop(env: dict[str, str], lxcpath: Path) -> None:
    lxc(env, "lxc-stop", lxcpath, "-k", timeout=60)
    for _ in range(30):
        if state(env, lxcpath) in ("STOPPED",) or state(env, lxcpath).startswith("unknown"):
            return
        time.sleep(1)


# --------------------------------------------------------------------------- cases


def generated_conf(
    facts: dict[str, Any], card: str, char_devices: dict[int, str], base: str = BASE_CONF
) -> tuple[str, list[dict[str, Any]]]:
    """``base`` with the GPU lines for ``card`` (what lxc_gpu_passthrough writes)."""
    conf = pve_conf.parse(base)
    devices = lxc_gpu.plan_devices(facts, [card])
    result = lxc_gpu.merge(
        conf,
        devices,
        method="raw",
        cgroup_key=lxc_gpu.choose_cgroup_key(facts, "auto"),
        gpu_majors={int(v) for v in (facts.get("char_majors") or {}).values()},
        foreign_majors={m: n for m, n in char_devices.items() if not n.startswith("nvidia")},
    )
    return result.after, [d.as_dict() for d in devices]


def allow_removed(text: str, facts: dict[str, Any]) -> tuple[str, list[str]]:
    conf = pve_conf.parse(text)
    gpu_majors = {int(v) for v in (facts.get("char_majors") or {}).values()}
    removed = conf.remove_lxc(
        lambda k, v: (
            k in lxc_gpu.CGROUP_KEYS.values()
            and lxc_gpu.is_gpu_raw_line(
                k, v, gpu_majors=gpu_majors, foreign_majors={}, evidence=True
            )
        )
    )
    return conf.render(), [f"{k}: {v}" for k, v in removed]


def stale_uvm(text: str, uvm: int, stale: int) -> tuple[str, list[str]]:
    out, changed = [], []
    for line in text.splitlines(keepends=True):
        key, sep, value = line.partition(": ")
        if sep and key in lxc_gpu.CGROUP_KEYS.values() and value.startswith(f"c {uvm}:"):
            new = f"{key}: c {stale}:{value[len(f'c {uvm}:') :]}"
            changed.append(f"{line.strip()} -> {new.strip()}")
            out.append(new)
        else:
            out.append(line)
    return "".join(out), changed


def run_case(
    case: str,
    conf_text: str,
    *,
    ctx: dict[str, Any],
    record: dict[str, Any],
) -> dict[str, Any]:
    env, lxcpath, node, prefix = ctx["env"], ctx["lxcpath"], ctx["node"], ctx["prefix"]
    facts, card = ctx["facts"], ctx["card"]
    result: dict[str, Any] = {"case": case, "conf": conf_text}
    conf_path = node.host_path(f"/etc/pve/lxc/{VMID}.conf")
    conf_path.write_text(conf_text)
    plan = build_lxc_config(
        parse_pct_config(VMID, conf_text),
        vmid=VMID,
        node=node,
        rootfs=ctx["rootfs"],
        passthrough_dir=lxcpath / NAME / "passthrough",
        machine_cgroup=ctx["machine_cgroup"],
    )
    # PVE includes /usr/share/lxc/config/<ostype>.common.conf; here that is the prefix's.
    config = plan.config.replace(
        "lxc.include = /usr/share/lxc/", f"lxc.include = {prefix}/usr/share/lxc/"
    ) + machine_block(prefix, ctx["engine_python"])
    (lxcpath / NAME).mkdir(parents=True, exist_ok=True)
    (lxcpath / NAME / "config").write_text(config)
    result["lxc_config"] = config
    result["lxc_warnings"] = plan.warnings
    logfile = ctx["out"] / f"lxc-{case}.log"
    started = time.monotonic()
    rc, out = lxc(env, "lxc-start", lxcpath, "-d", "-l", "DEBUG", "-o", str(logfile))
    result["start"] = {"rc": rc, "output": out[-3000:]}
    for _ in range(60):
        if state(env, lxcpath) == "RUNNING":
            break
        time.sleep(0.5)
    result["state"] = state(env, lxcpath)
    result["start_seconds"] = round(time.monotonic() - started, 2)
    log(f"{case}: lxc-start rc={rc}, state {result['state']} after {result['start_seconds']} s")
    try:
        if result["state"] != "RUNNING":
            return result
        running = True
        node_ev = gpu_doctor_evidence.node_evidence(
            facts, VMID, conf_text, running=running, char_devices=ctx["char_devices"]
        )
        result["node_evidence"] = node_ev
        args = {
            "paths": node_ev["paths"],
            "engine_python": ctx["engine_python"],
            "cuda": not ctx["simulated"],
        }
        python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else ctx["engine_python"]
        t0 = time.monotonic()
        rc, out = lxc(
            env,
            "lxc-attach",
            lxcpath,
            "--clear-env",
            "-v",
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "-v",
            "HOME=/root",
            "-v",
            # the repo's collection and Ansible's module_utils, bind-mounted
            "PYTHONPATH=/srv/specops/collections:/srv/specops/device-site",
            "--",
            python,
            "-c",
            IN_CT,
            json.dumps(args),
            timeout=600,
        )
        result["evidence_seconds"] = round(time.monotonic() - t0, 2)
        result["attach"] = {"rc": rc, "python": python}
        lines = [ln for ln in out.splitlines() if ln.startswith("SPECOPS-EVIDENCE ")]
        if not lines:
            result["attach"]["output"] = out[-4000:]
            log(f"{case}: no evidence (rc {rc}): {out[-1500:]}")
            return result
        ct_ev = json.loads(lines[-1][len("SPECOPS-EVIDENCE ") :])
        result["container_evidence"] = ct_ev
        diagnosis = gpu_doctor.diagnose(
            NAME,
            node_ev,
            ct_ev,
            gpu_doctor.Expectation(gpus=(card,)),
            simulated_hardware=ctx["simulated"],
        ).to_dict()
        result["diagnosis_then"] = diagnosis
        for line in gpu_doctor.render_table([diagnosis]):
            log(f"{case}: {line}")
        return result
    finally:
        stop(env, lxcpath)
        result["stopped"] = state(env, lxcpath)
        result["log_warnings"] = _log_warnings(logfile)


def _log_warnings(logfile: Path, keep: int = 40) -> list[str]:
    """The WARN and ERROR lines of an LXC log (what the README quotes), at most ``keep``."""
    try:
        lines = logfile.read_text(errors="replace").splitlines()
    except OSError:
        return []
    hits = [ln.split(" - ", 1)[-1].strip() for ln in lines if " WARN " in ln or " ERROR " in ln]
    return hits[:keep]


def host_record(env: dict[str, str], host_root: str) -> dict[str, Any]:
    rec: dict[str, Any] = {"uname": list(platform.uname()), "python": sys.version}
    _, rec["lxc_version"] = run(["lxc-start", "--version"], env=env, timeout=30)
    rc, out = run(
        ["nvidia-smi", "--query-gpu=name,driver_version,pci.bus_id", "--format=csv,noheader"],
        timeout=60,
    )
    rec["nvidia_smi"] = {"rc": rc, "output": out[-2000:]}
    rc, out = run(["ldconfig", "-p"], timeout=30)
    rec["ldconfig_nvidia"] = [
        ln.strip() for ln in out.splitlines() if "nvidia" in ln or "libcuda" in ln
    ]
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        mounts = []
    rec["mounts"] = [m for m in mounts if "cgroup" in m or "nvidia" in m or " /usr" in m]
    for name in ("cgroup.controllers", "cgroup.subtree_control"):
        try:
            rec[name] = Path("/sys/fs/cgroup", name).read_text().strip()
        except OSError as exc:
            rec[name] = f"unreadable: {exc}"
    rec["host_root"] = host_root
    return rec


def main_run(args: argparse.Namespace) -> int:  # noqa: PLR0915  (the run, step by step)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    simulated = args.host_root != "/"
    record: dict[str, Any] = {
        "schema": 1,
        "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "script": "scripts/device/gpu-doctor-device.py",
        "simulated_hardware": simulated,
        "vmid": VMID,
        "container": NAME,
        "cases": {},
        "errors": [],
    }
    date = record["captured_at"][:10]
    name = f"{args.label}-{date}.json"
    try:
        env = lxc_prefix(Path(args.debs), work / "prefix")
        record["host"] = host_record(env, args.host_root)
        log(f"LXC: {record['host']['lxc_version'].strip()}; kernel {platform.release()}")
        facts = gpu.gather_facts(gpu.HostRoots.under(args.host_root)).to_dict()
        record["gpu_facts"] = facts
        names = gpu.parse_proc_devices(Path(args.host_root, "proc/devices").read_text())
        char_devices = {major: n for n, major in names.items()}
        record["char_devices"] = {str(k): v for k, v in sorted(char_devices.items())}
        card = next(
            g["address"]
            for g in facts["gpus"]
            if g["driver"] == "nvidia" and (g.get("nvidia") or {}).get("minor") is not None
        )
        record["card"] = card
        uvm = int(facts["uvm_major"])
        stale = next(m for m in STALE_CANDIDATES if m not in char_devices and m != uvm)
        record["stale_uvm_major"] = stale
        node_root = work / "node"
        for d in ("dev", "proc", "sys"):
            node_root.mkdir(parents=True, exist_ok=True)
            (node_root / d).symlink_to(Path(args.host_root) / d)
        (node_root / "etc/pve/lxc").mkdir(parents=True)
        machine_cgroup = machine_cgroup_version()
        node = Node(
            name="doctor-node",
            root=node_root,
            cgroup="v2" if facts["cgroup"]["version"] == 2 else "v1",
            lxcpath=work / "lxc",
        )
        engine_python = args.engine_python or next(
            (p for p in ("/opt/torch/.venv/bin/python3",) if Path(p).exists()), sys.executable
        )
        record["engine_python"] = {"path": engine_python, "real": os.path.realpath(engine_python)}
        record["machine_cgroup"] = machine_cgroup
        ctx = {
            "env": env,
            "lxcpath": work / "lxc",
            "node": node,
            "prefix": work / "prefix",
            "rootfs": _rootfs(work),
            "facts": facts,
            "card": card,
            "char_devices": char_devices,
            "machine_cgroup": machine_cgroup,
            "engine_python": engine_python,
            "simulated": simulated,
            "out": out,
        }
        generated, devices = generated_conf(facts, card, char_devices)
        record["devices"] = devices
        removed_text, removed = allow_removed(generated, facts)
        stale_text, staled = stale_uvm(generated, uvm, stale)
        record["edits"] = {"allow_removed": removed, "stale_uvm": staled}
        for case, text in (
            ("generated", generated),
            ("allow_removed", removed_text),
            ("stale_uvm", stale_text),
        ):
            try:
                record["cases"][case] = run_case(case, text, ctx=ctx, record=record)
            except Exception:  # record, go on with the next case
                record["errors"].append(f"{case}: {traceback.format_exc()}")
                log(f"{case}: {traceback.format_exc()}")
    except Exception:
        record["errors"].append(traceback.format_exc())
        log(traceback.format_exc())
    finally:
        (out / name).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        log(f"wrote {out / name}")
    return 1 if record["errors"] else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    b = sub.add_parser("bundle", help="copy the script, its code and the .deb files to DEST")
    b.add_argument("dest")
    r = sub.add_parser("run", help="the real-hardware run (as root)")
    r.add_argument("--debs", required=True, help="folder with the .deb files")
    r.add_argument("--out", required=True, help="where the record and the logs go")
    r.add_argument(
        "--work",
        default="/var/tmp/specops-gpu-doctor",  # noqa: S108 - root's scratch on a lent machine
        help="scratch folder (removed and made again)",
    )
    r.add_argument("--host-root", default="/", help="a simulated host tree (dry run)")
    r.add_argument("--engine-python", default="", help="default /opt/torch/.venv/bin/python3")
    r.add_argument("--label", default="h200-doctor", help="record file name prefix")
    args = parser.parse_args()
    if args.action == "bundle":
        bundle(Path(args.dest).resolve())
        return 0
    if os.geteuid() != 0:
        raise SystemExit("run: needs root (LXC containers)")
    return main_run(args)


if __name__ == "__main__":
    sys.exit(main())
