"""Filters for the ``speculative_rollout`` role: the rescue's verdict and the node's record.

    {{ ansible_failed_result | specops.infra.rollout_failure(change=..., smoke=...) }}
    {{ _restore | specops.infra.rollout_restore(node=..., failure=..., record_path=...) }}
    {{ inventory_hostname | specops.infra.rollout_record(outcome=..., ...) | to_nice_json }}
    {{ probe | specops.infra.rollout_resume(profile=..., record_text=..., kept_previous=...,
                                            record_path=...) }}

The logic is ``module_utils/rollout_node.py``'s; this file only adapts errors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.specops.infra.plugins.module_utils import rollout_node

__all__ = ["FilterModule", "rollout_failure", "rollout_record", "rollout_restore", "rollout_resume"]


def rollout_failure(
    failed_result: Mapping[str, Any] | None,
    change: Mapping[str, Any] | None = None,
    smoke: Mapping[str, Any] | None = None,
    plain: Mapping[str, Any] | None = None,
    plain_needed: bool = False,
) -> dict[str, Any]:
    """The failed gate, the message kept, the change result the record reads, and
    whether the previous unit still has to be put back."""
    return rollout_node.failure(
        failed_result, change=change, smoke=smoke, plain=plain, plain_needed=bool(plain_needed)
    ).to_dict()


def rollout_restore(
    restore_result: Mapping[str, Any], node: str, failure: Mapping[str, Any], record_path: str
) -> dict[str, Any]:
    """The node's outcome after the rescue's restore step, the record's message and the
    play's stop message."""
    try:
        return rollout_node.restore(
            restore_result, node=str(node), failure=failure, record_path=str(record_path)
        ).to_dict()
    except KeyError as exc:
        raise AnsibleFilterError(
            f"rollout_restore: failure must be rollout_failure's result (no {exc})"
        ) from None


def rollout_record(node: str, **kwargs: Any) -> dict[str, Any]:
    """The node's record (``<report_dir>/<node>.json``)."""
    try:
        return rollout_node.node_record(str(node), **kwargs)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"rollout_record: {exc}") from None


def rollout_resume(
    probe: Mapping[str, Any],
    profile: Mapping[str, Any],
    record_text: str | None = None,
    kept_previous: str | None = None,
    record_path: str = "",
) -> dict[str, Any]:
    """Whether the node is done (skipped) and the unit a failure puts back."""
    if not isinstance(probe, Mapping) or not isinstance(profile, Mapping):
        raise AnsibleFilterError("rollout_resume: the probe and the profile must be mappings")
    return rollout_node.resume(
        probe, profile=profile, record_text=record_text or None,
        kept_previous=kept_previous or None, record_path=str(record_path),
    ).to_dict()  # fmt: skip


class FilterModule:
    """specops.infra rollout filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "rollout_failure": rollout_failure,
            "rollout_restore": rollout_restore,
            "rollout_record": rollout_record,
            "rollout_resume": rollout_resume,
        }
