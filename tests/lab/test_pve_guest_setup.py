"""What the PVE stand-in writes into a container at start, as PVE's setup does."""

from __future__ import annotations

from pathlib import Path

from specops.lab.pve import pct
from specops.lab.pve.conf import parse_pct_config


def test_hostname_hosts_and_host_dns(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "hosts").write_text("127.0.0.1 localhost\n127.0.1.1 old-name\n")
    pct._setup_guest(rootfs, parse_pct_config(801, "hostname: lab-ct801\n"), 801)
    assert (rootfs / "etc/hostname").read_text() == "lab-ct801\n"
    assert (rootfs / "etc/hosts").read_text() == "127.0.0.1 localhost\n127.0.1.1 lab-ct801\n"
    assert (rootfs / "etc/resolv.conf").read_text() == Path("/etc/resolv.conf").read_text()


def test_conf_dns_and_defaults(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    conf = parse_pct_config(7, "nameserver: 192.0.2.53 192.0.2.54\nsearchdomain: lab\n")
    pct._setup_guest(rootfs, conf, 7)
    assert (rootfs / "etc/hostname").read_text() == "CT7\n"
    assert (rootfs / "etc/hosts").read_text() == (
        "127.0.0.1 localhost.localdomain localhost\n127.0.1.1 CT7\n"
    )
    assert (rootfs / "etc/resolv.conf").read_text() == (
        "search lab\nnameserver 192.0.2.53\nnameserver 192.0.2.54\n"
    )
