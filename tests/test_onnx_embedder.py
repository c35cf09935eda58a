"""The onnxruntime engine against the torch engine, with the real model and real onnxruntime (no mocks)."""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from embeddings.factory import load_embedder
from embeddings.model_files import ModelNotFoundError, UnsupportedPipelineError
from embeddings.onnx import ONNX_FILE, OnnxEmbedder, OnnxModelMissingError
from embeddings.sentence import SentenceEmbedder
from server.settings import Settings

REPO_ROOT = Path(__file__).resolve().parent.parent

_SUBJECTS = ["The user", "My manager", "Our team", "Caroline", "The support bot", "Grandma", "The new intern"]
_VERBS = ["prefers", "forgot about", "scheduled", "complained about", "asked twice about", "finally fixed"]
_OBJECTS = ["dark mode in every editor", "the quarterly revenue report", "a dentist appointment on Friday",
            "the flaky integration test", "vegetarian lasagne for the party", "the VPN certificate renewal",
            "hiking in the Alps next summer", "the 4% raise", "Python 3.11 type hints", "the adoption agency"]
_ODD = ["", " ", "\n\t", ".", "?!", "🙂", "🙂🙂🙂 🎉", "日本語のテキストです。", "Ünïcödé çàfé naïve résumé",
        "مرحبا بالعالم", "Привет, мир", "x\u200by zero\u200dwidth", "e\u0301 combining", "ﬁ ligature ＡＢＣ",
        "\x00nul and \x07bell", "a", "I", "OK", "1234567890", "https://example.com/a?b=c&d=e#f",
        "def f(x):\n    return x ** 2  # code", "   leading and trailing spaces   ", "UPPER CASE SHOUTING"]
# Texts far past 256 tokens whose topic changes after ~200 tokens: truncating anywhere but at 256 moves
# the vector, so parity here means the engines truncate identically.
_COOKING = "Knead the dough for ten minutes, let it rise, then bake the bread until golden. "
_SPACE = "The telescope tracked a distant comet as it crossed the orbit of Jupiter tonight. "
_LONG = [_COOKING * 12 + _SPACE * 20, _SPACE * 13 + _COOKING * 15, "word " * 1000, "supercalifragilistic " * 300,
         " ".join(f"token{i}" for i in range(400)), "日本語 " * 600]
# Token counts at the truncation boundary ("cat" is one token; [CLS] and [SEP] make two more).
_BOUNDARY = [" ".join(["cat"] * (n - 3) + ["rocket"]) for n in (253, 254, 255, 256, 257, 258)]


def _varied_texts() -> list[str]:
    rng = random.Random(7)
    sentences = [f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}." for _ in range(150)]
    mixed = [s.lower() + " " + t for s, t in zip(sentences[:15], _ODD, strict=False)]
    return sentences + _ODD + _LONG + _BOUNDARY + mixed


TEXTS = _varied_texts()


@pytest.fixture(scope="module")
def onnx_embedder(model_dir: Path) -> OnnxEmbedder:
    if not (model_dir / ONNX_FILE).is_file():
        pytest.fail(f"no ONNX export in {model_dir}: run `make models`")
    return OnnxEmbedder(model_dir, threads=1)


def _view_without_onnx(model_dir: Path, target: Path) -> Path:
    """A model directory of symlinks to the real one, minus the ONNX export (no 90 MB copies)."""
    target.mkdir()
    for entry in model_dir.iterdir():
        if entry.name != ONNX_FILE.parts[0]:
            (target / entry.name).symlink_to(entry.resolve())
    return target


# --- parity with sentence-transformers --------------------------------------------------------------------


def test_the_default_engine_is_onnx(embedder: object) -> None:
    assert isinstance(embedder, OnnxEmbedder)


def test_same_name_dimension_and_sequence_length(onnx_embedder: OnnxEmbedder,
                                                 torch_embedder: SentenceEmbedder) -> None:
    # The index records the name and dimension: one built with either engine must open with the other.
    assert onnx_embedder.name == torch_embedder.name == "all-MiniLM-L6-v2"
    assert onnx_embedder.dimension == torch_embedder.dimension == 384
    assert onnx_embedder.max_seq_length == torch_embedder.max_seq_length == 256


