"""multilingual-e5-small's SentencePiece unigram tokenizer, rebuilt from the vocabulary in its model file.

The text is normalised code point by code point with the model's own map, runs of spaces become one, a
space is put in front and spaces become the metaspace mark "▁"; the whole string is then segmented by
Viterbi over the pieces' scores. The vocabulary is handed to the `sentencepiece` library as a unigram model
with an identity normaliser (its double-array trie takes a third of the memory of the `tokenizers` one).
Characters no piece covers are one unknown token each. This reproduces the token ids of the package's C
engine.
"""

from __future__ import annotations

import re
import struct

import sentencepiece

from memory_server.embeddings.e5_image import Vocabulary
from memory_server.embeddings.protobuf import bytes_field, string_field, varint, varint_field

_METASPACE = "\u2581"
_SPACES = re.compile(" {2,}")
# sentencepiece_model.proto: SentencePiece.Type, TrainerSpec.ModelType
_NORMAL, _UNKNOWN = 1, 2
_UNIGRAM = 1


class E5Tokenizer:
    """Text -> piece ids, without <s> and </s>. Thread-safe."""

    def __init__(self, vocabulary: Vocabulary) -> None:
        self._processor = sentencepiece.SentencePieceProcessor(model_proto=_model_proto(vocabulary))
        self._table = vocabulary.normalization
        self.unk = vocabulary.unk
        self.bos = vocabulary.bos
        self.eos = vocabulary.eos
        self.pad = vocabulary.pad

    def normalize(self, text: str) -> str:
        collapsed = _SPACES.sub(" ", text.translate(self._table))
        return (collapsed if collapsed.startswith(" ") else " " + collapsed).replace(" ", _METASPACE)

    def ids(self, text: str) -> list[int]:
        return self.ids_batch([text])[0]

    def ids_batch(self, texts: list[str]) -> list[list[int]]:
        normalized = [self.normalize(t) for t in texts]
        encoded: list[list[int]] = self._processor.encode(normalized)
        return [
            self._one_unknown_a_character(text, ids) if self.unk in ids else ids
            for text, ids in zip(normalized, encoded, strict=True)
        ]

    def _one_unknown_a_character(self, text: str, ids: list[int]) -> list[int]:
        # sentencepiece fuses a run of unknown characters into one token; the model saw one per character.
        encoded = self._processor.encode(text, out_type="offset_mapping")
        out: list[int] = []
        for token, (start, end) in zip(encoded["ids"], encoded["offsets"], strict=True):
            out.extend([token] * (end - start) if token == self.unk else [token])
        return out


_SHORT = [bytes([n]) for n in range(128)]


def _length(n: int) -> bytes:
    return _SHORT[n] if n < 128 else varint(n)


def _model_proto(vocabulary: Vocabulary) -> bytes:
    """A serialized sentencepiece ModelProto: the pieces (1) with their scores and types, a unigram trainer
    spec (2) naming the unknown piece, and an identity normaliser spec (3) that leaves spaces alone."""
    # 250,000 pieces: each is written with the field keys spelled out (the general helpers, a call per field,
    # took most of the model's load time).
    score_bytes = struct.Struct("<f").pack
    kinds = (b"\x18" + varint(_NORMAL), b"\x18" + varint(_UNKNOWN))  # field 3, varint
    pieces = []
    for number, (piece, score) in enumerate(zip(vocabulary.pieces, vocabulary.scores.tolist(), strict=True)):
        text = piece.encode("utf-8")
        # field 1 (string), field 2 (float), field 3 (enum): one SentencePiece message
        body = b"\x0a" + _length(len(text)) + text + b"\x15" + score_bytes(score) + kinds[number == vocabulary.unk]
        pieces.append(b"\x0a" + _length(len(body)) + body)  # field 1 of the ModelProto
    # <s>, </s> and <pad> are ordinary pieces, as the engine has them (text spelling "<s>" is that token):
    # sentencepiece is told of no bos, eos or pad (-1), and this tokenizer adds none.
    trainer = (
        varint_field(3, _UNIGRAM)
        + varint_field(4, len(vocabulary.pieces))
        + varint_field(40, vocabulary.unk)
        + varint_field(41, -1)
        + varint_field(42, -1)
        + varint_field(43, -1)
    )
    normalizer = string_field(1, "identity") + varint_field(3, 0) + varint_field(4, 0) + varint_field(5, 0)
    return b"".join(pieces) + bytes_field(2, trainer) + bytes_field(3, normalizer)
