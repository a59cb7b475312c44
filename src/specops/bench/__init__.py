"""Benchmark: load generation (client), measurement (stats, metrics), reporting.

Modules: ``plan`` (typed plan), ``client`` (streaming requests), ``prompts`` (exact-
length real-text prompts), ``metrics`` (acceptance), ``stats`` (per-request and cell
statistics), ``runner`` (the matrix), ``results`` (versioned JSON, CSV), ``report``
(Markdown, PNG), ``roofline``, ``compare`` (gates), ``humaneval`` (pass@1),
``synthetic`` (test server), ``cli`` (``specops bench``).
"""

from __future__ import annotations

__all__: list[str] = []