def test_documents_match_torch_row_by_row(onnx_embedder: OnnxEmbedder, torch_embedder: SentenceEmbedder) -> None:
    assert len(TEXTS) >= 200
    got = onnx_embedder.embed_documents(TEXTS)
    expected = torch_embedder.embed_documents(TEXTS)
    assert got.dtype == np.float32 and got.shape == expected.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(got * expected, axis=1) / np.linalg.norm(expected, axis=1)
    worst = int(np.argmin(cosines))
    assert cosines[worst] >= 0.9999, (cosines[worst], TEXTS[worst][:80])


def test_truncation_matters_for_the_long_texts(onnx_embedder: OnnxEmbedder) -> None:
    # Guards the test above: had both engines truncated elsewhere, these vectors would not move.
    full, cut = onnx_embedder.embed_documents([_LONG[0], _COOKING * 12])
    assert float(full @ cut) < 0.99


def test_queries_match_torch(onnx_embedder: OnnxEmbedder, torch_embedder: SentenceEmbedder) -> None:
    for text in TEXTS[::10] + _LONG:
        assert float(onnx_embedder.embed_query(text) @ torch_embedder.embed_query(text)) >= 0.9999, text[:80]


def test_retrieval_ranks_the_same(onnx_embedder: OnnxEmbedder, torch_embedder: SentenceEmbedder) -> None:
    documents = [f"{s} {v} {o}." for s, v, o in zip(_SUBJECTS * 2, _VERBS * 2, _OBJECTS, strict=False)] + _LONG[:2]
    queries = ["who likes a dark editor theme?", "when is the dentist?", "what broke in CI?", "dinner plans",
               "travel plans for the summer", "salary", "how do I bake bread?", "what did the telescope see?"]
    rankings = []
    for engine in (onnx_embedder, torch_embedder):
        scores = np.stack([engine.embed_query(q) for q in queries]) @ engine.embed_documents(documents).T
        rankings.append(np.argsort(-scores, axis=1, kind="stable"))
    np.testing.assert_array_equal(rankings[0][:, 0], rankings[1][:, 0])  # the same best document
    np.testing.assert_array_equal(rankings[0][:, :3], rankings[1][:, :3])


# --- batching ------------------------------------------------------------------------------------------------


def test_batches_come_back_in_input_order(model_dir: Path, onnx_embedder: OnnxEmbedder) -> None:
    # Batches of 3 and a sort window of 48 texts: many batches, several windows, lengths shuffled.
    small_batches = OnnxEmbedder(model_dir, batch_size=3, query_cache_size=0)
    texts = TEXTS[:]
    random.Random(3).shuffle(texts)
    texts = texts[:100]
    batched = small_batches.embed_documents(texts)
    one_by_one = np.stack([onnx_embedder.embed_documents([t])[0] for t in texts])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)
    np.testing.assert_allclose(onnx_embedder.embed_documents(texts), one_by_one, atol=1e-5)


def test_duplicates_and_empty_input(onnx_embedder: OnnxEmbedder) -> None:
    assert onnx_embedder.embed_documents([]).shape == (0, 384)
    assert onnx_embedder.embed_documents([]).dtype == np.float32
    twice = onnx_embedder.embed_documents(["same text", "other", "same text"])
    np.testing.assert_allclose(twice[0], twice[2], atol=1e-6)


def test_a_query_equals_its_document_vector(onnx_embedder: OnnxEmbedder) -> None:
    query = onnx_embedder.embed_query("where do I park my bike?")
    assert query.shape == (384,) and query.dtype == np.float32
    np.testing.assert_allclose(query, onnx_embedder.embed_documents(["where do I park my bike?"])[0], atol=1e-5)


# --- the query cache -------------------------------------------------------------------------------------


