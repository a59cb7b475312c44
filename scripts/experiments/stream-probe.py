#!/usr/bin/env python3
"""When does a server's streamed answer reach this machine? Socket-level arrivals of one
streamed completion, read with a plain socket (no HTTP client library, no buffering of
ours in between), to tell the server's and the network's pacing from the benchmark
client's.

    scripts/experiments/stream-probe.py --base-url http://<container address>:8000 \
        --model tiny-qwen [--max-tokens 48] [--attempts 3] [--api-key-file F] [--json]

In the lab the container's address comes from the lab's one network definition:
``python -c "from specops_lab.network import load; print(load().address(801))"``
(801: the container's VMID).

Prints, per attempt, how many reads returned data, when the first and the last came
(ms after the request was sent) and how many SSE events each carried. An answer that
arrives as one read after tens of ms while the server streamed token by token points at
something between (a buffering proxy, Nagle with delayed ACKs); a busy server shows the
same at its own socket. Standard library only; each attempt is bounded by --timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import stat
import sys
import time
from typing import Any
from urllib.parse import urlsplit

MAX_ATTEMPTS = 10


def _api_key(path: str | None) -> str | None:
    if not path:
        return None
    mode = os.stat(path).st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SystemExit(f"--api-key-file: {path} is readable by others; chmod 0600 it")
    with open(path, encoding="utf-8") as fh:
        return fh.read().strip()


def probe(url: str, model: str, max_tokens: int, key: str | None, timeout: float) -> dict[str, Any]:
    """One streamed completion; every read that returned data, with its time and size."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SystemExit(f"--base-url: {url!r} is not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    body = json.dumps(
        {
            "model": model,
            "prompt": "def fibonacci(n):",
            "max_tokens": max_tokens,
            "stream": True,
            "temperature": 0,
        }
    ).encode()
    head = [
        f"POST {parts.path.rstrip('/')}/v1/completions HTTP/1.1",
        f"Host: {parts.netloc}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if key:
        head.append(f"Authorization: Bearer {key}")
    request = ("\r\n".join(head) + "\r\n\r\n").encode() + body
    sock = socket.create_connection((parts.hostname, port), timeout=timeout)
    if parts.scheme == "https":
        sock = ssl.create_default_context().wrap_socket(sock, server_hostname=parts.hostname)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    deadline = time.monotonic() + timeout
    reads: list[tuple[float, int, int]] = []
    status = ""
    with sock:
        start = time.perf_counter()
        sock.sendall(request)
        while time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break
            ms = (time.perf_counter() - start) * 1000
            if not reads:
                status = data.split(b"\r\n", 1)[0].decode(errors="replace")
            reads.append((round(ms, 2), len(data), data.count(b"data:")))
    return {
        "reads": len(reads),
        "first_ms": reads[0][0] if reads else None,
        "last_ms": reads[-1][0] if reads else None,
        "events": sum(r[2] for r in reads),
        "timeline": reads,
        "complete": " 200 " in f"{status} " and time.monotonic() < deadline,
        "status": status,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True, help="the served model name")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--attempts", type=int, default=3, help=f"1 to {MAX_ATTEMPTS}")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per attempt")
    ap.add_argument("--api-key-file", help="a 0600 file with the server's API key")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not 1 <= args.attempts <= MAX_ATTEMPTS:
        ap.error(f"--attempts: {args.attempts} is not between 1 and {MAX_ATTEMPTS}")
    key = _api_key(args.api_key_file)
    runs = [
        probe(args.base_url, args.model, args.max_tokens, key, args.timeout)
        for _ in range(args.attempts)
    ]
    if args.json:
        print(json.dumps({"base_url": args.base_url, "attempts": runs}))
    else:
        for i, r in enumerate(runs):
            print(
                f"attempt {i}: {r['reads']} reads, {r['events']} SSE events, first "
                f"{r['first_ms']} ms, last {r['last_ms']} ms ({r['status'] or 'no answer'})"
                + ("" if r["complete"] else ": incomplete")
            )
    return 0 if all(r["complete"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
