"""Neural machine translation: the testbed of the joint-embedding and vMF output layers.

Multi30k sentence pairs (:mod:`~drillbook.nmt.corpus`), their vocabularies
(:mod:`~drillbook.nmt.vocab`) and batches (:mod:`~drillbook.nmt.batching`), raw text in and
out (:mod:`~drillbook.nmt.text`), pretrained target vectors
(:mod:`~drillbook.nmt.embeddings`), the attentional model whose output layer is any head
(:mod:`~drillbook.nmt.model`), decoding (:mod:`~drillbook.nmt.decode`) and BLEU
(:mod:`~drillbook.nmt.bleu`). Training is :class:`drillbook.train.NMTTrainer`.

Example::

    from drillbook.nmt import load_parallel, make_batches

    corpus = load_parallel("de", "en")                 # Multi30k, $DRILLBOOK_DATA
    src_vocab, tgt_vocab = corpus.build_vocabs(min_freq=2)
    batches = make_batches(corpus.train, src_vocab, tgt_vocab, batch_size=64,
                           shuffle=True, seed=0)
    batch = batches[0]   # src (S, B), src_lengths (B,), tgt_in / tgt_out (T, B)

Only the data modules are imported here (they need nothing beyond torch and numpy);
import the model, decoding, BLEU and raw-text tokenisation from their modules.
"""

from .batching import TranslationBatch, make_batches, padding_fraction
from .corpus import (
    EXTRA_TESTS,
    MULTI30K_SIZES,
    PAIRS,
    Pair,
    ParallelCorpus,
    load_parallel,
    load_parallel_from_files,
    load_raw_sentences,
    read_parallel_files,
)
from .embeddings import GLOVE_DIM, GLOVE_PACKAGE, load_glove_50d, target_embeddings, train_word2vec
from .text import moses_unescape
from .vocab import BOS, EOS, PAD, SPECIALS, UNK, NMTVocab

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
