"""pytest plugin: every test gets one kind, ``unit``, ``integration`` or ``e2e``.

The kind says what a test costs, so a contributor can run the fast ones alone
(``scripts/test.sh unit``, or ``pytest -m unit``):

- ``e2e``: the lab's own playbooks: ``specops lab up`` and the main job on the lab
  (:data:`E2E_FIXTURES`, :data:`E2E_PATHS`);
- ``integration``: LXC, docker, systemd, a server (a lab vLLM, the synthetic SSE
  server), or any process: ``ansible-playbook``, molecule, a script, a pytest
  subprocess (:data:`INTEGRATION_MARKERS`, :data:`INTEGRATION_FIXTURES`,
  :data:`INTEGRATION_PATHS`);
- ``unit``: everything else: no process started, nothing outside this Python process.

It is assigned here, in one place, from the markers a test already has (``lxc``,
``docker``, ``vllm``, ``fleet``, ``pypi``, ``slow``), the fixtures it uses and its file,
never by a marker in the test file. A test marked ``unit``, ``integration`` or ``e2e``
by hand keeps that kind.

The ``unit`` claim is checked: when a run selects unit tests only (``-m unit``), each
of them runs with process creation refused (``fork``/``exec`` of :mod:`subprocess`,
:func:`os.fork`, :func:`os.posix_spawn`, :func:`os.system`, ...), and a unit test that
starts one fails with the way to mark it. A run that mixes kinds (CI's) runs every test
as before: the check never changes what the full run proves.
"""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "E2E_FIXTURES",
    "E2E_PATHS",
    "INTEGRATION_FIXTURES",
    "INTEGRATION_MARKERS",
    "INTEGRATION_PATHS",
    "KINDS",
    "ProcessStarted",
    "kind_of",
    "no_processes",
]

KINDS = ("unit", "integration", "e2e")
REPO = Path(__file__).resolve().parents[2]

# The lab's playbooks: `specops lab up`, then deploy.yml (or a migration) on the lab.
E2E_FIXTURES = frozenset({"migrate_lab"})
E2E_PATHS = (
    "tests/deploy/",  # scripts/lab.sh and deploy.yml on the two-node lab
    "tests/lab/test_lab_up.py",  # `specops lab up` itself
)

# Markers that name something a unit test never uses (pyproject.toml says what each
# one needs); `slow` is here because a unit test is fast.
INTEGRATION_MARKERS = frozenset({"lxc", "docker", "vllm", "fleet", "pypi", "slow"})

# Fixtures that start a server, a container or a lab cluster (tests/plugins/, the areas'
# conftest.py files).
INTEGRATION_FIXTURES = frozenset(
    {
        "rootfs_tarball",  # the lab's CT template: real LXC
        "lab_cluster",  # tests/lab/conftest.py: a PVE stand-in cluster over LXC
        "lab_cluster_v1",
        "api_cluster",
        "pve_api",  # the PVE API stand-in, a server
        "synthetic",  # bench's synthetic SSE server on 127.0.0.1
        "ee_image",  # the execution environment's docker image
        "upstream_ee_image",
        "standin",  # tests/vfio/conftest.py: the PCI stand-in's bind loop
        "collection_tarball",  # tests/unit/conftest.py: ansible-galaxy collection build
        # tests/plugins/vllm_server.py: lab vLLM CPU servers (that plugin marks their
        # users `vllm` too, after this one has run)
        "vllm_lab",
        "vllm_servers",
        "vllm_plain_server",
        "vllm_ngram_server",
        "vllm_draft_server",
        "vllm_oracle",
        "vllm_oracle_drafters",
    }
)

