"""The one GPU catalogue: its rows, the layers that read it, and no second table.

``module_utils/gpu_catalogue.py`` holds every GPU product fact (id, PCI id, name,
architecture, VRAM, memory bandwidth with its source, open-module requirement, the lab's
PCI identity). These tests prove each layer reads it (GPU facts, nvidia_driver role via
the facts, migration preflight, lab host tree, installer stand-in, roofline) and that
no file of code names two catalogue products: such a file would be a second table.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils import gpu, gpu_catalogue

from specops.migrate.preflight import select_cards
from specops_lab import hosttree, pci_identities
from specops_lab import nvidia_installer_standin as standin

REPO = Path(__file__).resolve().parents[2]
CATALOGUE_FILE = str(Path(gpu_catalogue.__file__).resolve().relative_to(REPO))
# Code and configuration that must read the catalogue instead of naming products.
CODE_ROOTS = (
    "src",
    "lab",
    "collections",
    "roles",
    "playbooks",
    "scripts",
    "templates",
    "deploy.yml",
)


def test_rows_are_complete_and_unique() -> None:
    rows = gpu_catalogue.CATALOGUE
    for column in ("id", "pci_id", "name"):
        values = [getattr(p, column) for p in rows]
        assert len(values) == len(set(values)), column
    for p in rows:
        assert re.fullmatch(r"[a-z0-9-]+", p.id), p.id
        assert re.fullmatch(r"10de:[0-9a-f]{4}", p.pci_id), p.id
        assert p.name.startswith("NVIDIA "), p.id
        assert p.architecture in {"ampere", "ada", "hopper", "blackwell"}, p.id
        assert p.vram_gib > 0, p.id
        assert p.bandwidth_gb_s > 0, p.id
        assert re.search(r"[GT]B/s", p.bandwidth_source), p.id
        assert gpu_catalogue.find(p.id) is p
        assert gpu_catalogue.find(p.pci_id.upper()) is p
        assert gpu_catalogue.find(p.name) is p
    assert gpu_catalogue.find("NVIDIA RTX A6000 ") is gpu_catalogue.by_id("rtx-a6000")
    assert gpu_catalogue.find("A6000") is None  # exact keys only, no substring rule


def test_gpu_facts_read_the_catalogue() -> None:
    for p in gpu_catalogue.CATALOGUE:
        known = gpu.gpu_name(p.pci_id)
        assert (known.name, known.architecture, known.open_module_required) == (
            p.name,
            p.architecture,
            p.open_module_required,
        )
    assert gpu.gpu_name("10de:abcd") == gpu.KnownGpu("NVIDIA GPU 10de:abcd", "unknown", False)


def test_open_module_requirement_reaches_the_facts(host_tree: Any) -> None:
    facts = gpu.gather_facts(gpu.HostRoots.under(host_tree("pro6000x4")))
    assert facts.gpus
    assert all(c.open_module_required for c in facts.gpus)
    facts = gpu.gather_facts(gpu.HostRoots.under(host_tree("a6000-3090")))
    assert facts.gpus
    assert not any(c.open_module_required for c in facts.gpus)


def test_lab_host_tree_reads_the_catalogue() -> None:
    """The host tree's cards: the catalogue's pci_id and name, the lab table's board."""
    assert set(hosttree.MODELS) == {p.id for p in gpu_catalogue.CATALOGUE}
    for p in gpu_catalogue.CATALOGUE:
        model = hosttree.MODELS[p.id]
        board = pci_identities.PCI_IDENTITIES[p.id]
        assert (model.pci_id, model.class_code, model.subsystem_id, model.audio_id) == (
            p.pci_id,
            board.pci_class,
            board.subsystem_id,
            board.audio_pci_id,
        )
        assert hosttree._model_name(p.pci_id) == p.name


def test_the_catalogue_carries_no_lab_column() -> None:
    """A board's simulated PCI identity is the lab's (specops_lab.pci_identities): a
    contributor adding a card to the catalogue fills in product facts only."""
    columns = {f.name for f in dataclasses.fields(gpu_catalogue.GpuProduct)}
    assert columns.isdisjoint({"pci_class", "subsystem_id", "audio_pci_id"}), columns


