"""The lab: real stand-ins that tests and operators run on this machine.

Sub-areas: ``specops.lab.vllm`` (a real vLLM CPU server with a tiny local model).
Each sub-area adds its commands to ``specops lab`` through ``specops.lab.cli``.
"""

from __future__ import annotations

__all__: list[str] = []
