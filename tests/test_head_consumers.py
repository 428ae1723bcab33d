"""Every consumer of an output head, run on every head in ``drillbook.heads.HEADS``.

A head declares on its class what it is and needs (``is_distribution``, ``has_logits``,
``is_mixture``, ``reads_layers``, ``shares_embedding``, ``options``). The language model
and its trainer, evaluation and rank analysis, the translation model with its trainer,
greedy and beam decoding, and the cost benchmark read those declarations. Each test
below runs one consumer on every registered head (a newly registered head is covered
without editing this file) and checks that it works, or that it refuses the head with a
one-line ConfigError naming the fix. Sizes are tiny: the whole file runs in seconds.
"""

from __future__ import annotations

import copy
import inspect
import math
import re
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from drillbook.analysis import DRILL_TOL, log_prob_chunks, matrix_rank, rank_of
from drillbook.configs import (
    Config,
    DataConfig,
    HeadConfig,
    ModelConfig,
    TrainConfig,
    get_config,
    get_nmt_config,
    list_configs,
)
from drillbook.data import load_corpus_from_files
from drillbook.errors import ConfigError
from drillbook.experiments import BENCH_HEADS, TABLES, head_cost
from drillbook.experiments.bench.heads import fit_layers
from drillbook.experiments.bench.model import compare_models, model_cost
from drillbook.experiments.bench.sweep import greedy_decode as head_greedy
from drillbook.heads import (
    HEADS,
    DistributionHead,
    Features,
    MixtureHead,
    SoftmaxFamilyHead,
    VectorHead,
    build_head,
)
from drillbook.models import Encoder, EncoderOutput, LanguageModel, build_model, param_report
from drillbook.nmt import load_parallel_from_files
from drillbook.nmt.decode import beam_search, greedy_decode, translate_pairs
from drillbook.nmt.model import Seq2Seq
from drillbook.plotting import HEAD_COLORS
from drillbook.train import LanguageModelTrainer, NMTTrainer, evaluate
from drillbook.train.lm import split_stream
from drillbook.train.run_files import LoadedRun
from drillbook.train.tasks.language_model import lm_analyses
from drillbook.train.tasks.translation import translation_analyses
from drillbook.train.translation import TranslationVocabs

pytestmark = pytest.mark.usefixtures("one_thread")

DATA = Path(__file__).parent / "data"
KINDS = sorted(HEADS)
V, D = 11, 8
#: layers the tiny AWD-LSTM exposes: the embedding and two LSTM layers
N_LAYERS = 3
BOS, EOS = 2, 3


def tiny(kind: str) -> dict:
    """The options each head declares to shrink its paper-sized defaults."""
    return HEADS[kind].tiny_options()


def one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert message and "\n" not in message
    return message


def make_head(kind: str, **extra):
    """``kind`` at size (V, D), with the embedding it may share and the layer sizes it
    may read."""
    options = {**tiny(kind), **extra}
    if HEADS[kind].reads_layers:
        options.setdefault("layer_sizes", [D] * N_LAYERS)
    return build_head(kind, vocab_size=V, d_hidden=D, embedding=nn.Embedding(V, D), **options)


def random_features(t: int, b: int) -> Features:
    """``(t, b, D)`` features with all ``N_LAYERS`` layers, for heads that read them."""
    layers = tuple(torch.randn(t, b, D) for _ in range(N_LAYERS))
    return Features(layers[-1], layers)