def test_small_cache_evicts_least_recently_used(model_dir: Path, onnx_embedder: OnnxEmbedder) -> None:
    small = OnnxEmbedder(model_dir, query_cache_size=2)
    for text in ["alpha", "beta", "alpha", "gamma"]:  # "beta" is the least recently used when gamma arrives
        np.testing.assert_allclose(small.embed_query(text), onnx_embedder.embed_query(text), atol=1e-5)
    assert len(small._cache) == 2
    assert set(small._cache._vectors) == {"alpha", "gamma"}
    small.clear_cache()
    assert len(small._cache) == 0


def test_cache_size_zero_disables_caching(model_dir: Path) -> None:
    uncached = OnnxEmbedder(model_dir, query_cache_size=0)
    np.testing.assert_array_equal(uncached.embed_query("hello"), uncached.embed_query("hello"))
    assert len(uncached._cache) == 0


# --- a model directory without the export, or with a broken one --------------------------------------------


def test_missing_export_is_reported_with_the_fix(model_dir: Path, tmp_path: Path) -> None:
    view = _view_without_onnx(model_dir, tmp_path / "model")
    with pytest.raises(OnnxModelMissingError) as caught:
        OnnxEmbedder(view)
    assert "onnx/model.onnx" in str(caught.value) and "make models" in str(caught.value)


def test_missing_export_falls_back_to_torch_with_a_warning(model_dir: Path, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    view = _view_without_onnx(model_dir, tmp_path / "model")
    with caplog.at_level(logging.WARNING, logger="memory_server.embeddings"):
        fallback = load_embedder(view, threads=1, engine="onnx")
    assert isinstance(fallback, SentenceEmbedder)
    assert fallback.name == "all-MiniLM-L6-v2"
    assert any("torch" in r.getMessage() and "make models" in r.getMessage() for r in caplog.records)


def test_unsupported_pooling_falls_back_to_torch(model_dir: Path, tmp_path: Path) -> None:
    view = _view_without_onnx(model_dir, tmp_path / "model")
    (view / ONNX_FILE).parent.mkdir()
    (view / ONNX_FILE).symlink_to((model_dir / ONNX_FILE).resolve())
    (view / "1_Pooling").unlink()
    (view / "1_Pooling").mkdir()
    config = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
    config.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    (view / "1_Pooling" / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedPipelineError, match="mean pooling"):
        OnnxEmbedder(view)
    assert isinstance(load_embedder(view, threads=1, engine="onnx"), SentenceEmbedder)


def test_corrupt_export_is_an_error_not_a_fallback(model_dir: Path, tmp_path: Path) -> None:
    view = _view_without_onnx(model_dir, tmp_path / "model")
    (view / ONNX_FILE).parent.mkdir()
    (view / ONNX_FILE).write_bytes(b"not an onnx graph")
    with pytest.raises(ModelNotFoundError, match="make models"):
        load_embedder(view, threads=1, engine="onnx")


def test_missing_model_dir_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load_embedder(tmp_path / "nowhere", threads=1, engine="onnx")


# --- engine selection ------------------------------------------------------------------------------------


def test_engine_selection(model_dir: Path) -> None:
    assert isinstance(load_embedder(model_dir, threads=1, engine="onnx"), OnnxEmbedder)
    assert isinstance(load_embedder(model_dir, threads=1, engine="torch"), SentenceEmbedder)
    with pytest.raises(ValueError, match="engine"):
        load_embedder(model_dir, threads=1, engine="tensorflow")  # type: ignore[arg-type]


def test_engine_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORY_EMBEDDING_ENGINE", raising=False)
    assert Settings().embedding_engine == "onnx"
    monkeypatch.setenv("MEMORY_EMBEDDING_ENGINE", "torch")
    assert Settings().embedding_engine == "torch"


def test_the_onnx_engine_never_imports_torch(model_dir: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from embeddings.factory import load_embedder; "
        f"e = load_embedder(Path({str(model_dir)!r}), threads=1); "
        "assert type(e).__name__ == 'OnnxEmbedder', type(e); "
        "e.embed_query('hello'); e.embed_documents(['a', 'b c']); "
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr
