"""Proxmox VE's own test configs through specops' PVE readers and writers.

The configs are PVE's test material (``../shared/pve-fixtures/``: pve-container and
qemu-server ``src/test/``, at the commits its README names; AGPL-3.0, so they are read
from there at test time and never copied into this repository). CI has that folder
beside the clone; ``SPECOPS_PVE_FIXTURES`` points elsewhere (a worktree that is not
beside ``shared/``). A missing folder fails every test here with a message saying where
it was looked for: a skip would hide that nothing was checked.

Every container config (``snapshot-input``/``snapshot-expected`` ``lxc/*.conf`` and
``test-*/config``):

- parses without error, strict mode included (``pve_conf.parse``);
- is written back byte for byte (``render(parse(x)) == x``);
- after a GPU merge (``lxc_gpu.merge``, ``devN`` and raw lines) every section but the
  main one is byte-identical and the main section keeps every line it had, in order;
  after the merge's removal (no GPU) the file is the original, final newline or not,
  through the file writer (``pve_conf.write_conf_atomic``).

Every VM config (``cfg2cmd``, ``snapshot-*``, ``parse-config-*``, ``restore-config-*``):

- parses without error and is written back byte for byte (``pve_conf`` with
  ``kind="qemu"``), and ``gpu.parse_vm_config`` reads it without error;
- for each ``cfg2cmd`` config with its ``.conf.cmd`` (the QEMU command line PVE builds
  from it): the PCI functions the GPU facts say VM 8006 holds (``gpu.gather_facts`` on a
  host with the PCI devices and cluster mappings of PVE's test driver,
  ``run_config2command_tests.pl``) equal, per ``hostpciN``, those of the ``-device
  vfio-pci,host=...`` arguments. Where specops is stricter than PVE on purpose (a
  mapping with several candidate paths, a mediated device, a template: ``doubt`` in
  ``gpu.parse_vm_config``) only that direction is checked: what PVE passes through is
  among what specops counts.
"""

from __future__ import annotations

import itertools
import os
import shlex
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils import gpu, lxc_gpu
from ansible_collections.specops.infra.plugins.module_utils.pve import conf as pve_conf

REPO = Path(__file__).resolve().parents[2]
ENV = "SPECOPS_PVE_FIXTURES"
FIXTURES = Path(os.environ.get(ENV) or REPO.parent / "shared" / "pve-fixtures")
_WHERE = (
    f"{FIXTURES} (Proxmox's own test configs: ../shared/pve-fixtures beside the clone, "
    f"as CI has it, or the folder {ENV} names)"
)


def _found(patterns: Iterable[str]) -> list[Path]:
    return sorted({p for pattern in patterns for p in FIXTURES.glob(pattern) if p.is_file()})


CONTAINER_CONFS = _found(
    ["pve-container/src/test/snapshot-*/*/lxc/*.conf", "pve-container/src/test/test-*/config"]
)
VM_CONFS = _found(["qemu-server/src/test/**/*.conf"])
CFG2CMD = [p for p in VM_CONFS if "cfg2cmd" in p.parts and Path(f"{p}.cmd").is_file()]
# At the commits the fixtures README names (a floor: fewer means a broken copy).
FLOOR = {"container": 100, "vm": 200, "cfg2cmd": 90, "cfg2cmd-vfio": 6}


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(FIXTURES)) for p in paths]


def _cases(paths: list[Path]) -> list[Path | None]:
    """The parameters of a test over ``paths``; one None when nothing was found, so that
    the test runs and fails (an empty parameter set would be a skip)."""
    return list(paths) or [None]


def _need(path: Path | None, kind: str) -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"PVE fixtures folder missing: {_WHERE}", pytrace=False)
    if path is None:
        pytest.fail(f"no {kind} config found under {_WHERE}", pytrace=False)
    return path


def _read(path: Path) -> str:
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()


def test_the_fixtures_are_there() -> None:
    if not FIXTURES.is_dir():
        pytest.fail(f"PVE fixtures folder missing: {_WHERE}", pytrace=False)
    vfio = [p for p in CFG2CMD if "vfio-pci," in _read(Path(f"{p}.cmd"))]
    found = {
        "container": len(CONTAINER_CONFS),
        "vm": len(VM_CONFS),
        "cfg2cmd": len(CFG2CMD),
        "cfg2cmd-vfio": len(vfio),
    }
    short = {k: f"{found[k]} < {n}" for k, n in FLOOR.items() if found[k] < n}
    assert not short, f"too few PVE fixtures under {_WHERE}: {short}"


