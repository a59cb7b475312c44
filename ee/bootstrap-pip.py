#!/usr/bin/env python3
"""Install pip into a Python that has none (the execution environment's base stage).

    python3 bootstrap-pip.py pip==26.3

ansible-builder's own step (``pip_install``) runs ``python3 -m ensurepip``, which Debian's
system Python does not carry (python3-venv/python3-pip bring it; the project's base
image has neither), so execution-environment.yml sets ``options.skip_pip_install`` and
runs this instead, standard library only:

- the pip wheel of that exact version from ``PIP_FIND_LINKS`` when the build gives one
  (scripts/release/build-ee.py serves its wheelhouse on 127.0.0.1 for the build: an HTTP
  directory listing, or a local directory);
- else from PyPI's JSON API, checked against the sha256 PyPI publishes for it;

then pip installs itself from that wheel (a wheel is importable: ``<wheel>/pip``).
"""

from __future__ import annotations

import hashlib
import html.parser
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

PYPI = "https://pypi.org/pypi/pip/{version}/json"
PIN = re.compile(r"^pip==(?P<version>[0-9][0-9A-Za-z.]*)$")


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs.extend(v for k, v in attrs if k == "href" and v)


def _fetch(url: str) -> bytes:
    if not url.startswith(("http://", "https://")):
        raise SystemExit(f"bootstrap-pip: {url}: only http(s) URLs are fetched")
    with urllib.request.urlopen(url, timeout=60) as resp:  # noqa: S310 (scheme checked)
        data: bytes = resp.read()
    return data


def from_find_links(links: str, wheel: str) -> bytes | None:
    """The wheel named ``wheel`` from one of the find-links locations, if it has it."""
    for link in links.split():
        if "://" not in link:
            path = Path(link) / wheel
            if path.is_file():
                return path.read_bytes()
            continue
        base = link if link.endswith("/") else link + "/"
        parser = _Links()
        parser.feed(_fetch(base).decode("utf-8", "replace"))
        for href in parser.hrefs:
            if urllib.parse.unquote(href.rsplit("/", 1)[-1].split("#")[0]) == wheel:
                return _fetch(urllib.parse.urljoin(base, href))
    return None


def from_pypi(version: str, wheel: str) -> bytes:
    meta = json.loads(_fetch(PYPI.format(version=version)))
    for entry in meta["urls"]:
        if entry["filename"] == wheel:
            data = _fetch(entry["url"])
            if hashlib.sha256(data).hexdigest() != entry["digests"]["sha256"]:
                raise SystemExit(f"bootstrap-pip: {wheel}: sha256 differs from PyPI's")
            return data
    raise SystemExit(f"bootstrap-pip: PyPI has no {wheel}")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not (m := PIN.match(argv[0])):
        print("usage: bootstrap-pip.py pip==VERSION", file=sys.stderr)
        return 2
    version = m["version"]
    wheel = f"pip-{version}-py3-none-any.whl"
    links = os.environ.get("PIP_FIND_LINKS", "")
    data = from_find_links(links, wheel) if links else None
    if data is None:
        if os.environ.get("PIP_NO_INDEX", "").lower() in {"1", "true", "yes", "on"}:
            print(f"bootstrap-pip: {wheel} is not in PIP_FIND_LINKS ({links})", file=sys.stderr)
            return 1
        data = from_pypi(version, wheel)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / wheel
        path.write_bytes(data)
        cmd = [sys.executable, f"{path}/pip", "install", "--no-cache-dir", "--no-index",
               "--disable-pip-version-check", str(path)]  # fmt: skip
        return subprocess.run(cmd, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