# ------------------------------------------------------------------ declarations
@pytest.mark.parametrize("kind", KINDS)
def test_declared_options_are_the_constructor_keywords(kind):
    """build_head trusts ``options``; it must list exactly the keyword-only parameters."""
    cls = HEADS[kind]
    params = inspect.signature(cls.__init__).parameters.values()
    keywords = {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert set(cls.options) == keywords and len(cls.options) == len(keywords)
    assert cls.kind == kind


@pytest.mark.parametrize("kind", KINDS)
def test_declarations_match_what_the_head_does(kind):
    cls = HEADS[kind]
    head = make_head(kind).eval()
    feats = random_features(2, 3)
    if cls.shares_embedding:
        with pytest.raises(ValueError, match="pass embedding="):
            build_head(kind, vocab_size=V, d_hidden=D, **tiny(kind))
        assert head.shared_parameters()
    else:  # built without an embedding, and owns all its parameters
        bare = build_head(kind, vocab_size=V, d_hidden=D, **tiny(kind))
        assert bare.param_counts().shared == 0
    with torch.no_grad():
        if cls.is_distribution:
            torch.testing.assert_close(head.log_prob(feats).logsumexp(-1), torch.zeros(2, 3))
        else:
            with pytest.raises(NotImplementedError):
                head.log_prob(feats)
            assert head.predict_vectors(feats).shape == (2, 3, head.target_embeddings.shape[1])
            assert head.decode(feats).shape == (2, 3)
        if cls.has_logits:
            torch.testing.assert_close(head.logits(feats).log_softmax(-1), head.log_prob(feats))
        if cls.is_mixture:
            weights = head.mixture_weights(feats)
            assert weights.shape == (2, 3, head.n_vectors)
            torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))
    assert not (cls.has_logits and cls.is_mixture)
    assert cls.is_distribution or not (cls.has_logits or cls.is_mixture)
    assert not cls.reads_layers or head.layer_sizes == [D] * N_LAYERS
    # the flags are what the types say
    assert cls.is_distribution is issubclass(cls, DistributionHead) is not issubclass(
        cls, VectorHead)
    assert cls.has_logits is issubclass(cls, SoftmaxFamilyHead)
    assert cls.is_mixture is issubclass(cls, MixtureHead)


@pytest.mark.parametrize("kind", KINDS)
def test_what_the_package_derives_from_each_head(kind):
    """The tutorial config, the cpu-scale rows, the benchmark entries and the colour of a
    head all come from what its class declares."""
    cls = HEADS[kind]
    assert re.fullmatch(r"#[0-9a-f]{6}", HEAD_COLORS[kind])
    bench = {name: entry for name, entry in BENCH_HEADS.items() if entry[0] == kind}
    assert list(bench) == [kind + suffix for suffix in cls.bench]
    for _, options in bench.values():  # each entry builds, as bench heads builds it
        options = fit_layers(options, N_LAYERS)
        if cls.reads_layers:
            options["layer_sizes"] = [D] * N_LAYERS
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # vMF's random table
            build_head(kind, vocab_size=V, d_hidden=D, embedding=nn.Embedding(V, D),
                       **options)
    name = f"tutorial/ptb-{kind}"
    rows = [r.name for r in TABLES["cpu-scale"] if r.config == name]
    if not cls.is_distribution:
        assert name not in list_configs() and rows == []
        return
    config = get_config(name)
    assert config.head == HeadConfig(kind, cls.tutorial_options())
    report = param_report(config)  # the model builds (on the meta device)
    assert report["output_layer_dedicated"] > 0
    assert rows == [kind + suffix for suffix in cls.cpu_scale]


# ------------------------------------------------------------------ build_head sizes
@pytest.mark.parametrize("arg", ["vocab_size", "d_hidden"])
@pytest.mark.parametrize("bad", [2.7, "12", True, 0, -3, None, np.float64(4.0)])
def test_build_head_sizes_must_be_positive_integers(arg, bad):
    sizes = {"vocab_size": V, "d_hidden": D, arg: bad}
    with pytest.raises(ConfigError) as err:
        build_head("softmax", **sizes)
    assert one_line(err) == f"build_head: {arg} must be a positive integer, got {bad!r}"


def test_build_head_message_for_a_float_vocabulary_size():
    with pytest.raises(ConfigError) as err:
        build_head("tied", vocab_size=2.7, d_hidden=D, embedding=nn.Embedding(3, D))
    assert str(err.value) == "build_head: vocab_size must be a positive integer, got 2.7"


def test_numpy_integers_are_sizes():
    head = build_head("tied", vocab_size=np.int64(V), d_hidden=np.int32(D),
                      embedding=nn.Embedding(V, D))
    assert type(head.vocab_size) is int and type(head.d_hidden) is int
    assert (head.vocab_size, head.d_hidden) == (V, D)