# --------------------------------------------------------------------------- containers


def _sections(conf: pve_conf.PveConf) -> list[tuple[str | None, str]]:
    return [(s.name, "".join(ln.raw for ln in s.lines)) for s in conf.sections[1:]]


def _bare(lines: Iterable[pve_conf.Line]) -> list[str]:
    return [ln.raw.rstrip("\n").rstrip("\r") for ln in lines]


def _is_subsequence(small: list[str], big: list[str]) -> bool:
    rest = iter(big)
    return all(any(item == other for other in rest) for item in small)


# What a GPU merge gives a container here: one card by Device Minor, nvidiactl and the
# nvidia-uvm nodes (major 511, as the lab's pve-b has it).
DEVICES = [
    lxc_gpu.Device("/dev/nvidia2", 195, 2, "card", "0000:41:00.0"),
    lxc_gpu.Device("/dev/nvidiactl", 195, 255, "ctl"),
    lxc_gpu.Device("/dev/nvidia-uvm", 511, 0, "uvm"),
    lxc_gpu.Device("/dev/nvidia-uvm-tools", 511, 1, "uvm-tools"),
]


def _merge(text: str, devices: list[lxc_gpu.Device], method: str) -> lxc_gpu.MergeResult:
    return lxc_gpu.merge(
        pve_conf.parse(text),
        devices,
        method=method,
        cgroup_key="lxc.cgroup2.devices.allow",
        gpu_majors={195, 511},
        foreign_majors={10: "misc"},
        dev_mode="0666",
    )


@pytest.mark.parametrize("path", _cases(CONTAINER_CONFS), ids=_ids(CONTAINER_CONFS) or ["none"])
def test_container_config_round_trip(path: Path | None) -> None:
    text = _read(_need(path, "container"))
    assert pve_conf.parse(text).render() == text
    pve_conf.parse(text, strict=True)  # no line PVE would warn about


@pytest.mark.parametrize("path", _cases(CONTAINER_CONFS), ids=_ids(CONTAINER_CONFS) or ["none"])
@pytest.mark.parametrize("method", ["dev", "raw"])
def test_container_gpu_merge_and_removal(path: Path | None, method: str, tmp_path: Path) -> None:
    original = _read(_need(path, "container"))
    before = pve_conf.parse(original)
    conf_file = tmp_path / "100.conf"
    conf_file.write_bytes(original.encode())

    added = _merge(original, DEVICES, method)
    assert added.changed
    pve_conf.write_conf_atomic(str(conf_file), added.after)
    merged_text = _read(conf_file)
    assert merged_text == added.after
    merged = pve_conf.parse(merged_text)
    assert _sections(merged) == _sections(before)  # snapshots and pending untouched
    assert _is_subsequence(_bare(before.main.lines), _bare(merged.main.lines))
    assert merged_text.endswith("\n") == original.endswith("\n")
    if method == "dev":
        assert {v.split(",")[0] for v in merged.indexed("dev").values()} >= {
            d.path for d in DEVICES
        }
    else:
        assert ("lxc.cgroup2.devices.allow", "c 195:2 rwm") in merged.lxc()
    assert _merge(merged_text, DEVICES, method).changed is False  # a re-run changes nothing

    removed = _merge(merged_text, [], method)
    pve_conf.write_conf_atomic(str(conf_file), removed.after)
    assert _read(conf_file) == original


# --------------------------------------------------------------------------- VMs


@pytest.mark.parametrize("path", _cases(VM_CONFS), ids=_ids(VM_CONFS) or ["none"])
def test_vm_config_round_trip_and_hostpci_read(path: Path | None) -> None:
    text = _read(_need(path, "VM"))
    conf = pve_conf.parse(text, kind="qemu")
    assert conf.render() == text
    warnings: list[str] = []
    entries = gpu.parse_vm_config(text, 8006, "/etc/pve/qemu-server/8006.conf", warnings)
    # The main section is all a VM runs with: its hostpci keys are the entries read.
    keys = {k for k in conf.items() if k in gpu.HOSTPCI_KEYS}
    assert {e.key for e in entries if e.key != "args"} == keys
    assert warnings == []


