"""Real-text prompts sized exactly to a context length with the server's tokenizer.

The built-in corpus (``corpus/chat.txt``, ``corpus/coding.txt``) is text written for
this project. A prompt is a unique header (so no two requests share a cached prefix),
an instruction, and corpus paragraphs starting at an offset chosen from
``(seed, concurrency, context, phase, index)``: the same plan gives the same prompts.

Lengths are exact: the text is tokenized by the server (vLLM ``POST /tokenize`` and
``/detokenize``; for chat the template is counted with ``messages``), else by a local
``tokenizer.json`` with the ``tokenizers`` library. Long contexts repeat the corpus,
which helps n-gram (prompt-lookup) speculation; compare acceptance at short contexts
or bring a larger ``prompt_file``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import httpx
import orjson

from specops.bench.client import post_json
from specops.bench.plan import ApiKind
from specops.errors import SpecopsError, ValidationError

__all__ = [
    "LocalTokenizer",
    "Prompt",
    "PromptBuilder",
    "ServerTokenizer",
    "Tokenizer",
    "load_corpus",
]

_INSTRUCTIONS = {
    "chat": "Read the following notes and answer: what is the most useful advice in them?",
    "coding": "Review the following Python code, point out bugs and continue it.",
}


@dataclass(frozen=True)
class Prompt:
    text: str  # completions/generate: the whole prompt; chat: the user message
    tokens: int  # exact token count the server will see (chat: template included)


class Tokenizer(Protocol):
    async def encode(self, text: str, special: bool) -> list[int]: ...

    async def decode(self, ids: list[int]) -> str: ...

    async def count_chat(self, content: str) -> int: ...


def load_corpus(prompt_set: str, prompt_file: str | None = None) -> list[str]:
    """Paragraphs of the corpus: blank-line separated blocks starting at column 0."""
    if prompt_file is not None:
        texts = [Path(prompt_file).read_text(encoding="utf-8")]
    else:
        names = ["chat.txt", "coding.txt"] if prompt_set == "mixed" else [f"{prompt_set}.txt"]
        base = resources.files("specops.bench") / "corpus"
        texts = [(base / name).read_text(encoding="utf-8") for name in names]
    paragraphs: list[str] = []
    for text in texts:
        paragraphs.extend(p.strip("\n") for p in re.split(r"\n\s*\n(?=\S)", text) if p.strip())
    if not paragraphs:
        raise ValidationError("prompt_file", "holds no text")
    return paragraphs


class ServerTokenizer:
    """vLLM's ``/tokenize`` and ``/detokenize`` (the model the server serves)."""

    def __init__(self, client: httpx.AsyncClient, model: str) -> None:
        self._client = client
        self._model = model

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await post_json(self._client, path, body)
        except httpx.RemoteProtocolError:
            # The server closed a pooled keep-alive connection as it was reused (uvicorn's
            # idle timeout): tokenizing has no side effects, so ask once more.
            response = await post_json(self._client, path, body)
        if response.status_code != 200:
            raise SpecopsError(
                f"{self._client.base_url}{path} answered HTTP {response.status_code}: "
                f"{response.text[:200]}"
            )
        try:
            data: dict[str, Any] = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            raise SpecopsError(f"{self._client.base_url}{path} answered no JSON") from None
        return data

    async def encode(self, text: str, special: bool) -> list[int]:
        data = await self._post(
            "/tokenize", {"model": self._model, "prompt": text, "add_special_tokens": special}
        )
        return [int(t) for t in data["tokens"]]

    async def decode(self, ids: list[int]) -> str:
        data = await self._post("/detokenize", {"model": self._model, "tokens": ids})
        # vLLM answers {"prompt": ...}; SGLang 0.5.11 {"text": ...} (DetokenizeResponse),
        # measured on the H200 (tests/fixtures/gpu-serving/h200-sglang-2026-12-03/).
        for key in ("prompt", "text"):
            if isinstance(data.get(key), str):
                return str(data[key])
        raise SpecopsError(
            f"{self._client.base_url}/detokenize answered neither 'prompt' nor 'text': "
            f"{sorted(data)}"
        )

    async def count_chat(self, content: str) -> int:
        data = await self._post(
            "/tokenize",
            {
                "model": self._model,
                "messages": [{"role": "user", "content": content}],
                "add_generation_prompt": True,
            },
        )
        return int(data["count"])

    @staticmethod
    async def available(client: httpx.AsyncClient, model: str) -> bool:
        try:
            response = await client.post("/tokenize", json={"model": model, "prompt": "a"})
        except httpx.HTTPError:
            return False
        return response.status_code == 200 and "tokens" in response.json()


