"""Kernel stand-in for a simulated host tree's PCI driver binding (a hardware stand-in).

This machine has no vfio-pci over real PCI devices, so the ``vfio_release`` module is
tested against a simulated sysfs (``specops_lab.hosttree``). In real sysfs a ``write(2)``
of a PCI address to ``bus/pci/drivers/<drv>/unbind``, ``.../bind`` or
``bus/pci/drivers_probe`` makes the kernel act before the write returns. Plain files do
nothing, so this process plays the kernel's part: it polls those files, and for each
address written it applies the kernel's rules to the tree, then empties the file.

- ``unbind``: if the device is bound to that driver, drop the ``driver`` link and the
  driver's link to the device; otherwise nothing (the kernel returns ENODEV).
- ``bind``: if the device is unbound and its ``driver_override`` is unset or names this
  driver, bind it (the kernel matches ``driver_override`` first).
- ``drivers_probe``: if the device is unbound, bind it to its ``driver_override`` driver
  when that driver is registered (a directory under ``bus/pci/drivers``), to nothing when
  the override names an absent driver, else by ID: an NVIDIA display function to
  ``nvidia``, an HD audio function to ``snd_hda_intel``, when registered. vfio-pci binds
  only by override here (its ``ids=`` come from modprobe options, not the tree).
- Binding a GPU to ``nvidia`` writes ``proc/driver/nvidia/gpus/<addr>/information`` with
  the lowest free device minor, as the driver does; unbinding removes it.

Faults for tests: addresses listed (one per line) in ``<root>/.standin/fail-probe``
refuse to bind to ``nvidia`` (as when the driver's probe fails and leaves the device
unbound), so the release's restore path can be exercised.

Stdlib only, so it runs inside the molecule container:
``python3 pci_standin.py --root /var/lib/specops/lab/pve-a``. One process serves several
trees with ``--root`` repeated (a lab fleet: one poller, not one per node).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

__all__ = ["PciStandin", "main", "register_driver"]

_AUDIO = 0x0403
_DISPLAY = (0x0300, 0x0302)


def register_driver(root: str | os.PathLike[str], driver: str) -> None:
    """What loading a PCI driver's module does to sysfs: ``bus/pci/drivers/<driver>/``
    with its control files, and ``module/<module>``. Idempotent."""
    sys_dir = Path(root) / "sys"
    module = sys_dir / "module" / driver.replace("-", "_")
    module.mkdir(parents=True, exist_ok=True)
    drv = sys_dir / "bus" / "pci" / "drivers" / driver
    drv.mkdir(parents=True, exist_ok=True)
    for name in ("bind", "unbind", "new_id", "remove_id", "uevent"):
        (drv / name).touch()
    if not (drv / "module").is_symlink():
        (drv / "module").symlink_to(os.path.relpath(module, drv))


class PciStandin:
    """Applies pending writes under ``root/sys`` to the tree (one :meth:`step` per poll)."""

    def __init__(
        self, root: str | os.PathLike[str], log_file: str | os.PathLike[str] | None = None
    ) -> None:
        self.root = Path(root)
        self.sys = self.root / "sys"
        self.pci = self.sys / "bus" / "pci"
        self.log: list[str] = []
        self.log_file = Path(log_file) if log_file else None

    def _record(self, line: str) -> None:
        self.log.append(line)
        if self.log_file is not None:
            with self.log_file.open("a", encoding="utf-8") as fh:
                fh.write(f"{time.time():.3f} {line}\n")

    # helpers ------------------------------------------------------------
    def _dev(self, address: str) -> Path:
        return self.pci / "devices" / address

    def _driver_of(self, address: str) -> str | None:
        try:
            return os.path.basename(os.readlink(self._dev(address) / "driver"))
        except OSError:
            return None

    def _override(self, address: str) -> str | None:
        try:
            text = (self._dev(address) / "driver_override").read_text().strip()
        except OSError:
            return None
        return None if text in ("", "(null)") else text

    def _class(self, address: str) -> int:
        try:
            return int((self._dev(address) / "class").read_text().strip(), 16) >> 8
        except (OSError, ValueError):
            return 0

    def _vendor(self, address: str) -> str:
        try:
            return (self._dev(address) / "vendor").read_text().strip().lower()
        except OSError:
            return ""

    def _take(self, path: Path) -> list[str]:
        """Read and empty a control file: what was written to it, one address a line."""
        try:
            with path.open("r+", encoding="utf-8") as fh:
                text = fh.read()
                if not text.strip():
                    return []
                fh.seek(0)
                fh.truncate()
        except OSError:
            return []
        return [line.strip() for line in text.replace("\0", "\n").splitlines() if line.strip()]

    def _fails(self, address: str) -> bool:
        try:
            text = (self.root / ".standin" / "fail-probe").read_text()
        except OSError:
            return False
        return address in text.split()

    def _device_dir(self, address: str) -> Path:
        return self._dev(address).resolve()

    # kernel rules ------------------------------------------------------
    def _attach(self, address: str, driver: str) -> bool:
        drv_dir = self.pci / "drivers" / driver
        if not drv_dir.is_dir():
            return False
        if driver == "nvidia" and self._fails(address):
            self._record(f"probe {address} nvidia: fails (fault injected)")
            return False
        ddir = self._device_dir(address)
        (ddir / "driver").symlink_to(os.path.relpath(drv_dir, ddir))
        link = drv_dir / address
        if not link.is_symlink():
            link.symlink_to(os.path.relpath(ddir, drv_dir))
        if driver == "nvidia" and self._class(address) in _DISPLAY:
            self._nvidia_information(address)
        self._record(f"bind {address} {driver}")
        return True

    def _detach(self, address: str, driver: str) -> None:
        ddir = self._device_dir(address)
        (ddir / "driver").unlink()
        link = self.pci / "drivers" / driver / address
        if link.is_symlink():
            link.unlink()
        if driver == "nvidia":
            info = self.root / "proc" / "driver" / "nvidia" / "gpus" / address
            if info.is_dir():
                for child in info.iterdir():
                    child.unlink()
                info.rmdir()
        self._record(f"unbind {address} {driver}")

    def _nvidia_information(self, address: str) -> None:
        gpus = self.root / "proc" / "driver" / "nvidia" / "gpus"
        taken: set[int] = set()
        if gpus.is_dir():
            for info in gpus.glob("*/information"):
                for line in info.read_text().splitlines():
                    if line.startswith("Device Minor:"):
                        taken.add(int(line.split(":", 1)[1]))
        minor = next(m for m in range(254) if m not in taken)
        target = gpus / address
        target.mkdir(parents=True, exist_ok=True)
        (target / "information").write_text(
            f"Model: \t\t NVIDIA Graphics Device\nBus Location: \t {address}\n"
            f"Device Minor: \t {minor}\n",
            encoding="utf-8",
        )

    def _probe_target(self, address: str) -> str | None:
        override = self._override(address)
        if override is not None:
            return override
        kind = self._class(address)
        if self._vendor(address) == "0x10de" and kind in _DISPLAY:
            return "nvidia"
        if kind == _AUDIO:
            return "snd_hda_intel"
        return None

    def step(self) -> int:
        """Apply every pending write once; returns how many were applied."""
        applied = 0
        drivers = self.pci / "drivers"
        if drivers.is_dir():
            for drv_dir in sorted(drivers.iterdir()):
                for address in self._take(drv_dir / "unbind"):
                    applied += 1
                    if self._driver_of(address) == drv_dir.name:
                        self._detach(address, drv_dir.name)
                for address in self._take(drv_dir / "bind"):
                    applied += 1
                    override = self._override(address)
                    if self._driver_of(address) is None and override in (None, drv_dir.name):
                        self._attach(address, drv_dir.name)
        for address in self._take(self.pci / "drivers_probe"):
            applied += 1
            if self._dev(address).exists() and self._driver_of(address) is None:
                target = self._probe_target(address)
                if target is not None:
                    self._attach(address, target)
        return applied

    def run(self, interval: float = 0.02) -> None:
        while True:
            self.step()
            time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root",
        action="append",
        required=True,
        help="host tree root (holds sys/); repeat it to serve several trees in one process",
    )
    parser.add_argument("--interval", type=float, default=0.02, help="poll interval (s)")
    parser.add_argument(
        "--driver",
        action="append",
        default=[],
        help="register this PCI driver first, as loading its module would (repeatable)",
    )
    parser.add_argument(
        "--log",
        action="append",
        default=[],
        help="append each applied change to this file (one per --root, in their order)",
    )
    args = parser.parse_args(argv)
    if args.log and len(args.log) != len(args.root):
        parser.error(f"--log: give one per --root ({len(args.root)}), or none")
    logs = args.log or [None] * len(args.root)
    standins = [PciStandin(root, log) for root, log in zip(args.root, logs, strict=True)]
    for standin in standins:
        if not (standin.pci / "devices").is_dir():
            print(f"pci_standin: {standin.pci}/devices does not exist (build the host tree first)")
            return 2
    for root in args.root:
        for driver in args.driver:
            register_driver(root, driver)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        for standin in standins:
            standin.step()
        time.sleep(args.interval)
    return 0  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
