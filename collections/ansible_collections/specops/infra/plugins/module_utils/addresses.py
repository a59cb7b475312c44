"""Where a serving container is reached: its own address, and URLs built from it.

A serving container's address is the static one its inventory gives PVE
(``pve_container_net``: ``ip: 10.20.1.129/24``). The server listens there and every
controller-side caller (benchmark, rollout smoke gate, sweep, migration gate) dials it,
so nothing relies on sharing a network namespace with the container.

- :func:`container_address`: the first static address of ``pve_container_net``;
- :func:`subnet_address`: the n-th address of a subnet (the lab derives every address
  from its one subnet this way);
- :func:`service_url`: ``http://HOST:PORT`` for a listen address (IPv6 in brackets; a
  wildcard listen address is not dialable, so the given fallback host is used).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.errors import ValidationError

__all__ = ["WILDCARDS", "container_address", "service_url", "subnet_address"]

WILDCARDS = ("", "0.0.0.0", "::", "[::]")  # noqa: S104  (names of wildcard binds)


def container_address(
    net: Sequence[Mapping[str, Any]] | None, *, field: str = "pve_container_net"
) -> str:
    """The first static address (``ip``, else ``ip6``) of a container's interfaces,
    without its prefix length. Raises when there is none (``dhcp``/``auto``/``manual``
    give no address the inventory knows)."""
    if not net:
        raise ValidationError(
            field, "no interface: give the container one with a static ip (ip: 10.20.1.129/24)"
        )
    if isinstance(net, (str, bytes)) or not isinstance(net, Sequence):
        raise ValidationError(field, f"must be a list of interfaces (got {net!r})")
    for i, iface in enumerate(net):
        if not isinstance(iface, Mapping):
            raise ValidationError(f"{field}[{i}]", f"must be a mapping (got {iface!r})")
        for key in ("ip", "ip6"):
            value = str(iface.get(key) or "")
            if not value or value in ("dhcp", "auto", "manual"):
                continue
            try:
                return str(ipaddress.ip_interface(value).ip)
            except ValueError:
                raise ValidationError(
                    f"{field}[{i}].{key}", f"{value!r} is not an address/prefix like 10.20.1.129/24"
                ) from None
    raise ValidationError(
        field,
        "no static address (every interface is dhcp/auto/manual): the controller's callers "
        "need the container's address; give one interface ip: <address>/<prefix>",
    )


def subnet_address(subnet: str, index: int, *, prefix: bool = False) -> str:
    """The ``index``-th address of ``subnet`` (1 = the first host); with ``prefix`` as
    ``address/prefixlen``. Refuses the network and broadcast addresses."""
    try:
        network = ipaddress.ip_network(str(subnet), strict=True)
    except ValueError as exc:
        raise ValidationError(
            "subnet", f"{subnet!r} is not a network like 10.216.0.0/24 ({exc})"
        ) from None
    if isinstance(index, bool) or not isinstance(index, int):
        raise ValidationError("index", f"must be an integer (got {index!r})")
    last = network.num_addresses - (2 if network.version == 4 and network.prefixlen < 31 else 1)
    if not 1 <= index <= last:
        raise ValidationError("index", f"must be 1..{last} for {network} (got {index})")
    address = network.network_address + index
    return f"{address}/{network.prefixlen}" if prefix else str(address)


def service_url(host: str, port: int | str, fallback: str | None = None) -> str:
    """``http://HOST:PORT`` for a server listening on ``host``. A wildcard listen address
    (``0.0.0.0``, ``::``) is not an address to dial: ``fallback`` (the host's inventory
    address) is used then, and a missing fallback is an error."""
    text = str(host or "").strip()
    if text in WILDCARDS:
        if not fallback:
            raise ValidationError(
                "inference_service_host",
                f"{text or 'empty'} is a wildcard listen address; give the address callers dial",
            )
        text = str(fallback).strip()
    try:
        port_number = int(port)
    except (TypeError, ValueError):
        raise ValidationError(
            "inference_service_port", f"must be a port number (got {port!r})"
        ) from None
    if not 1 <= port_number <= 65535:
        raise ValidationError("inference_service_port", f"must be 1..65535 (got {port_number})")
    bare = text.strip("[]")
    try:
        if ipaddress.ip_address(bare).version == 6:
            text = f"[{bare}]"
    except ValueError:
        pass  # a host name
    return f"http://{text}:{port_number}"