# Files (``path``) and tests (``path::name``, every parametrization) that start a process
# (ansible-playbook, ansible-galaxy, git, a script, `pytest` in a subprocess, a module run
# as Ansible runs it) without a marker or fixture that says so. The unit guard found each
# of them (`scripts/test.sh unit`); a new one it finds goes here, or its test gets one of
# the markers above. A whole file is named where most of its tests start one.
INTEGRATION_PATHS: tuple[str, ...] = (
    "tests/bench/test_humaneval.py",
    "tests/bench/test_roofline.py::test_the_benchmark_role_reads_the_roofline_inputs_from_the_inventory",
    "tests/bench/test_serverview.py::test_nvidia_smi_lines_sum_power_and_average_utilisation",
    "tests/ci/test_strict_ci.py",
    "tests/doctor/test_doctor_cli.py::test_a_long_run_says_it_is_still_at_work",
    "tests/doctor/test_evidence.py::test_container_evidence_here_server_down",
    "tests/doctor/test_evidence.py::test_loader_cuda_and_engine_python",
    "tests/doctor/test_evidence.py::test_node_module_on_a_lab_tree",
    "tests/doctor/test_evidence.py::test_the_readiness_probe_sends_the_servers_api_key",
    "tests/gpu/test_gpu_catalogue.py::test_installer_stand_in_reads_the_catalogue_also_in_its_copy",
    "tests/gpu/test_gpu_catalogue.py::test_no_role_decides_on_an_architecture_literal",
    "tests/gpu/test_gpu_catalogue.py::test_no_second_table_of_gpu_products",
    "tests/gpu/test_gpu_facts_module.py",
    "tests/lab/test_crash_points.py::test_a_chain_goes_on_past_a_point_its_run_did_not_reach",
    "tests/lab/test_crash_points.py::test_a_chain_of_kills_ends_with_a_complete_run",
    "tests/lab/test_crash_points.py::test_a_kill_mid_task_lets_the_worker_finish_and_nothing_after",
    "tests/lab/test_crash_points.py::test_a_kill_mid_task_takes_the_workers_and_the_module",
    "tests/lab/test_crash_points.py::test_a_point_at_gathering_facts_is_reached_although_the_cache_holds_them",
    "tests/lab/test_crash_points.py::test_a_recurring_task_is_killed_in_the_batch_its_position_names",
    "tests/lab/test_crash_points.py::test_a_run_shorter_than_its_point_is_not_killed",
    "tests/lab/test_crash_points.py::test_kill_at_a_banner_stops_the_run_there",
    "tests/lab/test_lab_fleet.py::test_the_inventory_has_the_example_shape_and_this_lab_s_paths",
    "tests/lab/test_lab_node.py",
    "tests/lab/test_nvidia_installer_standin.py::test_module_install_refused_without_headers_of_the_simulated_kernel",
    "tests/lab/test_nvidia_installer_standin.py::test_runfile_is_named_like_the_real_one_and_reports_its_version",
    "tests/lab/test_pve_cli.py",
    "tests/lab/test_vllm_units.py::test_stale_pidfile_never_signals_a_reused_pid",
    "tests/migrate/test_preflight_units.py::test_stale_line_removal_keeps_crlf_bytes_elsewhere",
    "tests/serving/test_engine_build.py::test_running_build_is_read_from_the_process",
    "tests/serving/test_engine_git_build.py",
    "tests/serving/test_engine_source.py",
    "tests/serving/test_service_stop.py",
    "tests/serving/test_service_unit.py::test_a_started_change_outlives_the_controllers_hangup",
    "tests/speculative/test_engine_flags.py::test_extractor_parses_server_args",
    "tests/tune/test_lab_inventory.py",
    "tests/tune/test_rollout_node.py::test_the_filters_under_ansible",
    "tests/tune/test_rollout_plain.py",
    "tests/tune/test_sweep_driver.py",
    "tests/tune/test_sweep_playbook.py",
    "tests/tune/test_sweep_price.py::test_the_cli_prints_the_price_and_the_playbook_reads_its_json",
    "tests/unit/test_cli.py::test_a_command_of_an_installed_distribution_runs",
    "tests/unit/test_cli.py::test_stop_signal_ends_without_a_traceback",
    "tests/unit/test_cli_bad_input.py::test_bad_input_is_one_line_exit_2_and_changes_nothing",
    "tests/unit/test_cli_bad_input.py::test_the_base_sweep_config_is_accepted",
    "tests/unit/test_collection_build.py::test_the_checkout_runs_its_collections_playbooks_by_name",
    "tests/unit/test_controller_cli.py",
    "tests/unit/test_ee_definition.py::test_pkgmgr_apt_takes_ansible_builders_calls_to_apt",
    "tests/unit/test_example_inventory.py",
    "tests/unit/test_fact_cache.py::test_a_missing_cache_folder_is_made_private",
    "tests/unit/test_fact_cache.py::test_the_fact_cache_holds_no_secret_and_is_private",
    "tests/unit/test_import_contracts.py::test_a_new_core_module_must_be_placed_in_a_layer",
    "tests/unit/test_import_contracts.py::test_a_planted_violation_breaks_its_contract",
    "tests/unit/test_import_contracts.py::test_an_unplanted_copy_keeps_every_contract",
    "tests/unit/test_import_contracts.py::test_ansible_module_utils_is_allowed_in_module_utils",
    "tests/unit/test_import_contracts.py::test_the_repository_keeps_every_contract",
    "tests/unit/test_inventory_gpu_requests.py::test_the_preflight_playbook_passes_the_example_inventory",
    "tests/unit/test_inventory_gpu_requests.py::test_the_preflight_playbook_refuses_them_all_before_any_change",
    "tests/unit/test_inventory_role_rules.py::test_a_file_that_does_not_parse_is_named_by_the_playbook",
    "tests/unit/test_inventory_role_rules.py::test_the_preflight_playbook_passes_the_real_inventories",
    "tests/unit/test_inventory_role_rules.py::test_the_preflight_playbook_refuses_each_family_before_any_change",
    "tests/unit/test_inventory_role_rules.py::test_vaulted_secrets_pass_the_preflight_playbook",
    "tests/unit/test_locks.py::test_a_stale_lock_is_refused_before_anything_installs",
    "tests/unit/test_locks.py::test_an_unknown_environment_is_named_with_the_valid_ones",
    "tests/unit/test_migrate_inputs.py::test_a_check_run_writes_nothing_even_when_its_inputs_are_right",
    "tests/unit/test_migrate_inputs.py::test_the_migration_refuses_its_inputs_before_anything_changes",
    "tests/unit/test_node_card_facts.py::test_host_playbook_stops_at_the_node_facts_pass",
    "tests/unit/test_node_card_facts.py::test_the_node_facts_pass_lets_a_good_request_through_once",
    "tests/unit/test_node_lock.py::test_a_holder_is_gone_only_when_it_ran_here_and_its_process_died",
    "tests/unit/test_node_lock.py::test_the_run_directory_is_private_and_lists_live_renewers",
    "tests/unit/test_node_lock.py::test_this_process_is_alive_and_a_dead_one_is_not",
    "tests/unit/test_node_lock.py::test_two_processes_asking_at_once_get_one_lock",
    "tests/unit/test_pending_refresh.py::test_the_module_owes_reads_and_settles",
    "tests/unit/test_product_package.py",
    "tests/unit/test_pve_fixtures.py::test_a_missing_fixtures_folder_fails_every_test",
    "tests/unit/test_pve_privileges.py::test_host_key_checking_is_on_except_in_the_lab",
    "tests/unit/test_release.py::test_the_cli_prints_the_one_version",
    "tests/unit/test_secret_files.py::test_a_secret_file_is_read_when_the_value_is_empty",
    "tests/unit/test_secret_scan.py::test_a_command_line_with_a_secret_is_caught",
    "tests/unit/test_secret_scan.py::test_a_secret_in_the_environment_of_a_non_root_process_is_caught",
    "tests/unit/test_secret_scan.py::test_a_short_lived_command_line_is_caught_at_its_exec",
    "tests/unit/test_secret_scan.py::test_the_exec_connector_names_each_exec",
    "tests/unit/test_version.py",
)


