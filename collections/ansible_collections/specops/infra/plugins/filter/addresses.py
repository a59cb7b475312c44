"""Filters for where a serving container is reached (logic in ``module_utils/addresses.py``).

{{ pve_container_net | specops.infra.container_address }}        -> 10.20.1.129
{{ '10.216.0.0/24' | specops.infra.subnet_address(33, prefix=true) }} -> 10.216.0.33/24
{{ inference_service_host | specops.infra.service_url(8000, ansible_host) }}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.addresses import (
    container_address as _container_address,
)
from ansible_collections.specops.infra.plugins.module_utils.addresses import (
    service_url as _service_url,
)
from ansible_collections.specops.infra.plugins.module_utils.addresses import (
    subnet_address as _subnet_address,
)
from ansible_collections.specops.infra.plugins.module_utils.errors import SpecopsError

__all__ = ["FilterModule"]


def _plain(call: Callable[[], str]) -> str:
    try:
        return call()
    except SpecopsError as exc:
        raise ValueError(str(exc)) from None


def container_address(net: Any) -> str:
    return _plain(lambda: _container_address(list(net) if net is not None else None))


def subnet_address(subnet: str, index: int, prefix: bool = False) -> str:
    return _plain(lambda: _subnet_address(str(subnet), int(index), prefix=bool(prefix)))


def service_url(host: str, port: Any, fallback: str | None = None) -> str:
    return _plain(lambda: _service_url(str(host), port, fallback))


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "container_address": container_address,
            "subnet_address": subnet_address,
            "service_url": service_url,
        }
