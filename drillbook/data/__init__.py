"""Corpora for word-level language modelling: find, download, verify, tokenise, batch.

Example::

    from drillbook.data import BPTTSampler, batchify, load_corpus

    corpus = load_corpus("ptb")              # $DRILLBOOK_DATA or ~/.cache/drillbook
    train = batchify(corpus.train, 80)       # (T, 80)
    for batch in BPTTSampler(train, bptt=70, seed=141):
        batch.x, batch.y, batch.lr_scale     # (seq_len, 80) each, and the lr multiplier

Files are found at ``<root>/<subdir>/<filename>``; ``<root>`` is the ``root`` argument,
else ``$DRILLBOOK_DATA``, else ``$XDG_CACHE_HOME/drillbook`` or ``~/.cache/drillbook``.
"""


from .batching import Batch, BPTTSampler, batchify, get_batch
from .corpora import (
    CORPORA,
    DATA_ENV,
    SPLITS,
    ChecksumError,
    CorpusSpec,
    DownloadError,
    FileCheck,
    check_sha256,
    corpus_file,
    corpus_spec,
    data_root,
    data_root_source,
    download,
    sha256_file,
    verify,
)
from .dataset import Corpus, load_corpus, load_corpus_from_files
from .vocab import EOS, UNK, Vocabulary, read_lines, read_tokens, tokenize_line

__all__ = [
    "CORPORA",
    "DATA_ENV",
    "EOS",
    "SPLITS",
    "UNK",
    "BPTTSampler",
    "Batch",
    "ChecksumError",
    "Corpus",
    "CorpusSpec",
    "DownloadError",
    "FileCheck",
    "Vocabulary",
    "batchify",
    "check_sha256",
    "corpus_file",
    "corpus_spec",
    "data_root",
    "data_root_source",
    "download",
    "get_batch",
    "load_corpus",
    "load_corpus_from_files",
    "read_lines",
    "read_tokens",
    "sha256_file",
    "tokenize_line",
    "verify",
]
