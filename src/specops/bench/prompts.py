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
        response = await self._client.post(path, json=body)
        if response.status_code != 200:
            raise SpecopsError(
                f"{self._client.base_url}{path} answered HTTP {response.status_code}: "
                f"{response.text[:200]}"
            )
        data: dict[str, Any] = response.json()
        return data

    async def encode(self, text: str, special: bool) -> list[int]:
        data = await self._post(
            "/tokenize", {"model": self._model, "prompt": text, "add_special_tokens": special}
        )
        return [int(t) for t in data["tokens"]]

    async def decode(self, ids: list[int]) -> str:
        data = await self._post("/detokenize", {"model": self._model, "tokens": ids})
        return str(data["prompt"])

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
                "needs the 'tokenizers' package (pip install tokenizers) or a server "
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
        self._chat_overhead: int | None = None

    def _offset(self, key: str) -> int:
        digest = hashlib.sha256(f"{self._seed}:{key}".encode()).digest()
        return int.from_bytes(digest[:8], "big") % len(self._paragraphs)

    def _raw_text(self, key: str, kind: str, min_chars: int) -> str:
        start = self._offset(key)
        parts = [f"[{key}] {_INSTRUCTIONS[kind]}"]
        size = len(parts[0])
        i = start
        while size < min_chars:
            paragraph = self._paragraphs[i % len(self._paragraphs)]
            parts.append(paragraph)
            size += len(paragraph) + 2
            i += 1
        return "\n\n".join(parts)

    async def _count(self, text: str) -> int:
        if self._chat:
            return await self._tok.count_chat(text)
        return len(await self._tok.encode(text, special=True))

    async def build(self, key: str, tokens: int) -> Prompt:
        """A prompt of exactly ``tokens`` tokens, unique to ``key``."""
        kind = "coding" if self._offset(key + ":kind") % 2 else "chat"
        if self._chat and self._chat_overhead is None:
            self._chat_overhead = await self._tok.count_chat("")
        special = len(await self._tok.encode("a", special=True)) - len(
            await self._tok.encode("a", special=False)
        )
        overhead = self._chat_overhead if self._chat else special
        body_target = tokens - (overhead or 0)
        if body_target < 8:
            raise ValidationError(
                "context_lengths", f"{tokens} tokens is too short for a prompt (minimum ~16)"
            )
        text = self._raw_text(key, kind, min_chars=body_target * 6 + 200)
        ids = await self._tok.encode(text, special=False)
        while len(ids) < body_target:  # dense corpus: add more text
            text = self._raw_text(key, kind, min_chars=len(text) * 2)
            ids = await self._tok.encode(text, special=False)
        cut = body_target
        for _ in range(12):
            candidate = (await self._tok.decode(ids[:cut])).rstrip("\ufffd")
            count = await self._count(candidate)
            if count == tokens:
                return Prompt(candidate, count)
            cut += tokens - count
            if cut < 1 or cut > len(ids):
                break
        raise SpecopsError(
            f"could not size prompt {key} to exactly {tokens} tokens with the server's "
            "tokenizer (round trip unstable)"
        )