# PVE's cfg2cmd test driver (qemu-server src/test/run_config2command_tests.pl at
# e6352be6) mocks the host: PVE::SysFSTools::lspci lists these functions, the cluster's
# PCI mappings are these, and the node is `localhost`. Facts only; the driver is not
# copied.
DRIVER_PCI_DEVICES = [
    "0000:00:43.1", "0000:00:f4.0", "0000:00:ff.1", "0000:0f:f2.0", "0000:d0:13.0",
    "0000:d0:15.1", "0000:d0:15.2", "0000:d0:17.0", "0000:f0:42.0", "0000:f0:43.0",
    "0000:f0:43.1", "1234:f0:43.1", "0000:01:00.4", "0000:01:00.5", "0000:01:00.6",
    "0000:07:10.0", "0000:07:10.1", "0000:07:10.4",
]  # fmt: skip
DRIVER_MAPPINGS = {
    "someGpu": ("10de:2231", 1, ["0000:01:00.4", "0000:01:00.5", "0000:01:00.6"]),
    "someNic": ("8086:1520", 2, ["0000:07:10.0", "0000:07:10.1", "0000:07:10.4"]),
}
DRIVER_VMID = 8006


def _driver_host(root: Path, conf_text: str) -> gpu.HostRoots:
    """A host tree with the driver's PCI functions (each an NVIDIA display function, so
    that the GPU facts list it as a card with its holders), its mappings as
    ``/etc/pve/mapping/pci.cfg`` and the config as VM 8006's."""
    for address in DRIVER_PCI_DEVICES:
        dev = root / "sys/bus/pci/devices" / address
        dev.mkdir(parents=True)
        device = next((i for i, _g, paths in DRIVER_MAPPINGS.values() if address in paths), "")
        (dev / "vendor").write_text("0x10de\n")
        (dev / "device").write_text(f"0x{device.split(':')[1] if device else '2230'}\n")
        (dev / "class").write_text("0x030000\n")
    pve = root / "etc/pve"
    (pve / "qemu-server").mkdir(parents=True)
    (pve / "qemu-server" / f"{DRIVER_VMID}.conf").write_text(conf_text)
    (pve / "mapping").mkdir()
    (pve / "mapping" / "pci.cfg").write_text(
        "".join(
            f"{name}\n"
            + "".join(
                f"\tmap id={pci_id},iommugroup={group},node=localhost,path={path}\n"
                for path in paths
            )
            + "\n"
            for name, (pci_id, group, paths) in DRIVER_MAPPINGS.items()
        )
    )
    return gpu.HostRoots.under(root)


@dataclass
class Passed:
    """What one ``hostpciN`` passes through: PCI functions (``host=``) or an mdev."""

    functions: set[str]
    mdev: bool = False


def vfio_devices(cmd_text: str) -> dict[str, Passed]:
    """``hostpciN`` -> what the ``-device vfio-pci,...`` arguments of a ``.conf.cmd``
    file pass through (``id=hostpciN`` or ``hostpciN.M`` for a multi-function device)."""
    words = shlex.split(cmd_text.replace("\\\n", " "))
    out: dict[str, Passed] = {}
    for word, spec in itertools.pairwise(words):
        if word != "-device" or not spec.startswith("vfio-pci,"):
            continue
        props = dict(item.split("=", 1) for item in spec.split(",")[1:] if "=" in item)
        key = props["id"].split(".")[0]
        passed = out.setdefault(key, Passed(set()))
        if "host" in props:
            passed.functions.add(str(gpu.PciAddress.parse_full(props["host"])))
        else:
            assert props["sysfsdev"].startswith("/sys/bus/mdev/devices/"), spec
            passed.mdev = True
    return out


