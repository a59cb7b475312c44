"""``python -m specops``: the same CLI as the ``specops`` script (playbooks use it)."""

from __future__ import annotations

import sys

from specops.cli import main

__all__: list[str] = []

sys.exit(main())
