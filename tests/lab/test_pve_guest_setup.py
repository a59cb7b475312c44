"""What the PVE stand-in writes into a container at start, as PVE's setup does
(pve-container LXC/Setup/Base.pm set_hostname, update_etc_hosts, set_dns, ct_modify_file)."""

from __future__ import annotations

from pathlib import Path

from specops_lab.pve.conf import parse_pct_config
from specops_lab.pve.setup import _host_resolv_conf, setup_guest


def test_hostname_hosts_section_and_host_dns(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "hosts").write_text("127.0.0.1 localhost\n10.1.1.1 other\n")
    setup_guest(rootfs, parse_pct_config(801, "hostname: lab-ct801.example\n"))
    assert (rootfs / "etc/hostname").read_text() == "lab-ct801\n"  # the name up to the dot
    hosts = (rootfs / "etc/hosts").read_text()
    assert hosts == (
        "127.0.0.1 localhost\n10.1.1.1 other\n"
        "# --- BEGIN PVE ---\n"
        "::1 localhost.localnet localhost\n"  # no ::1 line outside the section yet
        "127.0.1.1 lab-ct801.example lab-ct801\n"
        "# --- END PVE ---\n"
    )
    # A second start replaces the section in place, nothing else.
    setup_guest(rootfs, parse_pct_config(801, "hostname: renamed\nsearchdomain: lab\n"))
    hosts = (rootfs / "etc/hosts").read_text()
    assert hosts.count("BEGIN PVE") == 1
    assert "127.0.1.1 renamed.lab renamed\n" in hosts
    assert hosts.startswith("127.0.0.1 localhost\n10.1.1.1 other\n")
    host = _host_resolv_conf()
    want = "".join(f"nameserver {host[k]}\n" for k in ("dns1", "dns2", "dns3") if k in host)
    assert (rootfs / "etc/resolv.conf").read_text() == (
        f"# --- BEGIN PVE ---\nsearch lab\n{want}# --- END PVE ---\n"
    )


def test_conf_dns_static_ip_defaults_and_ignore_files(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    conf = parse_pct_config(
        7,
        "nameserver: 192.0.2.53 192.0.2.54\nsearchdomain: lab\n"
        "net0: name=eth0,bridge=vmbr0,ip=10.0.0.7/24\n",
    )
    setup_guest(rootfs, conf)
    assert (rootfs / "etc/hostname").read_text() == "localhost\n"  # no hostname: localhost
    assert (rootfs / "etc/hosts").read_text() == (
        "# --- BEGIN PVE ---\n127.0.0.1 localhost.localnet localhost\n"
        "::1 localhost.localnet localhost\n10.0.0.7 localhost.lab localhost\n# --- END PVE ---\n"
    )
    assert (rootfs / "etc/resolv.conf").read_text() == (
        "# --- BEGIN PVE ---\nsearch lab\nnameserver 192.0.2.53\nnameserver 192.0.2.54\n"
        "# --- END PVE ---\n"
    )
    (rootfs / "etc/.pve-ignore.hosts").write_text("")
    (rootfs / "etc/hosts").write_text("mine\n")
    setup_guest(rootfs, conf)
    assert (rootfs / "etc/hosts").read_text() == "mine\n"
