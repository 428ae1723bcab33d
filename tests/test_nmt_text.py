"""Raw text in and out (Moses tokenisation through sacremoses) and the reported BLEU
(sacrebleu on detokenised text, with its signature).

The tests on the real corpus read ``$DRILLBOOK_DATA`` and are skipped without it::

    DRILLBOOK_DATA=/work/shared/data pytest tests/test_nmt_text.py
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest
import sacrebleu

from drillbook.data import CORPORA, DATA_ENV, corpus_file
from drillbook.errors import DataError, MissingPackageError
from drillbook.nmt import load_raw_sentences, moses_unescape, text
from drillbook.nmt.bleu import BleuScore, corpus_bleu, multi30k_bleu, sacrebleu_score
from drillbook.nmt.text import moses_detokenize, moses_tokenize


def _real_root() -> Path:
    root = os.environ.get(DATA_ENV)
    if not root:
        pytest.skip(f"${DATA_ENV} is not set; set it to a folder with the corpora to run")
    for name in ("multi30k", "multi30k-raw"):
        spec = CORPORA[name]
        if not all((Path(root) / spec.subdir / f).is_file() for f in spec.files.values()):
            pytest.skip(f"the {name} files are not all under ${DATA_ENV}={root}")
    return Path(root)


def _tokenised(split: str, lang: str, root: Path) -> list[list[str]]:
    """The release's tokenised lines, escapes undone (as load_parallel reads them)."""
    path = corpus_file("multi30k", f"{split}.{lang}", root)
    return [moses_unescape(line).split() for line in path.read_text("utf-8").splitlines()]


# ------------------------------------------------------------------ tokenise, detokenise
# (sentence, language, the tokens written out by hand)
SENTENCES = [
    ("A man's dog isn't wearing the well-known T-shirt, is it?", "en",
     ["a", "man", "'s", "dog", "isn", "'t", "wearing", "the", "well-known", "t-shirt", ",",
      "is", "it", "?"]),
    ('Two kids (one in red) shout "Hello!" for $5.50.', "en",
     ["two", "kids", "(", "one", "in", "red", ")", "shout", '"', "hello", "!", '"', "for",
      "$", "5.50", "."]),
    ("Ein 5-jähriger Junge spielt mit seinem Hund, z.B. im Park.", "de",
     ["ein", "5-jähriger", "junge", "spielt", "mit", "seinem", "hund", ",", "z.b.", "im",
      "park", "."]),
    ("Eine Frau sagt: \"Das ist gut.\"", "de",
     ["eine", "frau", "sagt", ":", '"', "das", "ist", "gut", ".", '"']),
    ("L'homme et l'enfant regardent un arc-en-ciel.", "fr",
     ["l'", "homme", "et", "l'", "enfant", "regardent", "un", "arc-en-ciel", "."]),
]


@pytest.mark.parametrize(("sentence", "lang", "tokens"), SENTENCES)
def test_tokenise_as_moses_and_detokenise_back(sentence, lang, tokens):
    assert moses_tokenize(sentence, lang) == tokens
    assert moses_detokenize(tokens, lang) == sentence.lower()
    # without lowercasing, only the case differs
    cased = moses_tokenize(sentence, lang, lowercase=False)
    assert cased != tokens and [t.lower() for t in cased] == tokens


@pytest.mark.parametrize(("sentence", "lang"), [
    ("Zwei Jungen essen ihr McDonald's-Menü, umgeben von Leuten.", "de"),  # lossy, see below
    ("Ein Mann hält ein Schild: „Hallo!“", "de"),  # German quotes become "
    ("Un homme  avec un « chapeau » rouge.", "fr"),
])
def test_tokenising_detokenised_text_gives_the_same_tokens(sentence, lang):
    tokens = moses_tokenize(sentence, lang)
    assert moses_tokenize(moses_detokenize(tokens, lang), lang) == tokens


def test_normalisation_and_blank_input():
    assert moses_tokenize("Ein Mann hält ein Schild: „Hallo!“", "de") == [
        "ein", "mann", "hält", "ein", "schild", ":", '"', "hallo", "!", '"']
    assert moses_tokenize("  \t ", "en") == []
    assert moses_detokenize([], "en") == ""


def test_missing_sacremoses_is_one_line_naming_the_extra(monkeypatch):
    text._moses.cache_clear()  # built tokenisers would hide the missing package
    monkeypatch.setitem(sys.modules, "sacremoses", None)
    with pytest.raises(MissingPackageError, match=r"pip install 'drillbook\[nmt\]'") as err:
        moses_tokenize("a dog .", "en")
    assert "\n" not in str(err.value)
    with pytest.raises(MissingPackageError):
        moses_detokenize(["a", "dog"], "en")
    text._moses.cache_clear()


