"""The tensor-parallel device campaign's logic (``scripts/serve-gpu-device.py --campaign tp``).

Issue 53: one engine across the cards of one specops-made LXC container. What the
campaign needs beyond the serving campaign, kept here so it is typed and tested:

- :func:`choose_cards`: the first N cards on the nvidia driver (PCI order), from the
  project's GPU facts;
- :func:`multi_card_conf`: a PVE conf with the passthrough lines for those cards, as
  ``lxc_gpu_passthrough`` writes them (``lxc_gpu.plan_devices`` / ``merge``), and, with
  2+ cards, NCCL's ``/dev/shm`` tmpfs and ``lxc.prlimit.memlock`` (``merge_ipc``);
- :func:`remove_card_allow`: the planted fault, one card's device-cgroup allow line
  removed (its node entry stays: the container has the node, the cgroup denies it);
- :func:`nccl_view`: NCCL's own account of the communicator, from the engine's log with
  ``NCCL_DEBUG=INFO``: the ranks (``cudaDev``: the container's ordinal, ``busId``) and,
  per channel, the transport between two ranks (``P2P``, ``SHM``, ``NET``, ``NVLS``);
- :func:`model_dims`: a random-weight Qwen2 whose bf16 weights come to a wanted size
  (larger than one card's memory for the TP-only model);
- :func:`tp_speedups`: TP N against TP 1 per concurrency, from two ``specops bench``
  results files.

Stdlib and the collection's module_utils only.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils import lxc_gpu
from ansible_collections.specops.infra.plugins.module_utils.pve import conf as pve_conf

__all__ = [
    "NcclChannel",
    "NcclRank",
    "NcclView",
    "SpeedupRow",
    "choose_cards",
    "model_dims",
    "multi_card_conf",
    "nccl_view",
    "remove_card_allow",
    "tp_speedups",
]


def choose_cards(facts: Mapping[str, Any], count: int) -> list[str]:
    """The first ``count`` cards bound to nvidia with a Device Minor, in PCI order."""
    cards = sorted(
        str(g["address"])
        for g in facts.get("gpus", [])
        if g.get("driver") == "nvidia" and (g.get("nvidia") or {}).get("minor") is not None
    )
    if len(cards) < count:
        raise ValueError(f"{count} card(s) wanted, the host has {len(cards)} on nvidia: {cards}")
    return cards[:count]


def multi_card_conf(
    facts: Mapping[str, Any],
    cards: Sequence[str],
    char_devices: Mapping[int, str],
    *,
    base: str,
    shm_size: str = "50%",
    memlock: str = "unlimited",
) -> tuple[str, list[dict[str, Any]]]:
    """``base`` with the GPU lines for ``cards`` (raw lines, as the device's LXC takes
    them) and, for 2+ cards, NCCL's shm and memlock lines: the role's defaults."""
    conf = pve_conf.parse(base)
    devices = lxc_gpu.plan_devices(facts, list(cards))
    result = lxc_gpu.merge(
        conf,
        devices,
        method="raw",
        cgroup_key=lxc_gpu.choose_cgroup_key(facts, "auto"),
        gpu_majors={int(v) for v in (facts.get("char_majors") or {}).values()},
        foreign_majors={m: n for m, n in char_devices.items() if not n.startswith("nvidia")},
    )
    if lxc_gpu.ipc_wanted("auto", len(cards)):
        lxc_gpu.merge_ipc(conf, lxc_gpu.ipc_lines(shm_size, memlock), result)
    return result.after, [d.as_dict() for d in devices]


def remove_card_allow(conf_text: str, minor: int) -> tuple[str, list[str]]:
    """The conf without the device-cgroup allow line of ``/dev/nvidia<minor>`` (major
    195); its mount entry stays. Raises when the conf has no such line."""
    out: list[str] = []
    removed: list[str] = []
    pattern = re.compile(rf"^c\s+{lxc_gpu.NVIDIA_MAJOR}:{minor}(\s+[rwm]+)?\s*$")
    for line in conf_text.splitlines(keepends=True):
        key, sep, value = line.partition(":")
        if sep and key.strip() in lxc_gpu.CGROUP_KEYS.values() and pattern.match(value.strip()):
            removed.append(line.strip())
            continue
        out.append(line)
    if not removed:
        raise ValueError(f"no allow line for /dev/nvidia{minor} in the conf")
    return "".join(out), removed


# ------------------------------------------------------------------------------ NCCL

# "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read" (2.19+ writes the channel
# with its sub-index; older "Channel 00 : ..."; "[send]"/"[receive]" before NET's "via").
_CHANNEL = re.compile(
    r"NCCL INFO Channel (?P<ch>\d+)(?:/\d+)?\s*:\s*(?P<src>\d+)\[[0-9a-fx]+\]\s*->\s*"
    r"(?P<dst>\d+)\[[0-9a-fx]+\](?:\s*\[(?:send|receive)\])?\s+via\s+(?P<via>\S+(?: \S+)*)"
)
# "comm 0x55 rank 0 nranks 2 cudaDev 0 nvmlDev 2 busId 1b000 commId 0x.. - Init COMPLETE"
_RANK = re.compile(
    r"rank (?P<rank>\d+) nranks (?P<n>\d+) cudaDev (?P<cuda>\d+)"
    r"(?: nvmlDev (?P<nvml>\d+))? busId (?P<bus>[0-9a-fA-F]+)"
)
_VERSION = re.compile(r"NCCL INFO (?:cudaDriverVersion \d+\s*)?NCCL version (?P<v>\S+)")
TRANSPORTS = ("P2P", "SHM", "NET", "NVLS", "COLLNET")


@dataclass(frozen=True)
class NcclChannel:
    channel: int
    src: int
    dst: int
    transport: str  # P2P, SHM, NET, NVLS, COLLNET (or what NCCL wrote before the first /)
    detail: str  # the rest: "CUMEM/read", "direct/direct", "Socket/0"


@dataclass(frozen=True)
class NcclRank:
    rank: int
    nranks: int
    cuda_dev: int  # the ordinal the rank's process sees (inside the container: 0..N-1)
    nvml_dev: int | None
    bus_id: str


@dataclass(frozen=True)
class NcclView:
    version: str | None
    ranks: tuple[NcclRank, ...]
    channels: tuple[NcclChannel, ...]

    @property
    def transports(self) -> dict[str, int]:
        """Channel connections per transport (``{"P2P": 48}``)."""
        return dict(Counter(c.transport for c in self.channels))

    @property
    def verdict(self) -> str:
        """One word for the report: the transports seen, or ``none`` (no NCCL lines)."""
        kinds = [t for t in (*TRANSPORTS, *sorted(self.transports)) if t in self.transports]
        return "+".join(dict.fromkeys(kinds)) or "none"

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "verdict": self.verdict,
            "transports": self.transports,
            "ranks": [asdict(r) for r in self.ranks],
            "channels": len(self.channels),
            "pairs": sorted({f"{c.src}->{c.dst} {c.transport}" for c in self.channels}),
        }


def nccl_view(text: str) -> NcclView:
    """NCCL's communicator as its ``NCCL_DEBUG=INFO`` lines describe it (any prefix the
    engine puts before them; a rank's lines repeated by several communicators count once)."""
    version: str | None = None
    ranks: dict[tuple[int, str], NcclRank] = {}
    channels: dict[tuple[int, int, int, str], NcclChannel] = {}
    for line in text.splitlines():
        if "NCCL INFO" not in line:
            continue
        if version is None and (v := _VERSION.search(line)):
            version = v.group("v")
        if r := _RANK.search(line):
            nvml = r.group("nvml")
            rank = NcclRank(
                int(r.group("rank")), int(r.group("n")), int(r.group("cuda")),
                int(nvml) if nvml is not None else None, r.group("bus").lower(),
            )  # fmt: skip
            ranks[(rank.rank, rank.bus_id)] = rank
        if c := _CHANNEL.search(line):
            via = c.group("via").strip()
            transport, _, detail = via.partition("/")
            key = (int(c.group("ch")), int(c.group("src")), int(c.group("dst")), via)
            channels[key] = NcclChannel(key[0], key[1], key[2], transport.upper(), detail)
    return NcclView(
        version,
        tuple(sorted(ranks.values(), key=lambda r: (r.rank, r.bus_id))),
        tuple(channels.values()),
    )


