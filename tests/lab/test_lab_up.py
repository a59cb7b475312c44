"""`specops lab up` brings the lab to its described state once and keeps it."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from specops.errors import ValidationError
from specops_lab.pve.layout import Node
from specops_lab.pve.testing import _of_node, free_port
from specops_lab.up import LabPaths, down, up

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[LabPaths, int, Path]]:
    template = tmp_path / "template.tar"
    template.write_bytes(b"not a real rootfs: lab up only places it in storage")
    paths = LabPaths(tmp_path / "lab")
    port = free_port()
    yield paths, port, template
    down(paths)


def _get(url: str, cert: str, auth: str | None) -> int:
    ctx = ssl.create_default_context(cafile=cert)
    ctx.check_hostname = False
    headers = {"Authorization": auth} if auth else {}
    return httpx.get(url, headers=headers, verify=ctx, timeout=5).status_code


def test_up_is_idempotent_and_keeps_role_changes(
    lab: tuple[LabPaths, int, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    paths, port, template = lab
    hardware = REPO / "inventory" / "lab" / "hardware"
    info = up(paths, hardware_dir=hardware, template=template, port=port, with_network=False)
    assert sorted(info["nodes"]) == ["pve-a", "pve-b"]
    secret = Path(info["token_secret_file"]).read_text().strip()
    assert secret not in capsys.readouterr().out, "the token secret is never printed"
    assert (Path(info["token_secret_file"]).stat().st_mode & 0o777) == 0o600

    version = f"{info['api']}/version"
    assert _get(version, info["cert"], f"PVEAPIToken={info['token']}={secret}") == 200
    assert _get(version, info["cert"], None) == 401

    # A role changed the simulated host (say, loaded the driver): a re-run keeps it.
    marker = paths.node_root("pve-a") / "sys" / "module" / "specops-test-marker"
    marker.write_text("changed by a role\n")
    again = up(paths, hardware_dir=hardware, template=template, port=port, with_network=False)
    assert again == info
    out = capsys.readouterr().out
    assert "pve-a: host tree present" in out
    assert "API stand-in answers" in out
    assert marker.exists()

    up(paths, hardware_dir=hardware, template=template, port=port, reset=True, with_network=False)
    assert not marker.exists(), "--reset rebuilds the tree from its description"

    pve_a = json.loads((paths.node_root("pve-a") / "etc" / "specops-lab-node.json").read_text())
    assert pve_a["name"] == "pve-a"
    # The node's system stand-ins and its PCI stand-in (the kernel's part of a bind).
    assert (paths.node_root("pve-a") / "usr/sbin/update-initramfs").is_file()
    assert (paths.node_root("pve-a") / "etc/specops-lab/hardware.yml").is_file()
    pid = int(paths.pci_pidfile("pve-a").read_text())
    assert b"specops_lab.pci_standin" in Path(f"/proc/{pid}/cmdline").read_bytes()
    stored = paths.node_root("pve-b") / "var/lib/vz/template/cache/debian-bookworm-rootfs.tar"
    assert stored.read_bytes() == template.read_bytes()


def test_down_stops_the_api(lab: tuple[LabPaths, int, Path]) -> None:
    paths, port, template = lab
    info = up(
        paths,
        hardware_dir=REPO / "inventory/lab/hardware",
        template=template,
        port=port,
        with_network=False,
    )
    pci = int(paths.pci_pidfile("pve-b").read_text())
    down(paths)
    with pytest.raises(httpx.ConnectError):
        _get(f"{info['api']}/version", info["cert"], None)
    assert not Path(f"/proc/{pci}").exists(), "the PCI stand-ins stop too"


def test_missing_template_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"--template: .* scripts/setup\.sh image"):
        up(
            LabPaths(tmp_path / "lab"),
            hardware_dir=REPO / "inventory/lab/hardware",
            template=tmp_path / "absent.tar",
            port=free_port(),
            with_network=False,
        )


def test_a_lab_only_touches_its_own_lxc_containers(tmp_path: Path) -> None:
    """LXC names are <node>-<vmid> in a shared lxcpath: a test's lab (nodes pve-a/pve-b in
    a temp dir) must not stop or remove the containers of the lab in /var/lib/specops/lab
    whose nodes have the same names."""
    ours = Node("pve-b", tmp_path / "ours" / "pve-b", lxcpath=tmp_path / "lxc")
    for name, root in (("pve-b-801", tmp_path / "other" / "pve-b"), ("pve-b-802", ours.root)):
        (tmp_path / "lxc" / name).mkdir(parents=True)
        (tmp_path / "lxc" / name / "config").write_text(
            f"lxc.arch = amd64\nlxc.rootfs.path = dir:{root}/var/lib/vz/images/1/subvol\n"
        )
    assert not _of_node(ours, tmp_path / "lxc" / "pve-b-801")
    assert _of_node(ours, tmp_path / "lxc" / "pve-b-802")
    assert not _of_node(ours, tmp_path / "lxc" / "pve-b-803"), "no config: not known as ours"


def test_a_lab_daemon_keeps_no_descriptor_of_its_caller(tmp_path: Path) -> None:
    """`flock /tmp/specops-lab.lock specops lab up` hands the lock's descriptor to the
    command: a daemon that kept it would hold the lab's lock after the command ended, and
    every later `flock` would wait for ever (it did, 2026-12-04)."""
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import time  # noqa: PLC0415

    from specops_lab.up import _spawn  # noqa: PLC0415

    lock = os.open(tmp_path / "lock", os.O_RDONLY | os.O_CREAT)
    os.set_inheritable(lock, True)
    log = tmp_path / "daemon.log"
    pid = _spawn(["/bin/sleep", "30"], log)
    try:
        deadline = time.monotonic() + 10
        while b"sleep" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)
        # sleep(1) opens and closes its locale files as it starts: a descriptor may go
        # between the listing and the read, and only an inherited one stays
        held = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                held.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except FileNotFoundError:
                continue
        assert str(tmp_path / "lock") not in held
        assert [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in (0, 1, 2)] == [
            os.devnull,
            str(log),
            str(log),
        ]
    finally:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
        os.close(lock)


def test_a_lab_of_another_shape_leaves_no_tree_of_the_last(
    lab: tuple[LabPaths, int, Path], tmp_path: Path
) -> None:
    """The two-node lab, then a lab of pve-b alone (a fleet of 1): pve-a's tree, in
    whatever state its last run left it, must not stand in for pve-a's description the
    next time pve-a is in the lab (a host campaign once started from a converged pve-a)."""
    paths, port, template = lab
    both = REPO / "inventory/lab/hardware"
    up(paths, hardware_dir=both, template=template, port=port, with_network=False)
    marker = paths.node_root("pve-a") / "sys" / "module" / "specops-test-marker"
    marker.write_text("changed by a role\n")
    one = tmp_path / "one"
    one.mkdir()
    (one / "pve-b.yml").write_bytes((both / "pve-b.yml").read_bytes())
    info = up(paths, hardware_dir=one, template=template, port=port, with_network=False)
    assert sorted(info["nodes"]) == ["pve-b"]
    assert not paths.node_root("pve-a").exists()
    up(paths, hardware_dir=both, template=template, port=port, with_network=False)
    assert not marker.exists(), "pve-a built again from its description"