@pytest.mark.data
@pytest.mark.parametrize("lang", ["en", "de", "fr"])
def test_raw_lines_tokenise_to_the_release_lines(lang):
    root = _real_root()
    raw = load_raw_sentences("test", lang, root)
    tok = _tokenised("test_2016_flickr", lang, root)
    assert len(raw) == len(tok) == 1000
    same = sum(moses_tokenize(r, lang) == t for r, t in zip(raw, tok, strict=True))
    assert same >= 999  # French: one full stop placed after a closing quote differs
    if lang == "en":
        assert raw[0] == "A man in an orange hat starring at something."


# ------------------------------------------------------------------ raw references
def test_raw_sentences_refuse_unknown_splits_and_languages(tmp_path):
    with pytest.raises(DataError, match=r"unknown Multi30k split 'dev'; valid splits: train, "
                                        r"valid, test, test_2017_flickr"):
        load_raw_sentences("dev", "en", tmp_path)
    with pytest.raises(DataError, match=r"no language 'cs'; valid: en, de, fr"):
        load_raw_sentences("test", "cs", tmp_path)


@pytest.mark.data
def test_raw_sentences_of_every_split_have_the_release_sizes():
    root = _real_root()
    sizes = {"valid": 1014, "test_2017_mscoco": 461, "test_2018_flickr": 1071}
    for split, n in sizes.items():
        assert len(load_raw_sentences(split, "de", root)) == n


# ------------------------------------------------------------------ BLEU
def test_sacrebleu_score_by_hand_and_its_signature():
    # every n-gram matches; 4 hypothesis words against 5 reference words:
    # BLEU = 100 * exp(1 - 5/4) by the brevity penalty alone
    bleu = sacrebleu_score(["a b c d"], ["a b c d e"], tokenize="none")
    assert isinstance(bleu, BleuScore)
    assert bleu.score == pytest.approx(100 * math.exp(1 - 5 / 4))
    assert bleu.signature == f"nrefs:1|case:mixed|eff:no|tok:none|smooth:exp|version:" \
                             f"{sacrebleu.__version__}"
    # case-insensitive: the same score; with case, no word matches
    upper = sacrebleu_score(["A B C D"], ["a b c d e"], tokenize="none", lowercase=True)
    assert upper.score == pytest.approx(bleu.score) and "|case:lc|" in upper.signature
    assert sacrebleu_score(["A B C D"], ["a b c d e"], tokenize="none").score == 0.0
    # 13a splits the full stop and the comma from the words
    assert sacrebleu_score(["a dog, running."], ["a dog , running ."]).score == pytest.approx(100)
    assert "|tok:13a|" in sacrebleu_score(["x"], ["x"]).signature
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        sacrebleu_score(["a", "b"], ["a"])


def test_in_house_bleu_is_sacrebleu_on_the_tokens():
    hyps = [["a", "man", "'s", "dog", "runs", "."], ["zwei", "hunde", "spielen"]]
    refs = [["the", "man", "'s", "dog", "runs", "fast", "."], ["zwei", "hunde", "spielen", "."]]
    expected = sacrebleu_score([" ".join(h) for h in hyps], [" ".join(r) for r in refs],
                               tokenize="none").score
    assert corpus_bleu(hyps, refs) == pytest.approx(expected, abs=1e-9)


def test_missing_sacrebleu_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sacrebleu", None)
    monkeypatch.setitem(sys.modules, "sacrebleu.metrics", None)
    with pytest.raises(MissingPackageError, match=r"pip install 'drillbook\[nmt\]'") as err:
        sacrebleu_score(["a"], ["a"])
    assert "\n" not in str(err.value)


@pytest.mark.data
@pytest.mark.parametrize(("lang", "ceiling"), [("en", 99.96), ("de", 99.93), ("fr", 99.99)])
def test_reported_bleu_of_the_release_tokens_is_almost_100(lang, ceiling):
    """The release's own tokenised references, scored as a model's output would be,
    lose only what detokenisation cannot give back (the module docstring's numbers)."""
    root = _real_root()
    refs = _tokenised("test_2016_flickr", lang, root)
    bleu = multi30k_bleu(refs, split="test", lang=lang, root=root)
    assert bleu.score == pytest.approx(ceiling, abs=0.005)
    assert bleu.signature == (f"nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:"
                              f"{sacrebleu.__version__}")
    # the score depends on the order: line i is scored against reference i only
    assert multi30k_bleu(refs[1:] + refs[:1], split="test", lang=lang, root=root).score < 10
    # a prefix is scored against the first references
    raw = load_raw_sentences("test", lang, root)
    head = multi30k_bleu(refs[:50], split="test", lang=lang, root=root)
    assert head.score == pytest.approx(sacrebleu_score(
        [moses_detokenize(r, lang) for r in refs[:50]], raw[:50], lowercase=True).score)
    with pytest.raises(ValueError, match="1001 hypotheses but the Multi30k test split has 1000"):
        multi30k_bleu(refs + refs[:1], split="test", lang=lang, root=root)