def test_the_lab_identity_table_is_keyed_by_catalogue_id() -> None:
    assert set(pci_identities.PCI_IDENTITIES) <= {p.id for p in gpu_catalogue.CATALOGUE}
    for key, board in pci_identities.PCI_IDENTITIES.items():
        assert board.pci_class in {"0x030000", "0x030200"}, key
        assert re.fullmatch(r"10de:[0-9a-f]{4}", board.subsystem_id), key
        # an audio function only on cards with display outputs (VGA class)
        assert (board.audio_pci_id is not None) == (board.pci_class == "0x030000"), key
    with pytest.raises(KeyError, match=r"'rtx-9999' is not in the GPU catalogue \(valid: rtx-a"):
        pci_identities.identity("rtx-9999")


def test_a_catalogue_card_without_a_lab_row_is_simulated_as_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(pci_identities.PCI_IDENTITIES, "h200-nvl")
    assert pci_identities.identity("h200-nvl") == pci_identities.DEFAULT


def test_migration_preflight_reads_vram_from_the_catalogue() -> None:
    cards = [
        {"address": f"0000:0{i}:00.0", "name": p.name, "pci_id": p.pci_id, "holders": []}
        for i, p in enumerate(gpu_catalogue.CATALOGUE[:2])
    ]
    facts = {"node": "pve-t", "gpus": cards}
    for p in gpu_catalogue.CATALOGUE[:2]:
        _, problems = select_cards(
            facts, p.pci_id, 1, running_vms=set(), minors_in_use=set(), min_vram_gib=p.vram_gib
        )
        assert problems == []
        _, problems = select_cards(
            facts, p.pci_id, 1, running_vms=set(), minors_in_use=set(), min_vram_gib=p.vram_gib + 1
        )
        wanted = p.vram_gib + 1
        assert problems == [f"'{p.name}' has {p.vram_gib} GiB per card, {wanted} GiB wanted"]


def test_installer_stand_in_reads_the_catalogue_also_in_its_copy(tmp_path: Path) -> None:
    wanted = tuple(sorted(p.pci_id[5:] for p in gpu_catalogue.CATALOGUE if p.open_module_required))
    assert wanted
    assert standin._open_only() == wanted
    run = standin.make_runfile("580.126.09", tmp_path)
    # -I: no PYTHONPATH, no cwd on sys.path: the copy cannot import the catalogue, as in
    # a container, and uses what make_runfile wrote into it.
    out = subprocess.run(
        [sys.executable, "-I", "-c",
         "import runpy, sys; ns = runpy.run_path(sys.argv[1], run_name='standin');"
         " print(ns['_open_only']())", str(run)],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    assert out.stdout.strip() == repr(wanted)


def _tracked(*roots: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--", *roots], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout.split()
    return [REPO / p for p in out if not p.endswith(".md") and (REPO / p).is_file()]


def _mentions(text: str) -> set[str]:
    low = text.lower()
    found = set()
    for p in gpu_catalogue.CATALOGUE:
        if p.pci_id in low or re.search(rf"['\"]{p.pci_id[5:]}['\"]", low) or p.name in text:
            found.add(p.id)
    return found


def test_no_second_table_of_gpu_products() -> None:
    tables = {}
    for path in _tracked(*CODE_ROOTS):
        rel = str(path.relative_to(REPO))
        if rel == CATALOGUE_FILE or path.suffix in {".json", ".png"}:
            continue
        found = _mentions(path.read_text(encoding="utf-8", errors="replace"))
        if len(found) >= 2:
            tables[rel] = sorted(found)
    assert tables == {}, "GPU products named outside module_utils/gpu_catalogue.py"


@pytest.mark.parametrize("arch", sorted({p.architecture for p in gpu_catalogue.CATALOGUE}))
def test_no_role_decides_on_an_architecture_literal(arch: str) -> None:
    pattern = re.compile(rf"['\"]{arch}['\"]", re.IGNORECASE)
    hits = [
        str(p.relative_to(REPO))
        for p in _tracked("roles", "playbooks")
        if pattern.search(p.read_text(encoding="utf-8", errors="replace"))
    ]
    assert hits == [], f"a role decides on '{arch}'; read a catalogue column through the facts"


def test_the_check_finds_a_second_table(tmp_path: Path) -> None:
    """The scan is not blind: a file with a two-row table of products is caught."""
    table = 'VRAM = {"NVIDIA RTX A6000": 48, "NVIDIA GeForce RTX 3090": 24}\n'
    assert _mentions(table) == {"rtx-a6000", "rtx-3090"}
    assert _mentions('OPEN = {"2bb1", "2bb4"}') == {"rtx-pro-6000", "rtx-pro-6000-maxq"}
    assert len(_mentions("example: 10de:2230")) == 1
