"""The server's whole command line and environment, from one parse of the profile.

``inference_service`` computes the unit's launch here, once (filter
``specops.infra.service_launch``), and hands the result to its template and its drafter
check: the speculative profile parsed and translated (``speculative.translate.launch``:
its flags and environment), the other engine arguments checked against the same flag
set (the installed build's, else the release's recorded list), the engine's launch head
and environment from its descriptor (``engine/descriptor.py``), in the order the unit runs them:

    <venv>/bin/python -m <launch module> <model flag> MODEL --served-model-name NAME
        --host HOST --port PORT <engine args> <speculative flags> [<key config>]

A problem is a :class:`ValidationError` naming the inventory variable
(``inference_service_speculative.<field>`` or ``inference_service_engine_args[i]``).
Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import descriptor
from ansible_collections.specops.infra.plugins.module_utils.errors import ValidationError
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import Engine
from ansible_collections.specops.infra.plugins.module_utils.speculative.profile import (
    SpeculativeProfile,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.translate import (
    TargetModel,
    launch,
)

__all__ = ["checked_args", "service_launch"]


def checked_args(args: Sequence[Any], engine: Engine, name: str) -> list[str]:
    """``args`` as strings, every flag and value checked against ``engine``'s flags;
    a speculative flag is refused (the profile renders those)."""
    if isinstance(args, str):
        raise ValidationError(name, "must be a list of strings, e.g. ['--max-model-len', '4096']")
    words = [str(a) for a in args]
    for index, word in enumerate(words):
        if word.startswith("--speculative") or word.startswith("--spec-"):
            raise ValidationError(
                f"{name}[{index}]", f"{word} is rendered from the speculative profile; set it there"
            )
    engine.flags.check_args(words, name)
    return words


def service_launch(
    profile_data: Mapping[str, Any] | None,
    engine: Engine,
    *,
    venv: str,
    model: str,
    served_model_name: str,
    host: str,
    port: int | str,
    engine_args: Sequence[Any] = (),
    key_config: Sequence[str] = (),
    base_env: Mapping[str, Any] | None = None,
    cache_dir: str = "",
    cuda_visible_devices: str = "",
    environment: Mapping[str, Any] | None = None,
    profile_name: str = "inference_service_speculative",
    args_name: str = "inference_service_engine_args",
    architectures: Sequence[str] = (),
) -> dict[str, Any]:
    """``{argv, env, profile, label}``: the unit's command line, its environment, the
    normalised profile and the engine build's label.

    ``architectures``: the model's config.json ``architectures`` (empty: not known); with
    ``model`` they are the translator's target (what the architecture needs: SGLang
    NEXTN's draft path, ``speculative.translate.TargetModel``).
    """
    profile = SpeculativeProfile.from_mapping(profile_data, prefix=profile_name)
    target = TargetModel(str(model), tuple(str(a) for a in architectures))
    try:
        spec_argv, spec_env = launch(profile, engine, target=target)
    except ValidationError as exc:
        if exc.field.startswith("speculative"):
            raise ValidationError(
                profile_name + exc.field.removeprefix("speculative"), exc.problem
            ) from None
        raise
    words = checked_args(engine_args, engine, args_name)
    facts = descriptor(engine.name)
    argv = [
        f"{venv.rstrip('/')}/bin/python", *facts.launch, model,
        "--served-model-name", served_model_name, "--host", host, "--port", str(port),
        *words, *spec_argv, *[str(k) for k in key_config],
    ]  # fmt: skip
    env: dict[str, str] = {str(k): str(v) for k, v in (base_env or {}).items()}
    env.update(facts.as_dict(venv=venv, cache_dir=cache_dir)["environment"])
    if cuda_visible_devices:
        env["CUDA_VISIBLE_DEVICES"] = str(cuda_visible_devices)
    env.update(spec_env)
    env.update({str(k): str(v) for k, v in (environment or {}).items()})
    return {"argv": argv, "env": env, "profile": profile.to_mapping(), "label": engine.label}
