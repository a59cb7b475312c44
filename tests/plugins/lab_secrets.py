"""Known secrets for the lab deploy (tests/deploy/test_deploy_lab.py), and the scan of
everything its run left where another user could read them (issue 31).

The run gets each secret the way an operator gives it:

- the PVE API token secret through ``PROXMOX_TOKEN_SECRET`` (``scripts/lab.sh`` exports
  it from the lab's 0600 secret file, as the README says; the value is known once
  ``specops lab up`` made it);
- the server's API key through ``inference_service_api_key_file``, a 0600 file on the
  controller (inventory/example's serving group);
- a Hugging Face token through ``inference_engine_hf_token``, vaulted
  (``ansible-vault encrypt_string``, as the example inventory's ``vault_hf_token``),
  its vault password in a 0600 file.

:func:`lab_secrets` makes them once per test session in a 0700 folder under
``.cache/deploy-lab/secrets`` (random values; ``args`` gives every run of the module the
same extra variables, so the runs agree). ``watch()`` samples the process table while
the run lasts and ``scan()`` walks, after it: the repository (``.git`` and ``.venv``
left out), the lab's tree (every node's root and every container's rootfs under it),
the nodes' LXC folders, what changed in ``/tmp`` during the run, the journal of this
machine (when it has one) and of every running lab container. ``Report.failures`` are
the findings no allowance explains; each allowance says why its reader must hold the
secret.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from plugins.secret_scan import Finding, ProcessWatch, Secret, TreeScan, scan_stream, scan_tree

__all__ = ["ALLOWED", "Allowance", "LabSecrets", "Report", "lab_secrets"]

LAB = Path("/var/lib/specops/lab")
TOKEN_FILE = LAB / "secrets" / "pve-api-token-secret"


@dataclass(frozen=True)
class Allowance:
    """A reader that must hold ``secret`` where ``where`` matches, and why."""

    secret: str
    where: str  # a regular expression over Finding.where
    who: str  # a regular expression over Finding.who
    reason: str

    def allows(self, finding: Finding) -> bool:
        return (
            finding.secret == self.secret
            and re.search(self.where, finding.where) is not None
            and re.search(self.who, finding.who) is not None
        )


ALLOWED: tuple[Allowance, ...] = (
    Allowance(
        secret="the server's API key",  # noqa: S106  (a secret's name, not its value)
        where=r", specops-[\w.@-]+\.service\) /proc/\d+/environ$",
        who=r"^user \d+ \(the process's own user\)$",
        reason=(
            "the inference unit's own processes: systemd hands the key from the unit's "
            "root-only EnvironmentFile to the server (vLLM reads VLLM_API_KEY: a server must "
            "know its key to check requests; the alternative, --api-key, is a world-readable "
            "command line), and the processes it starts (its compiler, the unit's health "
            "wait) inherit it; they run as the service user, the one user besides root who "
            "can read their environment"
        ),
    ),
)


@dataclass
class Report:
    files: int = 0
    read: int = 0
    bytes_read: int = 0
    roots: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # what could not be scanned
    samples: int = 0
    processes: int = 0

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if not any(a.allows(f) for a in ALLOWED)]

    def summary(self) -> str:
        allowed = [f for f in self.findings if f not in self.failures]
        lines = [
            f"secret scan: {self.files} files in {', '.join(self.roots)}; {self.read} readable "
            f"by a user other than root were read ({self.bytes_read / 2**20:.0f} MiB); "
            f"{self.samples} samples of /proc ({self.processes} processes seen)",
            *self.notes,
            *(f"allowed: {f}" for f in allowed),
            *(
                f"(allowed because: {a.reason})"
                for a in ALLOWED
                if any(a.allows(f) for f in allowed)
            ),
            *(f"FOUND: {f}" for f in self.failures),
            *(f"NOT SCANNED: {e}" for e in self.errors),
        ]
        return "\n".join(lines)


@dataclass
class LabSecrets:
    folder: Path
    api_key_file: Path
    vault_password_file: Path
    vars_file: Path
    api_key: Secret
    hf_token: Secret
    vault_password: Secret
    report: Report | None = None

    @property
    def args(self) -> list[str]:
        """What every playbook run of the module appends (lab.sh passes it on)."""
        return ["-e", f"@{self.vars_file}", "--vault-password-file", str(self.vault_password_file)]

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key.value}"}

    def known(self) -> list[Secret]:
        """Every secret known now; the PVE token once ``specops lab up`` wrote it."""
        known = [self.api_key, self.hf_token, self.vault_password]
        with contextlib.suppress(OSError):
            known.append(Secret("PROXMOX_TOKEN_SECRET", TOKEN_FILE.read_text().strip()))
        return known

    def watch(self) -> ProcessWatch:
        return ProcessWatch(self.known, interval=0.2)

    def scan(self, repo: Path, started: float, watch: ProcessWatch) -> Report:
        """Everything the run left (see the module's docstring); kept in ``report``."""
        known = self.known()
        names = {s.name for s in known}
        clock = time.monotonic()
        report = Report(samples=watch.samples, processes=watch.processes)
        if "PROXMOX_TOKEN_SECRET" not in names:
            report.errors.append(f"{TOKEN_FILE} is missing: the lab never came up")
        report.findings.extend(watch.findings)
        trees: list[tuple[Path, float | None]] = [(repo, None), (LAB, None)]
        trees += [(p, None) for p in _lxc_paths() if p != LAB and LAB not in p.parents]
        trees.append((Path("/tmp"), started))
        for root, since in trees:
            scan = scan_tree(root, known, changed_since=since, skip=(".git", ".venv"))
            _add(report, scan)
            report.roots.append(f"{root}{' (changed during the run)' if since else ''}")
        report.notes.extend(_journals(known, report))
        report.notes.append(f"scan after the run: {time.monotonic() - clock:.0f} s")
        self.report = report
        return report


def _add(report: Report, scan: TreeScan) -> None:
    report.files += scan.files
    report.read += scan.read
    report.bytes_read += scan.bytes_read
    report.findings.extend(scan.findings)


def _lxc_paths() -> list[Path]:
    """The nodes' LXC folders (the lab's cluster.json; /var/lib/lxc by default)."""
    try:
        data = json.loads((LAB / "cluster" / "cluster.json").read_text())
    except OSError:
        return [Path("/var/lib/lxc")]
    paths = {Path(n.get("lxcpath", "/var/lib/lxc")) for n in data.get("nodes", [])}
    return sorted(paths) or [Path("/var/lib/lxc")]


def _journals(known: list[Secret], report: Report) -> list[str]:
    """This machine's journal when it has one, and each running lab container's."""
    notes: list[str] = []
    journalctl = shutil.which("journalctl")
    has_journal = Path("/run/systemd/journal/socket").exists() or any(
        Path(d).is_dir() and any(Path(d).iterdir())
        for d in ("/var/log/journal", "/run/log/journal")
    )
    if journalctl and has_journal:
        out = subprocess.run(
            [journalctl, "-o", "export", "--no-pager"],
            capture_output=True,
            check=False,
            timeout=300,
        )
        report.findings.extend(
            scan_stream(
                "this machine's journal", out.stdout, known, "the adm/systemd-journal groups"
            )
        )
        notes.append(f"journal of this machine: {len(out.stdout)} bytes scanned")
    else:
        pid1 = Path("/proc/1/comm").read_text().strip()
        notes.append(f"journal of this machine: none (no journald; PID 1 is {pid1})")
    for lxcpath in _lxc_paths():
        listed = subprocess.run(
            ["lxc-ls", "-P", str(lxcpath), "--running", "-1"],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        for name in listed.stdout.split():
            out = subprocess.run(
                ["lxc-attach", "-n", name, "-P", str(lxcpath), "--",
                 "journalctl", "-o", "export", "--no-pager"],
                capture_output=True, check=False, timeout=300,
            )  # fmt: skip
            if out.returncode != 0:
                report.errors.append(f"journal of container {name}: journalctl: {out.stderr!r}")
                continue
            report.findings.extend(
                scan_stream(
                    f"journal of container {name}", out.stdout, known,
                    "the container's adm/systemd-journal groups",
                )
            )  # fmt: skip
            notes.append(f"journal of container {name}: {len(out.stdout)} bytes scanned")
    return notes


@functools.cache
def lab_secrets(repo: Path) -> LabSecrets:
    """The session's known secrets, made once (random values) in a 0700 folder."""
    folder = repo / ".cache" / "deploy-lab" / "secrets"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, mode=0o700)
    folder.chmod(0o700)

    def private(name: str, text: str) -> Path:
        path = folder / name
        path.touch(mode=0o600)
        path.write_text(text)
        return path

    api_key = Secret("the server's API key", "sk-lab-" + secrets.token_hex(16))
    hf_token = Secret("inference_engine_hf_token", "hf_lab" + secrets.token_hex(16))
    vault_password = Secret("the vault password", "vault-" + secrets.token_hex(16))
    key_file = private("api-key", api_key.value + "\n")
    password_file = private("vault-password", vault_password.value + "\n")
    vaulted = subprocess.run(
        [str(repo / ".venv/bin/ansible-vault"), "encrypt_string",
         "--vault-password-file", str(password_file), "--stdin-name", "inference_engine_hf_token"],
        input=hf_token.value, capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    vars_file = private(
        "vars.yml",
        f"inference_service_api_key_file: {key_file}\n{vaulted}",
    )
    return LabSecrets(folder, key_file, password_file, vars_file, api_key, hf_token, vault_password)
