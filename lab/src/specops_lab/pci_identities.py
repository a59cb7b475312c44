"""The simulated PCI identity of each GPU of the catalogue: what the lab's host tree
(:mod:`specops_lab.hosttree`) writes into sysfs beside the catalogue's ``pci_id``.

Production code never needs these: the GPU facts read what the kernel shows, and the
catalogue (``module_utils/gpu_catalogue.py``) keeps only what the product decides on.
The lab keys its rows by the catalogue id; a card added to the catalogue without a row
here is simulated as :data:`DEFAULT` (a 3D controller, no audio function, a zero
subsystem device), so a contributor adding a card need not know its board's identity.

Columns: ``pci_class`` (0x030000 VGA, for cards with display outputs, or 0x030200 3D
controller), ``subsystem_id`` (``vendor:device`` of a typical board) and ``audio_pci_id``
(the HD audio function .1 of cards with display outputs, or None). Sources: public lspci
listings (GA102 audio 10de:1aef, GB202 audio 10de:22e8); the 3090's subsystem is a board
partner's in practice, 10de:147d (Founders Edition) stands in.
"""

from __future__ import annotations

from dataclasses import dataclass

from ansible_collections.specops.infra.plugins.module_utils import gpu_catalogue

__all__ = ["DEFAULT", "PCI_IDENTITIES", "PciIdentity", "identity"]


@dataclass(frozen=True)
class PciIdentity:
    pci_class: str
    subsystem_id: str
    audio_pci_id: str | None


DEFAULT = PciIdentity("0x030200", "10de:0000", None)

# Catalogue id -> the identity the lab simulates.
PCI_IDENTITIES: dict[str, PciIdentity] = {
    "rtx-a6000": PciIdentity("0x030000", "10de:1459", "10de:1aef"),
    "rtx-3090": PciIdentity("0x030000", "10de:147d", "10de:1aef"),
    "rtx-pro-6000": PciIdentity("0x030000", "10de:204b", "10de:22e8"),
    "rtx-pro-6000-maxq": PciIdentity("0x030000", "10de:204c", "10de:22e8"),
    "rtx-pro-6000-server": PciIdentity("0x030200", "10de:204e", None),
    "h100-sxm": PciIdentity("0x030200", "10de:16c0", None),
    "h100-pcie": PciIdentity("0x030200", "10de:1626", None),
    "h100-nvl": PciIdentity("0x030200", "10de:1839", None),
    "h200": PciIdentity("0x030200", "10de:18bf", None),
    "h200-nvl": PciIdentity("0x030200", "10de:1996", None),
}


def identity(product_id: str) -> PciIdentity:
    """The simulated identity of catalogue id ``product_id`` (:data:`DEFAULT` for a
    catalogue card without a row here); an id the catalogue lacks is refused."""
    if gpu_catalogue.by_id(product_id) is None:
        valid = ", ".join(p.id for p in gpu_catalogue.CATALOGUE)
        raise KeyError(f"GPU {product_id!r} is not in the GPU catalogue (valid: {valid})")
    return PCI_IDENTITIES.get(product_id, DEFAULT)
