"""Build the lab's tiny Qwen2-style model and tokenizer, offline and deterministically.

Run by the vLLM venv's python (it has torch, transformers and tokenizers), not by the
controller: ``python tiny_model_builder.py --out DIR --spec JSON``. Nothing is
downloaded. The tokenizer is a byte-level BPE trained on text that ships with the
interpreter (the standard library's pydoc topics, which are English prose about
Python, plus a fixed list of stdlib modules' source), the weights are random from a
fixed seed, and the chat template is ChatML. ``specops-build.json`` in the output
records the spec, the corpus digest and every file's sha256.

Only the standard library is imported at module level, so the controller can import
this file (for its digest and defaults) without torch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import sysconfig
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["CHATML_TEMPLATE", "CORPUS_FILES", "SPECIAL_TOKENS", "TinyModelSpec", "build", "main"]

# Relative to the interpreter's stdlib; prose first, then code of several styles.
CORPUS_FILES: tuple[str, ...] = (
    "pydoc_data/topics.py",
    "argparse.py",
    "textwrap.py",
    "json/encoder.py",
    "json/decoder.py",
    "heapq.py",
    "bisect.py",
    "functools.py",
    "dataclasses.py",
    "string.py",
    "fractions.py",
    "statistics.py",
    "csv.py",
    "shlex.py",
    "difflib.py",
)

SPECIAL_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """The builder's inputs; the cache key is a digest of these and of this file."""

    vocab_size: int = 4096
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 32768
    rope_theta: float = 10000.0
    seed: int = 1234
    torch_dtype: str = "bfloat16"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _corpus() -> tuple[list[str], str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    digest = hashlib.sha256()
    texts: list[str] = []
    for rel in CORPUS_FILES:
        data = (stdlib / rel).read_bytes()
        digest.update(rel.encode() + b"\0" + data + b"\0")
        text = data.decode("utf-8")
        # Paragraph-sized pieces: the trainer counts words per piece.
        texts.extend(piece for piece in text.split("\n\n") if piece.strip())
    return texts, digest.hexdigest()


def _train_tokenizer(spec: TinyModelSpec, texts: list[str]) -> Any:
    from tokenizers import (  # noqa: PLC0415 - only in the vLLM venv
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        trainers,
    )

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def build(out: Path, spec: TinyModelSpec) -> dict[str, Any]:
    """Write the model and tokenizer to ``out`` (an empty or missing folder)."""
    import torch  # noqa: PLC0415 - only in the vLLM venv
    from transformers import (  # noqa: PLC0415
        PreTrainedTokenizerFast,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    out.mkdir(parents=True, exist_ok=True)
    texts, corpus_digest = _corpus()
    raw = _train_tokenizer(spec, texts)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=None,
        eos_token="<|im_end|>",  # noqa: S106 - a token, not a password
        pad_token="<|endoftext|>",  # noqa: S106
        unk_token=None,
        model_max_length=spec.max_position_embeddings,
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    tokenizer.save_pretrained(str(out))
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")

    torch.manual_seed(spec.seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        rope_theta=spec.rope_theta,
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        use_sliding_window=False,
    )
    model = Qwen2ForCausalLM(config).to(getattr(torch, spec.torch_dtype))
    model.eval()
    model.save_pretrained(str(out), safe_serialization=True)
    config_path = out / "config.json"
    config_data = json.loads(config_path.read_text())
    # Pin the dtype under both spellings transformers versions use.
    config_data["torch_dtype"] = spec.torch_dtype
    config_path.write_text(json.dumps(config_data, indent=2, sort_keys=True) + "\n")

    files = {
        p.name: _sha256(p)
        for p in sorted(out.iterdir())
        if p.is_file() and p.name != "specops-build.json"
    }
    info: dict[str, Any] = {
        "spec": asdict(spec),
        "corpus_files": list(CORPUS_FILES),
        "corpus_sha256": corpus_digest,
        "python": sys.version.split()[0],
        "vocab_size": len(tokenizer),
        "eos_token_id": eos_id,
        "files": files,
    }
    (out / "specops-build.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--spec", default="{}", help="TinyModelSpec fields as JSON")
    args = parser.parse_args(argv)
    spec = TinyModelSpec(**json.loads(args.spec))
    info = build(args.out, spec)
    print(json.dumps({"out": str(args.out), "files": info["files"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
