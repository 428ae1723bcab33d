"""Neural machine translation: the testbed of the joint-embedding and vMF output layers.

Example::

    from drillbook.nmt import load_parallel, make_batches

    corpus = load_parallel("de", "en")                 # Multi30k, $DRILLBOOK_DATA
    src_vocab, tgt_vocab = corpus.build_vocabs(min_freq=2)
    batches = make_batches(corpus.train, src_vocab, tgt_vocab, batch_size=64,
                           shuffle=True, seed=0)
    batch = batches[0]   # src (S, B), src_lengths (B,), tgt_in / tgt_out (T, B)

Only :mod:`~drillbook.nmt.data` and :mod:`~drillbook.nmt.embeddings` are imported here
(they need nothing beyond torch and numpy); import the model, decoding, BLEU and raw-text
tokenisation (:mod:`~drillbook.nmt.text`) from their modules.
"""

from __future__ import annotations

from .data import (
    BOS,
    EOS,
    EXTRA_TESTS,
    MULTI30K_SIZES,
    PAD,
    PAIRS,
    SPECIALS,
    UNK,
    NMTVocab,
    Pair,
    ParallelCorpus,
    TranslationBatch,
    load_parallel,
    load_parallel_from_files,
    load_raw_sentences,
    make_batches,
    moses_unescape,
    padding_fraction,
    read_parallel_files,
)
from .embeddings import GLOVE_DIM, GLOVE_PACKAGE, load_glove_50d, target_embeddings, train_word2vec

__all__ = [
    "BOS",
    "EOS",
    "EXTRA_TESTS",
    "GLOVE_DIM",
    "GLOVE_PACKAGE",
    "MULTI30K_SIZES",
    "PAD",
    "PAIRS",
    "SPECIALS",
    "UNK",
    "NMTVocab",
    "Pair",
    "ParallelCorpus",
    "TranslationBatch",
    "load_glove_50d",
    "load_parallel",
    "load_parallel_from_files",
    "load_raw_sentences",
    "make_batches",
    "moses_unescape",
    "padding_fraction",
    "read_parallel_files",
    "target_embeddings",
    "train_word2vec",
]