@pytest.mark.parametrize("kind", KINDS)
def test_every_head_constructor_checks_its_sizes(kind):
    cls = HEADS[kind]
    emb = {"embedding": nn.Embedding(V, D)} if cls.shares_embedding else {}
    with pytest.raises(ConfigError) as err:
        cls(2.7, D, **emb)
    assert one_line(err) == f"{cls.__name__}: vocab_size must be a positive integer, got 2.7"
    with pytest.raises(ConfigError, match=rf"^{cls.__name__}: d_hidden must be a positive "
                                          r"integer, got '8'$"):
        cls(V, "8", **emb)


# ------------------------------------------------------------------ language model
def lm_config(kind: str) -> Config:
    return Config(
        name="test/consumers", data=DataConfig("tiny"),
        model=ModelConfig(emsize=D, nhid=6, nlayers=N_LAYERS - 1, dropout=0.1, dropouth=0.1,
                          dropouti=0.1, dropoute=0.1, wdrop=0.1),
        head=HeadConfig(kind, tiny(kind)),
        train=TrainConfig(batch_size=2, eval_batch_size=2, bptt=5, variable_bptt=False,
                          lr=1.0, epochs=1, checkpoint_minutes=1e6, seed=0))


def lm_corpus():
    return load_corpus_from_files({s: DATA / "tiny" / f"{s}.txt"
                                   for s in ("train", "valid", "test")}, name="tiny")


@pytest.mark.parametrize("kind", KINDS)
def test_language_model_trains_evaluates_and_streams_its_log_probabilities(kind, tmp_path):
    config, corpus = lm_config(kind), lm_corpus()
    if not HEADS[kind].is_distribution:
        with pytest.raises(ConfigError) as err:
            build_model(config, len(corpus.vocab))
        assert f"the {kind!r} head predicts word vectors" in one_line(err)
        assert "set head.kind to a distribution head" in str(err.value)
        with pytest.raises(ConfigError, match="cannot end a language model"):
            LanguageModelTrainer(config, tmp_path / "run", device="cpu", corpus=corpus,
                                 progress=False)
        return
    trainer = LanguageModelTrainer(config, tmp_path / "run", device="cpu", corpus=corpus,
                                   progress=False)
    head = trainer.model.head
    before = {n: p.detach().clone() for n, p in head.named_parameters()}
    status = trainer.fit(max_steps=2)
    assert status.reason == "steps" and trainer.step == 2
    assert all(not torch.equal(p, before[n]) for n, p in head.named_parameters())

    model, data = trainer.model, trainer.valid_data
    loss, count = evaluate(model, data, bptt=5)
    assert count == data[1:].numel()
    # the log-probability matrix streamed for the rank analysis: normalised rows, one per
    # target, in stream order; its mean NLL of the targets is what evaluate reports
    logp = torch.cat(list(log_prob_chunks(model, data, bptt=5)))
    assert logp.shape == (count, len(corpus.vocab)) and logp.dtype == torch.float64
    # (computed in float32, so normalised to float32 precision)
    torch.testing.assert_close(logp.logsumexp(-1), torch.zeros(count, dtype=torch.float64),
                               atol=1e-6, rtol=0)
    nll = -logp.gather(1, data[1:].reshape(-1, 1)).mean()
    assert loss == pytest.approx(float(nll), rel=1e-5)
    rank = matrix_rank(log_prob_chunks(model, data, bptt=5), tol=DRILL_TOL, method="gram")
    assert 0 <= rank <= min(count, len(corpus.vocab))


