from __future__ import annotations

import pytest
from ansible_collections.specops.infra.plugins.module_utils.addresses import (
    container_address,
    service_url,
    subnet_address,
)

from specops.errors import ValidationError
from specops_lab import network


def test_container_address_is_the_first_static_one_without_prefix() -> None:
    net = [
        {"name": "eth0", "bridge": "vmbr0", "ip": "dhcp"},
        {"name": "eth1", "bridge": "vmbr1", "ip": "10.20.1.129/24", "gw": "10.20.1.1"},
    ]
    assert container_address(net) == "10.20.1.129"
    assert container_address([{"name": "eth0", "ip6": "fd00::81/64"}]) == "fd00::81"


@pytest.mark.parametrize(
    ("net", "says"),
    [
        (None, "pve_container_net: no interface"),
        ([{"name": "eth0", "ip": "dhcp"}], "pve_container_net: no static address"),
        (
            [{"name": "eth0", "ip": "10.20.1.300/24"}],
            "pve_container_net[0].ip: '10.20.1.300/24' is not",
        ),
        ("eth0", "must be a list of interfaces"),
    ],
)
def test_container_address_refuses_what_gives_no_address(net: object, says: str) -> None:
    with pytest.raises(ValidationError) as err:
        container_address(net)  # type: ignore[arg-type]
    assert says in str(err.value)


def test_subnet_address_counts_from_the_network() -> None:
    assert subnet_address("10.216.0.0/24", 1) == "10.216.0.1"
    assert subnet_address("10.216.0.0/24", 33, prefix=True) == "10.216.0.33/24"
    for bad in (0, 255):
        with pytest.raises(ValidationError, match=r"index: must be 1\.\.254"):
            subnet_address("10.216.0.0/24", bad)
    with pytest.raises(ValidationError, match="subnet:"):
        subnet_address("10.216.0.1/24", 1)  # host bits set: not a network


def test_service_url_dials_the_listen_address_or_the_fallback_for_wildcards() -> None:
    ct = str(network.load().address(33))  # a lab container's address; nothing dials it
    assert service_url(ct, 8000) == f"http://{ct}:8000"
    assert service_url("fd00::81", "8000") == "http://[fd00::81]:8000"
    assert service_url("0.0.0.0", 8000, "ct129.example") == "http://ct129.example:8000"
    with pytest.raises(ValidationError, match=r"inference_service_host: 0\.0\.0\.0 is a wildcard"):
        service_url("0.0.0.0", 8000)
    with pytest.raises(ValidationError, match=r"inference_service_port: must be 1\.\.65535"):
        service_url("10.0.0.1", 0)
