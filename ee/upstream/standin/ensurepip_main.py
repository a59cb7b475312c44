"""``python3.11 -m ensurepip`` of the stand-in base (ee/upstream/standin/Containerfile).

The upstream base's Python (Automation Platform's ee-minimal) carries CPython's
ensurepip; with pip already installed there, ansible-builder's ``pip_install`` step
(``-m ensurepip --root /``) finds pip present and changes nothing. Debian patches its
system Python's ensurepip to refuse ("ensurepip is disabled in Debian/Ubuntu for the
system python"), so the stand-in puts this in its place: it does what the upstream one
does here, and fails as it would when pip is missing.
"""

import importlib.util
import sys

if importlib.util.find_spec("pip") is None:
    sys.exit("ensurepip (stand-in): pip is not installed in this Python")
print("ensurepip (stand-in): pip is installed; nothing to do")