class LastLayerOnly(Encoder):
    """An encoder that exposes only its last layer (``layer_sizes`` empty)."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(V, D)
        self.d_out = D

    def forward(self, input: torch.Tensor, hidden=None) -> EncoderOutput:
        x = self.embedding(input)
        return EncoderOutput(Features(x), None, x)


@pytest.mark.parametrize("kind", KINDS)
def test_language_model_refuses_what_its_encoder_cannot_feed(kind):
    cls, encoder = HEADS[kind], LastLayerOnly()
    head = make_head(kind)
    if cls.is_distribution and not cls.reads_layers:
        model = LanguageModel(encoder, head)
        out = model(torch.randint(0, V, (4, 2)))
        assert model.head.loss(out.features, torch.randint(0, V, (4, 2))).isfinite()
        return
    with pytest.raises(ConfigError) as err:
        LanguageModel(encoder, head)
    expected = "exposes none" if cls.is_distribution else "predicts word vectors"
    assert expected in one_line(err)


# ------------------------------------------------------------------ translation
SRC_V = 13


def tiny_batch(gen: torch.Generator):
    """Four source sentences (one of length 1, one padded) and their targets."""
    lengths = torch.tensor([5, 3, 1, 4])
    src = torch.randint(4, SRC_V, (5, 4), generator=gen)
    for b, n in enumerate(lengths.tolist()):
        src[n:, b] = 0
    tgt = torch.randint(4, V, (4, 4), generator=gen)
    tgt_in = torch.cat([torch.full((1, 4), BOS), tgt])
    tgt_out = torch.cat([tgt, torch.full((1, 4), EOS)])
    return src, lengths, tgt_in, tgt_out


def seq2seq(kind: str) -> Seq2Seq:
    return Seq2Seq(SRC_V, V, emb_size=D, hidden=D, dropout=0.1, head=kind,
                   head_options=tiny(kind))


@pytest.mark.parametrize("kind", KINDS)
def test_translation_model_trains_and_decodes(kind, gen):
    cls = HEADS[kind]
    if cls.reads_layers:
        with pytest.raises(ConfigError) as err:
            seq2seq(kind)
        assert "translation decoder hands its head only the attentional state" in one_line(err)
        return
    model = seq2seq(kind)
    src, lengths, tgt_in, tgt_out = tiny_batch(gen)
    head_before = {n: p.detach().clone() for n, p in model.head.named_parameters()}
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()
    loss = model.loss(src, lengths, tgt_in, tgt_out)
    loss.backward()
    optimizer.step()
    assert loss.isfinite()
    assert all(not torch.equal(p, head_before[n]) for n, p in model.head.named_parameters())
    assert model.is_continuous is (not cls.is_distribution)

    # the first greedy choice is the best next-token score after <bos>
    model.eval()
    with torch.no_grad():
        features, _ = model.decode(torch.full((1, 4), BOS), model.encode(src, lengths))
        scores = model.next_token_scores(features[-1])
        if cls.is_distribution:  # log-probabilities
            torch.testing.assert_close(scores.logsumexp(-1), torch.zeros(4))
        else:  # the nearest word by cosine, which the head's own decoder also finds
            assert torch.equal(scores.argmax(-1), model.head.decode(features[-1]))
        scores[:, [0, BOS]] = float("-inf")
    greedy = greedy_decode(model, src, lengths, bos=BOS, eos=EOS, max_len=6)
    assert len(greedy) == 4
    assert all(len(s) <= 6 and 0 not in s and BOS not in s and EOS not in s for s in greedy)
    assert [s[0] if s else EOS for s in greedy] == scores.argmax(-1).tolist()

    if cls.is_distribution:
        assert beam_search(model, src, lengths, bos=BOS, eos=EOS, beam=1, max_len=6) == greedy
        wide = beam_search(model, src, lengths, bos=BOS, eos=EOS, beam=3, max_len=6)
        assert len(wide) == 4 and all(0 not in s and BOS not in s for s in wide)
    else:
        with pytest.raises(ConfigError) as err:
            beam_search(model, src, lengths, bos=BOS, eos=EOS, beam=3)
        assert "decodes greedily by nearest neighbour" in one_line(err)


def tiny_translation(kind: str):
    """The tiny parallel corpus, a tiny translation config with ``kind`` as its head (batch
    4), and random target word vectors for a continuous head (None for the others)."""
    corpus = load_parallel_from_files(
        {s: (DATA / "tiny_parallel" / f"{s}.de", DATA / "tiny_parallel" / f"{s}.en")
         for s in ("train", "valid", "test")}, "de", "en")
    config = get_nmt_config("multi30k/de-en-softmax")
    config.data.min_freq = 1
    config.model.emb_size = config.model.hidden = D
    config.head = HeadConfig(kind, tiny(kind))
    config.train.batch_size = 4
    vectors = None
    if not HEADS[kind].is_distribution:  # a continuous head needs target word vectors
        words = sorted({w for _, tgt in corpus.train for w in tgt})
        vectors = (words, torch.randn(len(words), 4).numpy())
    return corpus, config, vectors


@pytest.mark.parametrize("kind", KINDS)
def test_translation_trainer_with_negative_sampling(kind, tmp_path):
    """The trainer either takes a sampled-softmax step or refuses the head up front."""
    corpus, config, vectors = tiny_translation(kind)
    config.train.negative_sampling = 50.0
    config.train.epochs = 1
    config.train.max_batches_per_epoch, config.train.max_eval_pairs = 2, 2
    config.train.max_len = 4

    def trainer() -> NMTTrainer:
        return NMTTrainer(config, tmp_path / "run", device="cpu", corpus=corpus,
                          target_vectors=vectors, progress=False)

    if not HEADS[kind].has_logits:
        with pytest.raises(ConfigError) as err:
            trainer()
        assert f"the {kind!r} head" in one_line(err)
        assert not (tmp_path / "run").exists()  # refused before anything was written
        return
    t = trainer()
    sampled = []  # the sizes of the candidate sets the sampled softmax scored
    scores_of = t.model.head.logits_subset
    t.model.head.logits_subset = lambda f, ids: sampled.append(len(ids)) or scores_of(f, ids)
    record = t.fit().record
    assert record["epoch"] == 1 and math.isfinite(record["train_loss"])
    assert len(sampled) == 2 and all(n < len(t.tgt_vocab) for n in sampled)


@pytest.mark.parametrize("kind", KINDS)
def test_language_model_analyses_of_a_result_file(kind, tmp_path):
    """What ``reproduce`` writes into a language model's result file for the chapters:
    per-band and per-word losses that add up to the evaluated loss, the mixture's usage
    for a mixture head, and the rank against numpy's."""
    if not HEADS[kind].is_distribution:
        return  # refused by the language model (the test above)
    config, corpus = lm_config(kind), lm_corpus()
    trainer = LanguageModelTrainer(config, tmp_path / "run", device="cpu", corpus=corpus,
                                   progress=False)
    trainer.fit(max_steps=2)
    model = trainer.model.eval()
    out = lm_analyses(LoadedRun(config, model, corpus), "valid", data=corpus)
    stream = split_stream(config, corpus, "valid")
    loss, count = evaluate(model, stream, bptt=config.train.bptt)
    nll = sum(s for s, _ in out["word_nll"].values())
    assert sum(n for _, n in out["word_nll"].values()) == count
    assert nll / count == pytest.approx(loss, rel=1e-4)
    banded = [b for b in out["frequency_bands"] if b["tokens"]]
    in_bands = sum(b["tokens"] for b in banded)
    assert 0 < in_bands <= count  # words never seen in training are in no band
    assert sum(b["mean_nll"] * b["tokens"] for b in banded) <= nll + 1e-3
    assert ("mixture" in out) is HEADS[kind].is_mixture
    if HEADS[kind].is_mixture:
        assert sum(out["mixture"]["usage"]) == pytest.approx(1.0, abs=1e-4)
        assert 0 <= out["mixture"]["entropy"] <= out["mixture"]["max_entropy"] + 1e-9

    logp = torch.cat(list(log_prob_chunks(copy.deepcopy(model).double(), stream,
                                          config.train.bptt))).numpy()
    sv = np.linalg.svd(logp, compute_uv=False)
    ranks = rank_of(model, stream, config.train.bptt, positions=count)
    assert ranks["rank_positions"] == count
    assert ranks["rank_numpy_tol"] == np.linalg.matrix_rank(logp)
    assert ranks["rank_tol_1"] == int((sv > DRILL_TOL).sum())
    gram = rank_of(model, stream, config.train.bptt, positions=None)  # the Gram route
    assert gram == {"rank_tol_1": ranks["rank_tol_1"], "rank_positions": count}


