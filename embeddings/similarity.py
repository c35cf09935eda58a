"""One scale for cosine similarities, whichever model made them.

Models spread their cosines differently: all-MiniLM-L6-v2 gives unrelated question/memory pairs about 0.15
and related ones about 0.47, multilingual-e5-small 0.76 and 0.84. Every threshold the server applies to a
similarity (search_memory's min_score, recall's margins, query expansion's floors) is stated on MiniLM's
scale, and each model maps its own cosines onto it linearly: the mean and spread of its cosines between
unrelated texts become MiniLM's (bench/calibrate_threshold.py measures them). Text pairs (a query and a
memory) and word pairs spread differently, so each has its own map.
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
# turn pairs and its memories' words.
REFERENCE = Similarity()
E5_SMALL = Similarity(text=Scale(center=0.7605, stretch=3.852, reference_center=0.1520),
                      word=Scale(center=0.8544, stretch=4.358, reference_center=0.2311))