def _path_of(item: pytest.Item) -> str:
    try:
        return Path(str(item.path)).resolve().relative_to(REPO).as_posix()
    except ValueError:  # a pytester test's own temporary files
        return Path(str(item.path)).name


def _named(nodeid: str, entries: tuple[str, ...]) -> bool:
    """Whether an entry names the test: its file, or its function (any parameters)."""
    function = nodeid.split("[", 1)[0]
    return any(function == e if "::" in e else nodeid.startswith(e) for e in entries)


def kind_of(item: pytest.Item) -> str:
    """The test's kind: a kind marker it has, else the rules above, else ``unit``."""
    for kind in KINDS:
        if item.get_closest_marker(kind) is not None:
            return kind
    fixtures = set(getattr(item, "fixturenames", ()))
    path = _path_of(item)
    if fixtures & E2E_FIXTURES or path.startswith(E2E_PATHS):
        return "e2e"
    if any(item.get_closest_marker(m) is not None for m in INTEGRATION_MARKERS):
        return "integration"
    if fixtures & INTEGRATION_FIXTURES or _named(item.nodeid, INTEGRATION_PATHS):
        return "integration"
    return "unit"


class ProcessStarted(Exception):
    """A unit test started a process."""


_KIND = pytest.StashKey[str]()
_GUARD = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # tryfirst: the kind markers are on every item before `-m` deselects by them.
    for item in items:
        kind = kind_of(item)
        item.stash[_KIND] = kind
        if item.get_closest_marker(kind) is None:
            item.add_marker(kind)