@pytest.mark.parametrize("kind", KINDS)
def test_translation_analyses_of_a_result_file(kind, tmp_path, monkeypatch):
    """Rare-word F1 of greedy translations, decoding speed and examples, for every head a
    translation model takes; the BLEU of a beam of 5 for every head with a distribution
    over words (scored here by a stand-in for the Multi30k scorer, which reads the real
    references), and none for a vMF head."""
    from drillbook.train.tasks.translation import analyses

    scored = []

    def scorer(hyps, *, split, lang, download):
        scored.append((list(hyps), split, lang))
        return types.SimpleNamespace(score=12.5, signature="stand-in")

    monkeypatch.setattr(analyses, "multi30k_bleu", scorer)
    if HEADS[kind].reads_layers:
        return  # refused by the translation model (test_translation_model_trains_and_decodes)
    corpus, config, vectors = tiny_translation(kind)
    config.train.max_len = 5
    if vectors is not None:
        config.data.target_embeddings = "glove-50d"  # handed over as target_vectors
    t = NMTTrainer(config, tmp_path / "run", device="cpu", corpus=corpus,
                   target_vectors=vectors, progress=False)
    run = LoadedRun(config, t.model.eval(), TranslationVocabs(t.src_vocab, t.tgt_vocab))
    out = translation_analyses(run, "valid", data=corpus, max_items=3, examples=2)
    pairs = corpus.split("valid")[:3]
    assert sum(b["reference_tokens"] for b in out["rare_word_f1"]) == sum(
        len(g) for _, g in pairs)
    hyps = translate_pairs(run.model, pairs, t.src_vocab, t.tgt_vocab, max_len=5)
    assert sum(b["hypothesis_tokens"] for b in out["rare_word_f1"]) == sum(map(len, hyps))
    assert [e["hypothesis"] for e in out["examples"]] == [
        " ".join(hyps[i]) for i, (s, g) in enumerate(pairs) if len(s) <= 12 and len(g) <= 12
    ][:2]
    assert out["sentences_per_second"] > 0
    if not run.model.head.is_distribution:
        assert "beam" not in out and not scored
        return
    beamed = translate_pairs(run.model, pairs, t.src_vocab, t.tgt_vocab, max_len=5,
                             beam=analyses.BEAM)
    assert scored == [(beamed, "valid", config.data.tgt)]
    assert out["beam"]["beam"] == 5 and out["beam"]["bleu"] == 12.5
    assert out["beam"]["bleu_signature"] == "stand-in" and out["beam"]["sentences_per_second"] > 0


