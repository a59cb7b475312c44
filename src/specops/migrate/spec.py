"""What to migrate, where, and how: the inventory's ``migrate_*`` settings, validated."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.errors import ValidationError, bool_field

__all__ = ["ApiEndpoint", "MigrationSpec", "load_spec", "parse_spec"]

MODES = ("migrate", "backup_restore")
# How a CT whose source node is gone comes back (the preflight decides with ``auto``:
# its latest backup the target sees, else the inventory's description).
RECOVERIES = ("auto", "backup", "inventory")
_NODE_RE = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$")
_STORAGE_RE = re.compile(r"^[a-z][a-z0-9\-_.]*[a-z0-9]$")
_MP_RE = re.compile(r"^mp\d{1,3}$")


@dataclass(frozen=True)
class ApiEndpoint:
    """One PVE API (one cluster). The token secret is read when used and never shown."""

    host: str
    port: int = 8006
    user: str = "root@pam"
    token_name: str = "specops"  # noqa: S105  (the token's name, not its secret)
    token_secret_file: str = ""
    token_secret_env: str = "PROXMOX_TOKEN_SECRET"  # noqa: S105  (a variable name)
    verify: str | bool = True
    timeout: int = 30
    # Given on standard input (a check run writes no file): never shown, never in a repr.
    token_secret: str = field(default="", repr=False, compare=False)

    def secret(self) -> str:
        """The token secret: given on standard input, else from the environment variable
        (none when its name is empty), else the file."""
        value = self.token_secret
        if not value and self.token_secret_env:
            value = os.environ.get(self.token_secret_env, "")
        if not value and self.token_secret_file:
            try:
                value = Path(self.token_secret_file).read_text().strip()
            except OSError as exc:
                raise ValidationError(
                    "api.token_secret_file", f"cannot read the token secret file ({exc.strerror})"
                ) from None
        if not value:
            where = f"set {self.token_secret_env} or" if self.token_secret_env else "give"
            raise ValidationError(
                "api.token_secret_file", f"no API token secret: {where} token_secret_file"
            )
        return value

    def __repr__(self) -> str:  # the secret is never part of any repr
        return f"ApiEndpoint({self.user}!{self.token_name}@{self.host}:{self.port})"


@dataclass(frozen=True)
class MigrationSpec:
    vmid: int
    target: str
    api: ApiEndpoint
    source: str = ""  # expected source node; empty: wherever the CT is
    mode: str = "migrate"
    gpu_model: str = ""
    gpu_count: int = 0
    min_vram_gib: int = 0
    allow_stopped_vm_cards: bool = False  # also take cards stopped VMs keep (gpu_select)
    target_storage: str = ""
    recreate_mounts: tuple[str, ...] = ()
    backup_storage: str = ""
    target_api: ApiEndpoint | None = None  # another cluster's API (backup_restore)
    restart: bool = True
    shutdown_timeout: int = 180
    task_timeout: int = 1800
    state_dir: str = "/var/lib/specops/migrate"
    # Source node gone (offline or removed from the cluster): how to bring the CT back,
    # and the container's inventory host (re-creating it needs its description).
    recovery: str = "auto"
    inventory_host: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def state_file(self) -> Path:
        return Path(self.state_dir) / f"migrate-{self.vmid}.json"


def _int(data: Mapping[str, Any], key: str, default: int, lo: int, hi: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value))
        except ValueError:
            raise ValidationError(key, f"must be an integer {lo}..{hi} (got {value!r})") from None
    if not lo <= value <= hi:
        raise ValidationError(key, f"must be an integer {lo}..{hi} (got {value})")
    return value


def _api(data: Any, where: str) -> ApiEndpoint:
    if not isinstance(data, Mapping):
        raise ValidationError(where, "must be a mapping with host, port, user, token_name, ...")
    known = set(ApiEndpoint.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValidationError(
            f"{where}.{unknown[0]}", f"unknown key (valid: {', '.join(sorted(known))})"
        )
    if not data.get("host"):
        raise ValidationError(f"{where}.host", "the API host is required")
    verify = data.get("verify", True)
    if verify == "":  # the inventory's empty CA file: the system store
        verify = True
    if isinstance(verify, str) and verify.lower() in ("true", "false"):
        verify = verify.lower() == "true"
    if not isinstance(verify, (bool, str)):
        raise ValidationError(f"{where}.verify", "true, false or a CA/cert file path")
    if isinstance(verify, str) and not Path(verify).is_file():
        raise ValidationError(
            f"{where}.verify",
            f"no CA file {verify} (migrate_api_ca_file): copy a node's /etc/pve/pve-root-ca.pem"
            " there (the example keeps it in the inventory's files/pve-root-ca.pem), or set"
            " it empty to trust the controller's system store",
        )
    return ApiEndpoint(
        host=str(data["host"]),
        port=_int(data, "port", 8006, 1, 65535),
        user=str(data.get("user", "root@pam")),
        token_name=str(data.get("token_name", "specops")),
        token_secret_file=str(data.get("token_secret_file", "")),
        token_secret_env=str(data.get("token_secret_env", "PROXMOX_TOKEN_SECRET")),
        token_secret=str(data.get("token_secret", "") or ""),
        verify=verify,
        timeout=_int(data, "timeout", 30, 1, 3600),
    )


def parse_spec(data: Mapping[str, Any]) -> MigrationSpec:
    """Validate a spec mapping (keys as in the inventory, without the ``migrate_`` prefix)."""
    known = set(MigrationSpec.__dataclass_fields__) - {"extra"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValidationError(
            unknown[0], f"unknown migrate setting (valid: {', '.join(sorted(known))})"
        )
    vmid = _int(data, "vmid", 0, 100, 999999999)
    target = str(data.get("target", ""))
    if not _NODE_RE.match(target):
        raise ValidationError("target", f"a PVE node name is required (got {target!r})")
    source = str(data.get("source", "") or "")
    if source and not _NODE_RE.match(source):
        raise ValidationError("source", f"not a PVE node name (got {source!r})")
    if source and source == target:
        raise ValidationError("target", f"is the source node {source!r}: nothing to migrate")
    mode = str(data.get("mode", "migrate"))
    if mode not in MODES:
        raise ValidationError("mode", f"must be one of {', '.join(MODES)} (got {mode!r})")
    gpu_model = str(data.get("gpu_model", "") or "")
    gpu_count = _int(data, "gpu_count", 1 if gpu_model else 0, 0, 16)
    if gpu_count and not gpu_model:
        raise ValidationError("gpu_model", "required when gpu_count > 0 (e.g. 'NVIDIA RTX A6000')")
    for key in ("target_storage", "backup_storage"):
        value = str(data.get(key, "") or "")
        if value and not _STORAGE_RE.match(value):
            raise ValidationError(key, f"not a PVE storage id (got {value!r})")
    mounts = data.get("recreate_mounts", []) or []
    if not isinstance(mounts, list) or not all(
        isinstance(m, str) and _MP_RE.match(m) for m in mounts
    ):
        raise ValidationError(
            "recreate_mounts", f"a list of mount point keys like mp0 (got {mounts!r})"
        )
    target_api = _api(data["target_api"], "target_api") if data.get("target_api") else None
    if mode == "backup_restore" and not data.get("backup_storage"):
        raise ValidationError(
            "backup_storage",
            "required for mode backup_restore (a shared storage with 'backup' content)",
        )
    if mode == "migrate" and target_api is not None:
        raise ValidationError("target_api", "only for mode backup_restore (another cluster's API)")
    recovery = str(data.get("recovery", "auto") or "auto")
    if recovery not in RECOVERIES:
        raise ValidationError(
            "recovery", f"must be one of {', '.join(RECOVERIES)} (got {recovery!r})"
        )
    restart = bool_field(data, "restart", True)
    allow_stopped = bool_field(data, "allow_stopped_vm_cards", False)
    return MigrationSpec(
        vmid=vmid,
        target=target,
        source=source,
        api=_api(data.get("api"), "api"),
        mode=mode,
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        min_vram_gib=_int(data, "min_vram_gib", 0, 0, 4096),
        allow_stopped_vm_cards=allow_stopped,
        target_storage=str(data.get("target_storage", "") or ""),
        recreate_mounts=tuple(mounts),
        backup_storage=str(data.get("backup_storage", "") or ""),
        target_api=target_api,
        restart=restart,
        shutdown_timeout=_int(data, "shutdown_timeout", 180, 1, 86400),
        task_timeout=_int(data, "task_timeout", 1800, 1, 86400),
        state_dir=str(data.get("state_dir", "/var/lib/specops/migrate")),
        recovery=recovery,
        inventory_host=str(data.get("inventory_host", "") or ""),
    )


def load_spec(path: Path) -> MigrationSpec:
    """Read a spec file (JSON, as the playbook writes it)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValidationError("--spec", f"cannot read {path}: {exc}") from None
    if not isinstance(data, Mapping):
        raise ValidationError("--spec", f"{path} must hold a JSON object")
    return parse_spec(data)
