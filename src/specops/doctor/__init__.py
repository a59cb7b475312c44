"""``specops doctor``: the GPU doctor's summary from ``playbooks/verify.yml``'s results.

The evidence and the diagnosis live in the collection (``module_utils/gpu_doctor*.py``,
the ``gpu_doctor`` role); this package only runs the playbook and reads its results.
"""

from __future__ import annotations

__all__: list[str] = []
