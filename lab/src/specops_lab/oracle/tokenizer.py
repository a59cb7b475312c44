"""The oracle models' tokenizer: a byte-level BPE trained offline, sized to the vocabulary.

Trained with the ``tokenizers`` package on text that ships with the interpreter (the lab
tiny model's corpus, :data:`specops_lab.tiny_model_builder.CORPUS_FILES`, then more of the
standard library's sources, sorted, up to a byte budget), with the special tokens of
:data:`~specops_lab.oracle.spec.SPECIAL_TOKENS` at ids 0..3. Every id below
``vocab_size`` must decode (the target's output walks every non-special id), so when
the trainer stops short the rest are plain added tokens ``<|tNNNNN|>`` (not special:
they decode to their text). No download, no transformers: the files are written as
transformers reads them (``tokenizer.json``, ``tokenizer_config.json`` with
``added_tokens_decoder``, which the drafter preflight reads for the mask token id,
``special_tokens_map.json``, ``chat_template.jinja``).
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
from pathlib import Path
from typing import Any

from specops_lab.oracle.spec import SPECIAL_TOKENS
from specops_lab.tiny_model_builder import CHATML_TEMPLATE, CORPUS_FILES

__all__ = ["TOKENIZER_FILES", "corpus", "train", "write"]

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)
_EOS, _PAD, _MASK = SPECIAL_TOKENS[2], SPECIAL_TOKENS[0], SPECIAL_TOKENS[3]


def corpus(limit_bytes: int) -> tuple[list[str], str]:
    """Paragraphs of the interpreter's stdlib text (sorted), and their digest."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    names = [n for n in CORPUS_FILES if (stdlib / n).is_file()]  # a trimmed stdlib lacks some
    if limit_bytes > sum((stdlib / n).stat().st_size for n in names):
        extra = sorted(
            str(p.relative_to(stdlib))
            for p in stdlib.rglob("*.py")
            if "site-packages" not in p.parts and "test" not in p.parts
        )
        names += [n for n in extra if n not in CORPUS_FILES]
    digest = hashlib.sha256()
    texts: list[str] = []
    total = 0
    for rel in names:
        try:
            data = (stdlib / rel).read_bytes()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        digest.update(rel.encode() + b"\0" + data + b"\0")
        texts.extend(piece for piece in text.split("\n\n") if piece.strip())
        total += len(data)
        if total >= limit_bytes:
            break
    return texts, digest.hexdigest()


def train(vocab_size: int) -> tuple[Any, dict[str, Any]]:
    """A ``tokenizers.Tokenizer`` of exactly ``vocab_size`` ids, and what it was made from."""
    from tokenizers import (  # noqa: PLC0415 - only where the builder runs
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        trainers,
    )

    # ~2 KB of text per merge is plenty; the lab's 4096 fit in its 15 files (~1 MB).
    texts, digest = corpus(max(1_000_000, vocab_size * 700))
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    trained = tokenizer.get_vocab_size()
    if trained > vocab_size:
        raise RuntimeError(f"the trainer made {trained} tokens, more than {vocab_size}")
    padding = [
        AddedToken(f"<|t{i:05d}|>", special=False, normalized=False)
        for i in range(trained, vocab_size)
    ]
    if padding:
        tokenizer.add_tokens(padding)
    if tokenizer.get_vocab_size() != vocab_size:
        raise RuntimeError(
            f"tokenizer has {tokenizer.get_vocab_size()} ids after padding, wanted {vocab_size}"
        )
    for index, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != index:
            raise RuntimeError(f"special token {token} is not id {index}")
    return tokenizer, {
        "vocab_size": vocab_size,
        "trained": trained,
        "padded": len(padding),
        "corpus_sha256": digest,
        "corpus_paragraphs": len(texts),
    }


def write(tokenizer: Any, out: Path, max_length: int) -> None:
    """The tokenizer files transformers (and so vLLM and SGLang) read, into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    decoder = {
        str(i): {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for i, token in enumerate(SPECIAL_TOKENS)
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": decoder,
        "bos_token": None,
        "eos_token": _EOS,
        "pad_token": _PAD,
        "unk_token": None,
        "mask_token": _MASK,
        "model_max_length": max_length,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHATML_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special = {"eos_token": _EOS, "pad_token": _PAD, "mask_token": _MASK}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    (out / "chat_template.jinja").write_text(CHATML_TEMPLATE)
