"""Verify container_base's effect on a real systemd container."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def test_service_user_is_unprivileged_system_account(host: Any) -> None:
    user = host.user("specops")
    assert user.exists
    assert user.uid < 1000, "a system account"
    assert user.uid != 0
    assert user.group == "specops"
    assert user.home == "/var/lib/specops"
    assert user.shell == "/usr/sbin/nologin"


def test_directories_have_owners_and_modes(
    assert_dir: Callable[[str, str, str, int], None],
) -> None:
    assert_dir("/var/lib/specops", "specops", "specops", 0o750)
    assert_dir("/opt/specops", "specops", "specops", 0o755)
    assert_dir("/var/cache/specops", "specops", "specops", 0o750)
    assert_dir("/etc/specops", "root", "specops", 0o750)


def test_service_user_can_write_where_later_roles_install(host: Any) -> None:
    for path in ("/opt/specops", "/var/cache/specops", "/var/lib/specops"):
        probe = f"{path}/.write-probe"
        result = host.run(f"runuser -u specops -- sh -c 'touch {probe} && rm {probe}'")
        assert result.rc == 0, f"specops cannot write {path}: {result.stderr}"


def test_service_user_cannot_write_config(host: Any) -> None:
    result = host.run("runuser -u specops -- touch /etc/specops/x")
    assert result.rc != 0, "config dir must be root-owned"


def test_packages_installed_including_extra(host: Any) -> None:
    for name in ("python3", "python3-venv", "ca-certificates", "curl", "sudo", "jq"):
        assert host.package(name).is_installed, name


def test_python_venv_works_for_the_service_user(host: Any) -> None:
    cmd = "runuser -u specops -- python3 -m venv /opt/specops/probe-venv"
    assert host.run(cmd).rc == 0
    host.run("rm -rf /opt/specops/probe-venv")


def test_journal_is_persistent_and_journald_running(
    host: Any, assert_service_running: Callable[[str], None]
) -> None:
    assert host.file("/var/log/journal").is_directory
    assert_service_running("systemd-journald")
