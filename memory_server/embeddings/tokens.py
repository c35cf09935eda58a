"""Token counting for context budgets, with one tokenizer shipped in the package (no transformers import)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

_TOKENIZER_FILE = "tokenizer.json"
# all-MiniLM-L6-v2's WordPiece tokenizer, whichever model embeds: a budget means the same everywhere.
COUNTING_DIR = Path(__file__).resolve().parent / "counting"


class TokenCounter:
    """Counts and truncates text in tokens, special tokens excluded.

    Built from `<model_dir>/tokenizer.json` with the `tokenizers` library, which loads in milliseconds and
    is thread-safe for encoding.
    """

    def __init__(self, model_dir: Path = COUNTING_DIR) -> None:
        path = Path(model_dir) / _TOKENIZER_FILE
        if not path.is_file():
            # Imported here so this module stays importable without loading torch/sentence-transformers.
            from memory_server.embeddings.sentence import ModelNotFoundError

            raise ModelNotFoundError(Path(model_dir), f"no {_TOKENIZER_FILE} for token counting")
        self._tokenizer = Tokenizer.from_file(str(path))
        # The bundled tokenizer.json truncates and pads to 128; a budget needs the full, unpadded count.
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()

    def count(self, text: str) -> int:
        """Number of tokens in `text`, without [CLS]/[SEP] and without truncation."""
        if not text:
            return 0
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text`, cut at a token boundary, with `count(prefix) <= max_tokens`.

        The result is always an exact prefix of `text` (offsets are character offsets into the original).
        """
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
        offsets = self._tokenizer.encode(text, add_special_tokens=False).offsets
        if len(offsets) <= max_tokens:
            return text
        # Cut where token number `max_tokens` starts, keeping the whitespace before it.
        keep = max_tokens
        while True:
            prefix = text[: offsets[keep][0]]
            excess = self.count(prefix) - max_tokens
            # Re-tokenising a prefix can differ from the full text (a word cut mid-way splits into more
            # pieces), so verify and step back by at least the excess; the empty string always fits.
            if excess <= 0:
                return prefix
            if keep == 0:
                return ""
            keep = max(0, keep - excess)
