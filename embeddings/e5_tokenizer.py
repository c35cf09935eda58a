"""multilingual-e5-small's SentencePiece unigram tokenizer, rebuilt from the vocabulary in its model file.

The text is normalised code point by code point with the model's own map, runs of spaces become one, a
space is put in front and spaces become the metaspace mark "▁"; the whole string is then segmented by
Viterbi over the pieces' scores (the `tokenizers` Unigram model, in Rust). Characters no piece covers are
one unknown token each. This reproduces the token ids of the package's C engine.
"""

from __future__ import annotations

import re

from tokenizers import Tokenizer, models

from embeddings.e5_image import Vocabulary

_METASPACE = "\u2581"
_SPACES = re.compile(" {2,}")
# The unknown piece must never match text (the engine leaves it out of the lookup); no normalised text holds
# a plain space, so this spelling cannot.
_UNMATCHABLE_UNK = "<unk> "


class E5Tokenizer:
    """Text -> piece ids, without <s> and </s>. Thread-safe."""

    def __init__(self, vocabulary: Vocabulary) -> None:
        pieces = [(piece, float(score)) for piece, score in zip(vocabulary.pieces, vocabulary.scores, strict=True)]
        pieces[vocabulary.unk] = (_UNMATCHABLE_UNK, 0.0)
        self._model = Tokenizer(models.Unigram(pieces, unk_id=vocabulary.unk, byte_fallback=False))
        self._table = vocabulary.normalization
        self.unk = vocabulary.unk
        self.bos = vocabulary.bos
        self.eos = vocabulary.eos
        self.pad = vocabulary.pad

    def normalize(self, text: str) -> str:
        collapsed = _SPACES.sub(" ", text.translate(self._table))
        return (collapsed if collapsed.startswith(" ") else " " + collapsed).replace(" ", _METASPACE)

    def ids(self, text: str) -> list[int]:
        return self._ids(self._model.encode(self.normalize(text), add_special_tokens=False))

    def ids_batch(self, texts: list[str]) -> list[list[int]]:
        encodings = self._model.encode_batch([self.normalize(t) for t in texts], add_special_tokens=False)
        return [self._ids(e) for e in encodings]

    def _ids(self, encoding: object) -> list[int]:
        ids: list[int] = encoding.ids  # type: ignore[attr-defined]
        if self.unk not in ids:
            return ids
        # `tokenizers` fuses a run of unknown characters into one token; the model saw one per character.
        out: list[int] = []
        for token, (start, end) in zip(ids, encoding.offsets, strict=True):  # type: ignore[attr-defined]
            out.extend([token] * (end - start) if token == self.unk else [token])
        return out