# ------------------------------------------------------------------------------ model


def model_dims(weight_bytes: float, *, vocab: int, hidden: int = 8192) -> dict[str, int]:
    """A Qwen2 shape (hidden ``hidden``, MLP 3.5x, GQA 8 KV heads of 128, tied nothing)
    whose bf16 weights come to at least ``weight_bytes``: the layer count is the
    smallest that reaches it."""
    heads, kv_heads, head_dim = hidden // 128, 8, 128
    inter = int(hidden * 3.5) // 256 * 256
    per_layer = (
        hidden * heads * head_dim  # q
        + 2 * hidden * kv_heads * head_dim  # k, v
        + heads * head_dim * hidden  # o
        + (heads + 2 * kv_heads) * head_dim  # q, k, v biases (Qwen2)
        + 3 * hidden * inter  # gate, up, down
        + 2 * hidden  # the two norms
    )
    fixed = 2 * vocab * hidden + hidden  # embeddings, lm_head, final norm
    params = weight_bytes / 2
    layers = max(1, -int(-(params - fixed) // per_layer))
    return {
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "params": fixed + layers * per_layer,
    }


# ------------------------------------------------------------------------------ speed-up


@dataclass(frozen=True)
class SpeedupRow:
    concurrency: int
    context_tokens: int
    tp1_tok_s: float
    tpn_tok_s: float
    speedup: float  # tpn / tp1 output tokens per second


def _cells(path: Path) -> dict[tuple[int, int], float]:
    data = json.loads(path.read_text())
    out: dict[tuple[int, int], float] = {}
    for cell in data.get("cells", []):
        stats = cell.get("stats") or {}
        if cell.get("status", "ok") == "ok" and stats.get("output_tok_s"):
            out[(int(cell["concurrency"]), int(cell["context_tokens"]))] = float(
                stats["output_tok_s"]
            )
    return out


def tp_speedups(tp1: Path, tpn: Path) -> list[SpeedupRow]:
    """Per (concurrency, context) cell both runs measured: TP N's output tok/s over TP 1's."""
    one, many = _cells(tp1), _cells(tpn)
    return [
        SpeedupRow(c, ctx, one[(c, ctx)], many[(c, ctx)], round(many[(c, ctx)] / one[(c, ctx)], 3))
        for c, ctx in sorted(set(one) & set(many))
    ]
