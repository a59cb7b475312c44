"""``CUDA_VISIBLE_DEVICES`` against the cards a container gets (issue 53).

Inside the container CUDA numbers the cards it can open 0..N-1 whatever their host
minors, and stops at the first index it lacks; the check says so by name.
"""

from __future__ import annotations

import pytest
from ansible_collections.specops.infra.plugins.module_utils.serving_check import (
    visible_devices_problems,
)

VAR = "lxc_gpu_passthrough_gpu_count"


@pytest.mark.parametrize(
    ("visible", "cards"),
    [("0", 1), ("0,1", 2), ("1,0", 2), ("0,1,2,3", 4), ("3,2,1,0", 4),
     ("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", 1), ("GPU-8932f937,GPU-5a1c", 2),
     ("MIG-GPU-8932f937-d72c-4106-c12f-20bd9faed9f6/1/0", 1), (" 0 , 1 ", 2)],
)  # fmt: skip
def test_ordinals_and_uuids_pass(visible: str, cards: int) -> None:
    assert visible_devices_problems(visible, cards, VAR) == []


@pytest.mark.parametrize(
    ("visible", "cards", "named"),
    [("2,3", 2, "'2', '3' not among the container's 2 card(s)"),  # the host's minors
     ("0,2", 2, "'2' not among"),  # one past the end: CUDA hides it and what follows
     ("1", 1, "'1' not among the container's 1 card(s)"),
     ("-1,0", 2, "'-1' not among"),
     ("cuda:0,cuda:1", 2, "'cuda:0', 'cuda:1' not among"),
     ("0,1,2", 2, "'2' not among")],
)  # fmt: skip
def test_an_index_the_container_lacks_is_named(visible: str, cards: int, named: str) -> None:
    problems = visible_devices_problems(visible, cards, VAR)
    assert len(problems) == 1, problems
    assert named in problems[0]
    assert f"0..{cards - 1}" in problems[0]
    assert VAR in problems[0]
    assert "valid: ordinals such as" in problems[0]


def test_too_few_and_repeated_ids_keep_their_messages() -> None:
    assert "shows the server 2 card(s) of the 4" in visible_devices_problems("0,1", 4, VAR)[0]
    assert (
        "not a list of distinct device ids (valid: '0,1')"
        in visible_devices_problems("0,0", 2, VAR)[0]
    )
    assert "distinct" in visible_devices_problems("0,,1", 2, VAR)[0]