# ------------------------------------------------------------------ cost benchmark
@pytest.mark.parametrize("kind", KINDS)
def test_bench_measures_every_head_alone(kind):
    cls = HEADS[kind]
    options = tiny(kind)
    if cls.reads_layers:
        options["layer_sizes"] = [D] * N_LAYERS
    tokens = 16
    cost = head_cost(kind, vocab_size=V, d=D, tokens=tokens, repeats=1, warmup=0, **options)
    head = make_head(kind)
    assert cost.tokens == tokens and cost.train_step_s > 0 and cost.eval_token_s > 0
    assert cost.saved_bytes > 0
    assert cost.param_bytes == 4 * head.param_counts().dedicated
    components = head.n_vectors if cls.is_mixture else 1
    assert cost.score_bytes == (components * tokens * V * 4 if cls.is_distribution else 0)

    # the sweep's greedy decoding: the most probable word, or the nearest vector
    feats = random_features(3, 2)
    with torch.no_grad():
        expected = (head.log_prob(feats) if cls.is_distribution else head.scores(feats))
    assert torch.equal(head_greedy(head.eval(), feats), expected.argmax(-1))


def test_model_bench_skips_a_head_that_cannot_end_a_language_model():
    settings = {"encoder_config": "tutorial/ptb-tied",
                "overrides": ["model.emsize=4", "model.nhid=4"], "batch_size": 1, "bptt": 2,
                "eval_batch_size": 1, "repeats": 1, "warmup": 1}
    with pytest.raises(ConfigError, match="'vmf' head predicts word vectors"):
        model_cost("vmf-300", "ptb", **settings)
    rows = compare_models(["vmf-300"], "ptb", **settings)
    assert [r["name"] for r in rows] == ["tied", "vmf-300"]
    assert rows[1]["skipped"] == "not a language-model head (no distribution over words)"
    assert "train_step_s" not in rows[1] and rows[0]["train_ratio"] == 1.0