class LocalTokenizer:
    """A ``tokenizer.json`` read with the ``tokenizers`` library (optional)."""

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer as HFTokenizer  # noqa: PLC0415
        except ImportError:
            raise ValidationError(
                "tokenizer_path",
                "needs the 'tokenizers' package (pip install 'specops[tokenizers]') or a server "
                "with /tokenize",
            ) from None
        file = Path(path)
        if file.is_dir():
            file = file / "tokenizer.json"
        if not file.is_file():
            raise ValidationError("tokenizer_path", f"no tokenizer.json at {path}")
        self._tok = HFTokenizer.from_file(str(file))

    async def encode(self, text: str, special: bool) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=special).ids)

    async def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=False))

    async def count_chat(self, content: str) -> int:
        raise ValidationError(
            "api", "chat prompts need the server's /tokenize to count the chat template"
        )


class PromptBuilder:
    """Builds the exact-length prompt of each request of a plan, deterministically."""

    def __init__(
        self, tokenizer: Tokenizer, api: ApiKind, paragraphs: list[str], seed: int
    ) -> None:
        self._tok = tokenizer
        self._chat = api == "chat"
        self._paragraphs = paragraphs
        self._seed = seed
        self._overhead_tokens: int | None = None
        self._bodies: dict[int, list[int]] = {}
        self._decoded: dict[tuple[int, int], str] = {}
        self._header_guess: dict[int, int] = {}

    def _offset(self, key: str) -> int:
        digest = hashlib.sha256(f"{self._seed}:{key}".encode()).digest()
        return int.from_bytes(digest[:8], "big") % len(self._paragraphs)

    def _body_text(self, start: int, min_chars: int) -> str:
        parts: list[str] = []
        size = 0
        i = start
        while size < min_chars:
            paragraph = self._paragraphs[i % len(self._paragraphs)]
            parts.append(paragraph)
            size += len(paragraph) + 2
            i += 1
        return "\n\n".join(parts)

    async def _overhead(self) -> int:
        """Tokens the server adds around the text (BOS, or the chat template)."""
        if self._overhead_tokens is None:
            if self._chat:
                self._overhead_tokens = await self._tok.count_chat("")
            else:
                self._overhead_tokens = len(await self._tok.encode("a", special=True)) - len(
                    await self._tok.encode("a", special=False)
                )
        return self._overhead_tokens

    async def _body_ids(self, start: int, tokens: int) -> list[int]:
        """Token ids of corpus text from paragraph ``start``, at least ``tokens`` long."""
        cached = self._bodies.get(start)
        if cached is not None and len(cached) >= tokens:
            return cached
        chars = tokens * 6 + 200
        ids = await self._tok.encode(self._body_text(start, chars), special=False)
        while len(ids) < tokens:  # a dense corpus: take more text
            chars *= 2
            ids = await self._tok.encode(self._body_text(start, chars), special=False)
        self._bodies[start] = ids
        return ids

    async def _prefix_text(self, start: int, ids: list[int], cut: int) -> str:
        key = (start, cut)
        text = self._decoded.get(key)
        if text is None:
            text = (await self._tok.decode(ids[:cut])).rstrip("\ufffd")
            if len(self._decoded) > 4096:
                self._decoded.clear()
            self._decoded[key] = text
        return text

    async def _count(self, text: str) -> int:
        if self._chat:
            return await self._tok.count_chat(text)
        return len(await self._tok.encode(text, special=True))

    async def build(self, key: str, tokens: int) -> Prompt:
        """A prompt of exactly ``tokens`` tokens, unique to ``key``.

        The header (``[key] instruction``) makes the prompt unique from its first
        tokens; corpus paragraphs fill the rest. The body is tokenized once per start
        paragraph and cut by token count; every prompt is then counted by the tokenizer
        itself (usually one call), and the cut moves until the count is exact.
        """
        kind = "coding" if self._offset(key + ":kind") % 2 else "chat"
        start = self._offset(key)
        overhead = await self._overhead()
        for header in (f"[{key}] {_INSTRUCTIONS[kind]}\n\n", f"[{key}]\n"):
            guess = self._header_guess.get(len(header))
            if guess is None:
                guess = len(await self._tok.encode(header, special=False))
            body_target = tokens - overhead - guess
            if body_target >= 4:
                break
        else:
            raise ValidationError(
                "context_lengths", f"{tokens} tokens is too short for a prompt of this server"
            )
        ids = await self._body_ids(start, body_target + 64)
        cut = body_target
        tried: set[int] = set()
        for _ in range(12):
            tried.add(cut)
            text = header + await self._prefix_text(start, ids, cut)
            count = await self._count(text)
            if count == tokens:
                self._header_guess[len(header)] = tokens - overhead - cut
                return Prompt(text, count)
            step = tokens - count
            cut += step
            if cut in tried:  # the count jumps over the target: step by one
                cut = max(tried) + 1 if step > 0 else min(tried) - 1
            if cut < 1 or cut > len(ids):
                break
        raise SpecopsError(
            f"could not size prompt {key} to exactly {tokens} tokens with the server's "
            "tokenizer (round trip unstable)"
        )
