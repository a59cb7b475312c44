"""The GPU product catalogue: the one table of GPU product facts in specops.

Every layer reads it: the GPU facts (``gpu.py``: name and architecture of a PCI id, and
whether only NVIDIA's open kernel modules drive it), the nvidia_driver role (through
those facts), the migration preflight (VRAM per card), the benchmark's roofline
(memory bandwidth per card), and the lab's stand-ins (the simulated host tree, the
installer stand-in's open-module refusal). A new card is one row here;
``tests/gpu/test_gpu_catalogue.py`` proves no second table exists. What only the lab
simulates (a board's PCI class, subsystem and HD audio function) is the lab's own table,
keyed by this id (in the lab, lab/), not a column here.

Columns:

- ``id``: short key (``rtx-pro-6000``), used by the lab's host descriptions;
- ``pci_id``: PCI ``vendor:device`` (lower-case hex) of the card's display function;
- ``name``: the product name as NVIDIA's driver reports it (``/proc/driver/nvidia/gpus/
  */information``, ``nvidia-smi``), which is also the name the GPU facts give;
- ``architecture``: the GPU generation (``ampere``, ``hopper``, ``blackwell``, ...);
- ``vram_gib``: memory per card as NVIDIA's data sheet states it (the driver reports a
  little less, e.g. 143771 MiB on an H200);
- ``bandwidth_gb_s``: peak memory bandwidth per card in GB/s (10^9 bytes/s), with
  ``bandwidth_source`` naming where the number comes from;
- ``open_module_required``: only the open kernel modules drive it (Blackwell).

PCI ids: NVIDIA's open-gpu-kernel-modules README, "supported GPUs" table (tag 595.45.04).

Stdlib only: this file runs on managed hosts, down to Python 3.7 (PVE 6).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "CATALOGUE",
    "GpuProduct",
    "by_id",
    "by_name",
    "by_pci_id",
    "find",
    "open_module_device_ids",
]


@dataclass(frozen=True)
class GpuProduct:
    id: str
    pci_id: str
    name: str
    architecture: str
    vram_gib: int
    bandwidth_gb_s: float
    bandwidth_source: str
    open_module_required: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_A6000 = "NVIDIA RTX A6000 data sheet: 48 GB GDDR6, 768 GB/s"
_3090 = "NVIDIA GeForce RTX 3090 specifications: 24 GB GDDR6X, 384-bit, 936 GB/s"
_PRO6000_WS = (
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition data sheet: 96 GB GDDR7, 512-bit, 1792 GB/s"
)
_PRO6000_MAXQ = (
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition data sheet: 96 GB GDDR7, 1792 GB/s"
)
_PRO6000_SERVER = (
    "NVIDIA RTX PRO 6000 Blackwell Server Edition data sheet: 96 GB GDDR7, 1597 GB/s (1.6 TB/s)"
)
_H100_SXM = "NVIDIA H100 data sheet, SXM: 80 GB HBM3, 3.35 TB/s"
_H100_PCIE = "NVIDIA H100 data sheet, PCIe: 80 GB HBM2e, 2 TB/s"
_H100_NVL = "NVIDIA H100 NVL data sheet: 94 GB HBM3, 3.9 TB/s"
_H200 = "NVIDIA H200 data sheet, SXM: 141 GB HBM3e, 4.8 TB/s"
_H200_NVL = "NVIDIA H200 data sheet, NVL: 141 GB HBM3e, 4.8 TB/s"

# One row per product. Keep the columns in the order of GpuProduct.
CATALOGUE: tuple[GpuProduct, ...] = (
    GpuProduct("rtx-a6000", "10de:2230", "NVIDIA RTX A6000", "ampere", 48, 768.0, _A6000, False),
    GpuProduct("rtx-3090", "10de:2204", "NVIDIA GeForce RTX 3090", "ampere", 24, 936.0, _3090,
               False),
    GpuProduct("rtx-pro-6000", "10de:2bb1", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
               "blackwell", 96, 1792.0, _PRO6000_WS, True),
    GpuProduct("rtx-pro-6000-maxq", "10de:2bb4",
               "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "blackwell", 96, 1792.0,
               _PRO6000_MAXQ, True),
    GpuProduct("rtx-pro-6000-server", "10de:2bb5",
               "NVIDIA RTX PRO 6000 Blackwell Server Edition", "blackwell", 96, 1597.0,
               _PRO6000_SERVER, True),
    GpuProduct("h100-sxm", "10de:2330", "NVIDIA H100 80GB HBM3", "hopper", 80, 3350.0, _H100_SXM,
               False),
    GpuProduct("h100-pcie", "10de:2331", "NVIDIA H100 PCIe", "hopper", 80, 2000.0, _H100_PCIE,
               False),
    GpuProduct("h100-nvl", "10de:2321", "NVIDIA H100 NVL", "hopper", 94, 3900.0, _H100_NVL, False),
    GpuProduct("h200", "10de:2335", "NVIDIA H200", "hopper", 141, 4800.0, _H200, False),
    GpuProduct("h200-nvl", "10de:233b", "NVIDIA H200 NVL", "hopper", 141, 4800.0, _H200_NVL, False),
)  # fmt: skip

_BY_ID = {p.id: p for p in CATALOGUE}
_BY_PCI_ID = {p.pci_id: p for p in CATALOGUE}
_BY_NAME = {p.name: p for p in CATALOGUE}


def by_id(key: str) -> GpuProduct | None:
    """The product with catalogue id ``key`` (``rtx-a6000``), or None."""
    return _BY_ID.get(key)


def by_pci_id(pci_id: str) -> GpuProduct | None:
    """The product behind PCI ``vendor:device`` (any case), or None."""
    return _BY_PCI_ID.get(str(pci_id).lower())


def by_name(name: str) -> GpuProduct | None:
    """The product the driver (and so the GPU facts) names exactly ``name``, or None."""
    return _BY_NAME.get(name)


def find(key: str) -> GpuProduct | None:
    """A product by any of its keys: catalogue id, PCI ``vendor:device`` or exact name."""
    text = str(key).strip()
    return by_id(text) or by_pci_id(text) or by_name(text)


def open_module_device_ids() -> tuple[str, ...]:
    """PCI device ids (4 hex digits, no vendor) that only the open kernel modules drive."""
    return tuple(sorted(p.pci_id.split(":")[1] for p in CATALOGUE if p.open_module_required))
