"""A tiny random-weight Llama model in GGUF, written with the ``gguf`` package.

The weights are noise (a fixed seed, so the file is the same every time); the
tokenizer is real, copied from a vocab-only GGUF (Llama 3's 128k BPE). The
server runs it at real speed and real cost: prompts are tokenized, prefilled
and decoded like any model's, and the output is nonsense tokens. With the
defaults the file is about 41 MB and loads in about 2 s.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from slopolicy.errors import UsageError

__all__ = ("TinyLlama", "tiny_model", "write_tiny_model")

_NO_GGUF = "the tiny model is written with the gguf package: pip install 'slopolicy[llama]'"


@dataclass(frozen=True, slots=True)
class TinyLlama:
    """The model's shape. ``context`` is the longest sequence it claims to
    support (``llama.context_length``), in tokens; the server's ``-c`` is set
    separately."""

    layers: int = 2
    width: int = 128
    heads: int = 4
    ffn: int = 256
    context: int = 65_536
    seed: int = 0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise UsageError(f"{name} must be an int >= 0, got {value!r}")
        if min(self.layers, self.width, self.heads, self.ffn, self.context) < 1:
            raise UsageError("layers, width, heads, ffn and context must be >= 1")
        if self.width % self.heads or (self.width // self.heads) % 2:
            raise UsageError("width must split into heads of an even size (rotary pairs)")

    @property
    def file_name(self) -> str:
        """A name that identifies the shape and seed."""
        shape = f"{self.layers}x{self.width}-h{self.heads}-f{self.ffn}-c{self.context}"
        return f"tiny-llama-{shape}-s{self.seed}.gguf"


def _gguf() -> Any:
    try:
        import gguf
    except ImportError as error:
        raise ImportError(_NO_GGUF) from error
    return gguf


def _field_value(field: Any, gguf: Any) -> Any:
    """A reader field's value as plain Python (strings decoded)."""
    kind = field.types[0]

    def item(index: int, of: Any) -> Any:
        part = field.parts[index]
        return bytes(part).decode("utf-8") if of == gguf.GGUFValueType.STRING else part[0].item()

    if kind == gguf.GGUFValueType.ARRAY:
        return [item(index, field.types[-1]) for index in field.data]
    return item(field.data[0], kind)


def write_tiny_model(path: Path, vocab: Path, shape: TinyLlama | None = None) -> Path:
    """Write the model to ``path`` (atomically: a partial file is never left
    under that name), its ``tokenizer.*`` fields copied from ``vocab``."""
    gguf = _gguf()
    import numpy as np  # gguf's own dependency

    shape = shape or TinyLlama()
    reader = gguf.GGUFReader(str(vocab))
    tokenizer = {
        name: field for name, field in reader.fields.items() if name.startswith("tokenizer.")
    }
    if "tokenizer.ggml.tokens" not in tokenizer:
        raise UsageError(f"{vocab} has no tokenizer.ggml.tokens")
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    writer = gguf.GGUFWriter(str(partial), "llama")
    writer.add_name("slopolicy-tiny-llama")
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.width)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.heads)
    writer.add_rope_dimension_count(shape.width // shape.heads)
    writer.add_rope_freq_base(500_000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    vocab_size = len(tokenizer["tokenizer.ggml.tokens"].data)
    writer.add_vocab_size(vocab_size)
    for name, field in tokenizer.items():
        value = _field_value(field, gguf)
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_array(name, value)
        else:
            writer.add_key_value(name, value, field.types[0])

    rng = np.random.default_rng(shape.seed)

    def weight(rows: int, columns: int) -> Any:
        return (rng.standard_normal((rows, columns), dtype=np.float32) * 0.02).astype(np.float16)

    norm = np.ones(shape.width, dtype=np.float32)
    # numpy's shape is ggml's reversed: (out, in). No output.weight: tied to the embedding.
    writer.add_tensor("token_embd.weight", weight(vocab_size, shape.width))
    writer.add_tensor("output_norm.weight", norm)
    for layer in range(shape.layers):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", norm)
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{block}.{part}.weight", weight(shape.width, shape.width))
        writer.add_tensor(f"{block}.ffn_norm.weight", norm)
        writer.add_tensor(f"{block}.ffn_gate.weight", weight(shape.ffn, shape.width))
        writer.add_tensor(f"{block}.ffn_up.weight", weight(shape.ffn, shape.width))
        writer.add_tensor(f"{block}.ffn_down.weight", weight(shape.width, shape.ffn))
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def tiny_model(vocab: Path, shape: TinyLlama | None = None, *, folder: Path | None = None) -> Path:
    """The model file for ``shape``, written on first use into ``folder``
    (default: beside ``vocab``) and reused after."""
    shape = shape or TinyLlama()
    path = (folder or vocab.parent) / shape.file_name
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_tiny_model(path, vocab, shape)
    return path
