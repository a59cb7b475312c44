"""The tensor-parallel campaign's logic (``specops_lab.tensor_parallel``, issue 53).

NCCL's transport lines in the forms NCCL 2.18-2.27 write them (recorded-style text:
no GPU run of the campaign exists yet), the multi-card conf from the lab's four-card
host facts, the planted missing-card fault, the model's size and the speed-up table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils import gpu

from specops_lab import hosttree
from specops_lab.tensor_parallel import (
    choose_cards,
    model_dims,
    multi_card_conf,
    nccl_view,
    remove_card_allow,
    tp_speedups,
)

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests/fixtures/gpu-serving/h200-2026-12-03"
BASE = "arch: amd64\nhostname: tp\nmemory: 8192\nostype: debian\n"

# What vLLM's two workers print with NCCL_DEBUG=INFO (prefixes as vLLM writes them).
P2P_LOG = """\
(VllmWorker TP0 pid=311) h100:311:311 [0] NCCL INFO NCCL version 2.27.3+cuda12.9
(VllmWorker TP0 pid=311) h100:311:311 [0] NCCL INFO comm 0x5581 rank 0 nranks 2 cudaDev 0 \
nvmlDev 0 busId 1b000 commId 0x9f - Init START
(VllmWorker TP1 pid=312) h100:312:312 [1] NCCL INFO comm 0x5582 rank 1 nranks 2 cudaDev 1 \
nvmlDev 1 busId 2c000 commId 0x9f - Init START
(VllmWorker TP0 pid=311) h100:311:311 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
(VllmWorker TP0 pid=311) h100:311:311 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
(VllmWorker TP1 pid=312) h100:312:312 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read
(VllmWorker TP1 pid=312) h100:312:312 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/CUMEM/read
(VllmWorker TP0 pid=311) h100:311:311 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1
(VllmWorker TP0 pid=311) h100:311:311 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
"""
SHM_NET_LOG = """\
ct:90:90 [0] NCCL INFO cudaDriverVersion 12080 NCCL version 2.21.5+cuda12.4
ct:90:90 [0] NCCL INFO Channel 00 : 0[1b000] -> 1[2c000] via SHM/direct/direct
ct:91:91 [1] NCCL INFO Channel 00/0 : 1[2c000] -> 0[1b000] [send] via NET/Socket/0
ct:91:91 [1] NCCL INFO Channel 01/0 : 1[2c000] -> 0[1b000] [receive] via NET/Socket/0
ct:90:90 [0] NCCL WARN Channel 02 : 0[1b000] -> 1[2c000] via SHM/direct/direct (a WARN)
"""


def test_p2p_between_two_ranks_in_the_container() -> None:
    view = nccl_view(P2P_LOG)
    assert view.version == "2.27.3+cuda12.9"
    assert view.transports == {"P2P": 4}  # the repeated line counts once
    assert view.verdict == "P2P"
    assert [(r.rank, r.cuda_dev, r.bus_id) for r in view.ranks] == [(0, 0, "1b000"),
                                                                   (1, 1, "2c000")]  # fmt: skip
    assert {c.detail for c in view.channels} == {"CUMEM/read"}
    assert view.as_dict()["pairs"] == ["0->1 P2P", "1->0 P2P"]


def test_shm_and_net_fallbacks_and_no_nccl() -> None:
    view = nccl_view(SHM_NET_LOG)
    assert view.version == "2.21.5+cuda12.4"
    assert view.transports == {"SHM": 1, "NET": 2}
    assert view.verdict == "SHM+NET"
    assert {(c.transport, c.detail) for c in view.channels} == {("SHM", "direct/direct"),
                                                               ("NET", "Socket/0")}  # fmt: skip
    empty = nccl_view("INFO 12-06 vLLM API server version 0.20.1\nno NCCL here\n")
    assert (empty.verdict, empty.ranks, empty.version) == ("none", (), None)


@pytest.fixture(scope="module")
def four_cards(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[int, str]]:
    root = tmp_path_factory.mktemp("host")
    spec = hosttree.load_spec(REPO / "tests/fixtures/hosts/lab-converged/pve-b.yml")
    tree = hosttree.build_tree(spec, root)
    facts = gpu.gather_facts(gpu.HostRoots.under(str(tree))).to_dict()
    names = gpu.parse_proc_devices(Path(tree, "proc/devices").read_text())
    return facts, {major: n for n, major in names.items()}


def test_two_cards_get_every_line_and_nccl_limits(
    four_cards: tuple[dict[str, Any], dict[int, str]],
) -> None:
    facts, chars = four_cards
    cards = choose_cards(facts, 2)
    assert cards == ["0000:01:00.0", "0000:21:00.0"]
    conf, devices = multi_card_conf(facts, cards, chars, base=BASE)
    assert [d["path"] for d in devices if d["kind"] == "card"] == ["/dev/nvidia0", "/dev/nvidia1"]
    for minor in (0, 1):
        assert f"devices.allow: c 195:{minor} rwm\n" in conf
        assert f"lxc.mount.entry: /dev/nvidia{minor} dev/nvidia{minor} none bind" in conf
    assert "/dev/nvidia2" not in conf
    assert "size=50% 0 0\n" in conf
    assert "lxc.prlimit.memlock: unlimited\n" in conf
    one, _ = multi_card_conf(facts, cards[:1], chars, base=BASE)
    assert "dev/shm" not in one  # one card: no NCCL lines (the role's auto)
    assert "memlock" not in one
    with pytest.raises(ValueError, match="5 card"):
        choose_cards(facts, 5)


def test_the_planted_fault_removes_only_the_second_cards_allow(
    four_cards: tuple[dict[str, Any], dict[int, str]],
) -> None:
    facts, chars = four_cards
    conf, _ = multi_card_conf(facts, choose_cards(facts, 2), chars, base=BASE)
    faulty, removed = remove_card_allow(conf, 1)
    assert len(removed) == 1
    assert removed[0].endswith("c 195:1 rwm")
    assert "c 195:1 " not in faulty
    assert "c 195:0 rwm" in faulty
    assert "lxc.mount.entry: /dev/nvidia1 dev/nvidia1" in faulty  # the node stays
    with pytest.raises(ValueError, match="nvidia1"):
        remove_card_allow(faulty, 1)


def test_model_dims_reach_the_size_asked() -> None:
    h100 = 80 * 10**9
    big = model_dims(h100 * 1.15, vocab=151936)
    assert big["params"] * 2 >= h100 * 1.15
    one = model_dims(0, vocab=151936)
    assert one["num_hidden_layers"] == 1
    per_layer = model_dims(one["params"] * 2 + 2, vocab=151936)["params"] - one["params"]
    assert (big["params"] - per_layer) * 2 < h100 * 1.15  # the smallest that reaches it
    assert big["num_attention_heads"] * 128 == big["hidden_size"]


def test_speedups_per_cell_both_runs_measured(tmp_path: Path) -> None:
    plain = H200 / "bench-plain.results.json"  # a real H200 run stands for TP 1
    data = json.loads(plain.read_text())
    for cell in data["cells"]:  # a TP 2 run: 1.5x where it measured; one cell lost
        cell["stats"]["output_tok_s"] *= 1.5
    data["cells"] = [c for c in data["cells"] if c["concurrency"] != 64]
    tp2 = tmp_path / "tp2.json"
    tp2.write_text(json.dumps(data))
    rows = tp_speedups(plain, tp2)
    # failed cells (8K context at C >= 4 on that run) and the lost cell are left out
    assert [(r.concurrency, r.context_tokens) for r in rows] == [(1, 512), (1, 8192),
                                                                (4, 512), (16, 512)]  # fmt: skip
    assert all(r.speedup == 1.5 for r in rows)
    assert rows[0].tp1_tok_s == pytest.approx(412.418, abs=1e-3)