def pytest_collection_finish(session: pytest.Session) -> None:
    # The guard is on when what is left to run is unit tests only (`-m unit`).
    items = session.items
    session.config.stash[_GUARD] = bool(items) and all(
        item.stash.get(_KIND, "") == "unit" for item in items
    )


@contextmanager
def no_processes(where: str) -> Iterator[list[str]]:
    """Within the block, starting a process raises :class:`ProcessStarted`.

    The list it gives holds each refused call, so that a caller sees an attempt that
    the code under test caught and went on from.
    """
    attempts: list[str] = []

    def refuse(name: str) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            argv = args[0] if args and name.endswith("fork_exec") else args[:1]
            attempts.append(name)
            raise ProcessStarted(
                f"{where} is a unit test, and a unit test starts no process, but it "
                f"called {name}({argv!r}). If it must start one, it is an integration "
                f"test: give it the marker or fixture that says what it needs (lxc, "
                f"docker, vllm, slow, ...) or add its file to INTEGRATION_PATHS in "
                f"tests/plugins/kinds.py; else replace the process by a call."
            )

        return refused

    patched: list[tuple[Any, str, Any]] = []
    # subprocess binds fork_exec at import (its Popen); multiprocessing calls it by name.
    targets = [(subprocess, "_fork_exec"), (_posixsubprocess, "fork_exec")] + [
        (os, name)
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "popen")
        if hasattr(os, name)
    ]
    for module, name in targets:
        patched.append((module, name, getattr(module, name)))
        setattr(module, name, refuse(name))
    try:
        yield attempts
    finally:
        for module, name, original in patched:
            setattr(module, name, original)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    return (yield from _guarded(item))


def _guarded(item: pytest.Item) -> Iterator[None]:
    if not item.config.stash.get(_GUARD, False):
        return (yield)
    with no_processes(item.nodeid) as attempts:
        result = yield
    if attempts:  # refused, but caught by the code under test and passed over
        raise ProcessStarted(
            f"{item.nodeid} is a unit test and tried to start a process ({attempts[0]}), "
            f"which it caught: mark it as tests/plugins/kinds.py says (INTEGRATION_PATHS)."
        )
    return result


def pytest_report_header(config: pytest.Config) -> str | None:
    markexpr = str(config.getoption("markexpr", "") or "")
    if markexpr.strip() == "unit":
        return "kinds: unit tests only; a unit test that starts a process fails"
    return None