def test_the_cmd_reader_reads_what_pve_wrote() -> None:
    cmd = (
        "/usr/bin/kvm \\\n  -device 'vfio-pci,host=0000:f0:43.0,id=hostpci0.0,bus=pci.0,"
        "addr=0x10.0,multifunction=on' \\\n  -device 'vfio-pci,host=0000:f0:43.1,id=hostpci0.1' "
        "\\\n  -device 'vfio-pci,sysfsdev=/sys/bus/mdev/devices/00000001-0000-0000-0000-"
        "000000008006,id=hostpci1' \\\n  -device 'virtio-net-pci,id=net0'\n"
    )
    assert vfio_devices(cmd) == {
        "hostpci0": Passed({"0000:f0:43.0", "0000:f0:43.1"}),
        "hostpci1": Passed(set(), mdev=True),
    }


def specops_holds(facts: gpu.HostGpuFacts, vmid: int) -> dict[str, tuple[set[str], bool]]:
    """``hostpciN`` -> (the functions the GPU facts say VM ``vmid`` holds through it,
    whether every holder entry of it is exclusive)."""
    out: dict[str, tuple[set[str], bool]] = {}
    for card in facts.gpus:
        for holder in card.holders:
            if holder.vmid != vmid:
                continue
            functions, exclusive = out.get(holder.key, (set(), True))
            out[holder.key] = (functions | set(holder.functions), exclusive and holder.exclusive)
    return out


@pytest.mark.parametrize("path", _cases(CFG2CMD), ids=_ids(CFG2CMD) or ["none"])
def test_cfg2cmd_vm_holds_what_qemu_gets(path: Path | None, tmp_path: Path) -> None:
    conf_text = _read(_need(path, "cfg2cmd"))
    expected = vfio_devices(_read(Path(f"{path}.cmd")))
    roots = _driver_host(tmp_path, conf_text)
    facts = gpu.gather_facts(roots, node="localhost", vm_running=lambda vmid: True)
    holds = specops_holds(facts, DRIVER_VMID)
    entries = gpu.parse_vm_config(conf_text, DRIVER_VMID, "8006.conf")
    in_doubt = {e.key for e in entries if e.doubt} | {k for k, (_, ex) in holds.items() if not ex}

    for key, passed in expected.items():
        functions, _exclusive = holds.get(key, (set(), True))
        if key in in_doubt:
            # Stricter on purpose: every candidate counts, PVE passes one (or an mdev).
            assert passed.functions <= functions, (key, passed, functions)
            assert functions, key
        else:
            assert functions == passed.functions, (key, passed, functions)
            assert not passed.mdev, key
    # What specops counts beyond QEMU's command line is in doubt only (a template).
    assert set(holds) - set(expected) <= in_doubt, (holds, expected)
    if not in_doubt:
        assert {k: f for k, (f, _) in holds.items()} == {
            k: p.functions for k, p in expected.items()
        }


def test_the_stricter_direction_is_what_it_says() -> None:
    """The doubt cases of the fixtures, spelled out: a mapping with three candidate paths
    and a template's entries count; PVE passes one path, or none for a template."""
    mapping = FIXTURES / "qemu-server/src/test/cfg2cmd/q35-linux-hostpci-mapping.conf"
    template = FIXTURES / "qemu-server/src/test/cfg2cmd/q35-linux-hostpci-template.conf"
    for path in (mapping, template):
        _need(path if path.is_file() else None, path.name)
    entries = gpu.parse_vm_config(_read(template), DRIVER_VMID, "8006.conf")
    assert {e.doubt for e in entries} == {"a template: PVE never starts it"}
    assert vfio_devices(_read(Path(f"{template}.cmd"))) == {}
    assert vfio_devices(_read(Path(f"{mapping}.cmd")))["hostpci0"].functions == {"0000:07:10.0"}


# --------------------------------------------------------------------------- the guard


def test_a_missing_fixtures_folder_fails_every_test(tmp_path: Path) -> None:
    """Pointed at a folder that does not exist, this module's tests fail (none skips),
    each naming the folder."""
    missing = tmp_path / "no-such-folder"
    env = {**os.environ, ENV: str(missing)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfs",
         "--basetemp", str(tmp_path / "run"), str(Path(__file__)),
         "-k", "not missing_fixtures_folder and not cmd_reader"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    summary = out.strip().splitlines()[-1]
    assert " failed" in summary, summary
    assert "skipped" not in summary, summary
    assert "passed" not in summary, summary
    assert f"PVE fixtures folder missing: {missing}" in out
