"""One scale for cosine similarities, whichever model made them.

Models spread their cosines differently: all-MiniLM-L6-v2 gives unrelated question/memory pairs about 0.15
and related ones about 0.47, multilingual-e5-small 0.76 and 0.84. Every threshold the server applies to a
similarity (search_memory's min_score, recall's margins, query expansion's floors) is stated on MiniLM's
scale, and each model maps its own cosines onto it linearly (bench/calibrate_threshold.py measures both
models). Text pairs (a query and a memory) map by the mean and spread of their cosines between unrelated texts,
which also brings related pairs into line. Word pairs map by the tail where query expansion's floors lie: the
cosines that 1% and 0.1% of pairs of a store's words reach.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Scale:
    """cosine -> reference similarity: reference_center + (cosine - center) * stretch."""

    center: float = 0.0
    stretch: float = 1.0
    reference_center: float = 0.0

    def __call__(self, cosine: float) -> float:
        return self.reference_center + (cosine - self.center) * self.stretch

    def of(self, cosines: np.ndarray) -> np.ndarray:
        scaled: np.ndarray = self.reference_center + (np.asarray(cosines) - self.center) * self.stretch
        return scaled

    def cosine(self, similarity: float) -> float:
        """The model's cosine that maps to `similarity`."""
        return self.center + (similarity - self.reference_center) / self.stretch

    def cosine_margin(self, margin: float) -> float:
        """A difference of `margin` on the reference scale, in the model's cosines."""
        return margin / self.stretch


IDENTITY = Scale()


@dataclass(frozen=True)
class Similarity:
    text: Scale = IDENTITY  # a query (or memory) and a memory
    word: Scale = IDENTITY  # two words (query expansion)


# all-MiniLM-L6-v2 is the reference; multilingual-e5-small measured on LoCoMo's question -> other-conversation
# turn pairs and on 4,000 of its memories' words.
REFERENCE = Similarity()
E5_SMALL = Similarity(
    text=Scale(center=0.7605, stretch=3.852, reference_center=0.1520),
    word=Scale(center=0.8973, stretch=6.13, reference_center=0.4338),
)
