"""MoS, DOC and sigsoftmax: equivalences, log-space mixing, chunking, beta, counts."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from drillbook.analysis import (
    DRILL_TOL,
    head_flops,
    log_prob_chunks,
    matrix_rank,
    mixture_diagnostics,
    singular_values,
)
from drillbook.configs import Config, DataConfig, HeadConfig, ModelConfig, TrainConfig, get_config
from drillbook.data import load_corpus_from_files
from drillbook.errors import ConfigError
from drillbook.experiments import head_cost
from drillbook.heads import DOCHead, Features, MoSHead, SigSoftmaxHead, build_head
from drillbook.heads.mixture import (
    coefficient_of_variation,
    context_mixture_log_prob,
    mixture_log_prob,
    mixture_log_prob_reference,
)
from drillbook.models import param_report
from drillbook.nmt.decode import beam_search, greedy_decode
from drillbook.nmt.model import Seq2Seq
from drillbook.papers import paper_value
from drillbook.train import LanguageModelTrainer

F64 = torch.float64
V, D, DH = 23, 5, 7


def emb64() -> nn.Embedding:
    return nn.Embedding(V, D).double()


def test_mos_with_one_expert_is_a_tanh_projected_tied_softmax():
    emb = emb64()
    head = MoSHead(V, DH, embedding=emb, n_experts=1).double().eval()
    with torch.no_grad():
        head.bias.normal_()
    h = torch.randn(4, 3, DH, dtype=F64)
    expected = torch.log_softmax(torch.tanh(head.latent(h)) @ emb.weight.T + head.bias, -1)
    torch.testing.assert_close(head.log_prob(h), expected)


def test_doc_with_every_vector_from_the_last_layer_is_mos():
    emb = emb64()
    mos = MoSHead(V, DH, embedding=emb, n_experts=4).double().eval()
    doc = DOCHead(V, DH, embedding=emb, vectors_per_layer=[0, 0, 4], layer_sizes=[D, 9, DH],
                  cv_weight=0.0).double().eval()
    with torch.no_grad():
        mos.bias.normal_()
        doc.bias.copy_(mos.bias)
        doc.projections["2"].load_state_dict(mos.latent.state_dict())
        doc.prior.load_state_dict(mos.prior.state_dict())
    h = torch.randn(6, 2, DH, dtype=F64)
    feats = Features(h, (torch.randn(6, 2, D, dtype=F64), torch.randn(6, 2, 9, dtype=F64), h))
    torch.testing.assert_close(doc.log_prob(feats), mos.log_prob(h))


def test_doc_reads_the_middle_layers():
    emb = emb64()
    doc = DOCHead(V, DH, embedding=emb, vectors_per_layer=[1, 2, 3], layer_sizes=[D, 9, DH])
    doc = doc.double().eval()
    h = torch.randn(4, 2, DH, dtype=F64)
    layers = [torch.randn(4, 2, D, dtype=F64), torch.randn(4, 2, 9, dtype=F64), h]
    base = doc.log_prob(Features(h, tuple(layers)))
    layers[1] = layers[1] + 1.0  # move a middle layer: the distribution moves
    assert not torch.allclose(doc.log_prob(Features(h, tuple(layers))), base)
    with pytest.raises(ValueError, match="needs Features with all 3 layer outputs"):
        doc.log_prob(h)
    with pytest.raises(ValueError, match="layer 1 has 8 features, expected 9"):
        doc.log_prob(Features(h, (layers[0], torch.randn(4, 2, 8, dtype=F64), h)))
    with pytest.raises(ValueError, match="pass layer_sizes"):
        DOCHead(V, DH, embedding=emb, vectors_per_layer=[1, 0, 3])
    with pytest.raises(ValueError, match="3 entries but the encoder has 2 layers"):
        DOCHead(V, DH, embedding=emb, vectors_per_layer=[1, 0, 3], layer_sizes=[D, DH])


def test_log_space_mixing_equals_probability_space_where_finite_and_stays_finite():
    torch.manual_seed(0)
    vectors = torch.randn(10, 3, D, dtype=F64)
    log_prior = torch.log_softmax(torch.randn(10, 3, dtype=F64), -1)
    weight, bias = torch.randn(V, D, dtype=F64), torch.randn(V, dtype=F64)
    torch.testing.assert_close(mixture_log_prob(vectors, log_prior, weight, bias),
                               mixture_log_prob_reference(vectors, log_prior, weight, bias))
    # scores so spread out that the probabilities underflow to 0 in float64
    big = 400 * vectors
    ref = mixture_log_prob_reference(big, log_prior, weight, bias)
    exact = mixture_log_prob(big, log_prior, weight, bias)
    assert torch.isinf(ref).any() and torch.isfinite(exact).all()
    normal = ref > -300  # where p is a normal float64 far from underflow, they agree
    assert normal.sum() > 20
    torch.testing.assert_close(exact[normal], ref[normal])
    torch.testing.assert_close(exact.logsumexp(-1), torch.zeros(10, dtype=F64))


def test_coefficient_of_variation_paper_form_by_hand():
    prior = torch.tensor([[0.5, 0.5], [1.0, 0.0]])  # totals B = (1.5, 0.5)
    assert float(coefficient_of_variation(prior)) == pytest.approx(0.5)  # std .5 / mean 1
    assert float(coefficient_of_variation(prior, "paper")) == pytest.approx(0.5)
    even = torch.full((4, 3, 4), 0.25, dtype=F64)
    assert float(coefficient_of_variation(even, "paper")) == 0.0
    assert float(coefficient_of_variation(even, "authors")) == 0.0


def test_coefficient_of_variation_authors_form_by_hand():
    # (T, B, J) = (2, 2, 2); per-sequence sums S = [[1.5, 0.5], [1, 1]], mean 1,
    # unbiased variance (0.25 + 0.25 + 0 + 0) / 3 = 1/6, (J - 1) = 1: beta = 1/6.
    # The paper's batch totals (2.5, 1.5): std 0.5 / mean 2, beta = 1/16.
    prior = torch.tensor([[[0.5, 0.5], [0.5, 0.5]], [[1.0, 0.0], [0.5, 0.5]]], dtype=F64)
    assert float(coefficient_of_variation(prior, "authors")) ** 2 == pytest.approx(1 / 6)
    assert float(coefficient_of_variation(prior, "paper")) ** 2 == pytest.approx(1 / 16)


def _dirichlet_prior(t: int, b: int, j: int, seed: int) -> np.ndarray:
    """Mixture weights ``(T, B, J)`` with a per-sequence preference (as trained ones have)."""
    rng = np.random.default_rng(seed)
    taste = rng.dirichlet(np.ones(j), size=b)  # (B, J): each sequence leans its own way
    logits = np.log(taste)[None] + 0.5 * rng.standard_normal((t, b, j))
    p = np.exp(logits)
    return p / p.sum(-1, keepdims=True)


def test_coefficient_of_variation_both_forms_against_numpy():
    pi = _dirichlet_prior(7, 4, 5, seed=0)
    # the paper (Eqs. 12-13): J batch totals, population std over mean
    totals = pi.sum(axis=(0, 1))
    paper = totals.std(ddof=0) / totals.mean()
    # the authors' code: (B, J) per-sequence sums, sqrt((J-1) var_unbiased) over mean
    s = pi.sum(axis=0)
    authors = np.sqrt((5 - 1) * s.var(ddof=1)) / s.mean()
    got = {form: float(coefficient_of_variation(torch.from_numpy(pi), form))
           for form in ("paper", "authors")}
    assert got["paper"] == pytest.approx(paper, rel=1e-12)
    assert got["authors"] == pytest.approx(authors, rel=1e-12)
    # one sequence: the authors' beta is J times the paper's
    one = torch.from_numpy(pi[:, :1])
    assert float(coefficient_of_variation(one, "authors")) ** 2 == pytest.approx(
        5 * float(coefficient_of_variation(one, "paper")) ** 2, rel=1e-12)
    with pytest.raises(ValueError, match="unknown coefficient-of-variation form 'eq13'"):
        coefficient_of_variation(one, "eq13")


def test_authors_beta_is_much_larger_at_the_paper_shape():
    """PTB: bptt 70, batch 20, J = 20. lambda_beta = 0.001 was tuned on the authors' form,
    so which form is the default decides how strongly DOC is regularised."""
    pi = torch.from_numpy(_dirichlet_prior(70, 20, 20, seed=1))
    ratio = (coefficient_of_variation(pi, "authors") / coefficient_of_variation(pi, "paper")) ** 2
    assert float(ratio) > 100  # the (J - 1) factor times the spread between sequences
    emb = emb64()
    assert DOCHead(V, DH, embedding=emb, vectors_per_layer=[0, 3]).cv_form == "authors"


@pytest.mark.parametrize("form", ["authors", "paper"])
def test_doc_regularizer_is_lambda_beta_and_mos_has_none(form):
    emb = emb64()
    doc = DOCHead(V, DH, embedding=emb, vectors_per_layer=[0, 3], cv_weight=0.01,
                  cv_form=form).double()
    h = torch.randn(5, 2, DH, dtype=F64)
    pi = doc.mixture_weights(h).detach().numpy()  # (T, B, J)
    if form == "paper":
        totals = pi.sum(axis=(0, 1))
        beta = totals.var(ddof=0) / totals.mean() ** 2
    else:
        s = pi.sum(axis=0)
        beta = (3 - 1) * s.var(ddof=1) / s.mean() ** 2
    assert float(doc.regularizer(h).detach()) == pytest.approx(0.01 * beta, rel=1e-10)
    assert MoSHead(V, DH, embedding=emb).regularizer(h) is None
    with pytest.raises(ValueError, match="unknown cv_form 'eq13'"):
        DOCHead(V, DH, embedding=emb, vectors_per_layer=[0, 3], cv_form="eq13")


def test_doc_projection_biases_start_at_zero():
    emb = emb64()
    doc = DOCHead(V, DH, embedding=emb, vectors_per_layer=[1, 2, 3], layer_sizes=[D, 9, DH])
    assert set(doc.projections) == {"0", "1", "2"}
    for proj in doc.projections.values():
        assert torch.count_nonzero(proj.bias) == 0
        assert torch.count_nonzero(proj.weight) == proj.weight.numel()
    assert doc.prior.bias is None and torch.count_nonzero(doc.bias) == 0


@pytest.mark.parametrize(("kind", "extra"), [("mos", {}), ("doc", {}),
                                           ("mos", {"mix": "logits"})],
                         ids=["mos", "doc", "mos-logits"])
def test_chunked_and_unchunked_agree_in_values_and_gradients(kind, extra):
    emb = emb64()
    opts = ({"n_experts": 3, **extra} if kind == "mos"
            else {"vectors_per_layer": [1, 3], "layer_sizes": [D, DH], "cv_weight": 0.0})
    torch.manual_seed(0)
    whole = build_head(kind, vocab_size=V, d_hidden=DH, embedding=emb, **opts).double()
    chunked = build_head(kind, vocab_size=V, d_hidden=DH, embedding=emb, chunk_size=4,
                         **opts).double()
    chunked.load_state_dict(whole.state_dict())
    h = torch.randn(5, 3, DH, dtype=F64)
    feats = Features(h, (torch.randn(5, 3, D, dtype=F64), h))
    y = torch.randint(0, V, (5, 3))
    y[0, 0] = -100
    torch.testing.assert_close(chunked.log_prob(feats), whole.log_prob(feats))
    grads = []
    for head in (whole, chunked):
        head.zero_grad()
        head.loss(feats, y).backward()
        grads.append({n: p.grad.clone() for n, p in head.named_parameters()})
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], msg=name)
    expected = -whole.log_prob(feats)[y != -100].gather(-1, y[y != -100][:, None]).mean()
    torch.testing.assert_close(chunked.loss(feats, y), expected)


def test_gradcheck_doc_through_every_layer(gradcheck_head):
    emb = emb64()
    head = DOCHead(V, DH, embedding=emb, vectors_per_layer=[1, 2], layer_sizes=[D, DH],
                   chunk_size=2).double()
    h0 = torch.randn(3, D, dtype=F64, requires_grad=True)
    h = torch.randn(3, DH, dtype=F64, requires_grad=True)
    y = torch.tensor([0, 4, V - 1])
    assert torch.autograd.gradcheck(lambda a, b: head.loss(Features(b, (a, b)), y), (h0, h))


def test_locked_masks_doc_shares_over_vectors_mos_does_not():
    emb = nn.Embedding(V, D)
    h = torch.randn(6, 4, DH)
    doc = DOCHead(V, DH, embedding=emb, vectors_per_layer=[0, 3], latent_dropout=0.5).train()
    mos = MoSHead(V, DH, embedding=emb, n_experts=3, latent_dropout=0.5).train()
    for head, shared in ((doc, True), (mos, False)):
        torch.manual_seed(1)
        vectors, _ = head.components(h)
        dropped = vectors == 0
        assert torch.equal(dropped, dropped[:1].expand_as(dropped))  # shared over time
        same_over_j = torch.equal(dropped, dropped[:, :, :1].expand_as(dropped))
        assert same_over_j == shared


@pytest.mark.parametrize(("name", "vocab", "paper_m"), [
    ("ptb/awd-lstm-mos", 10_000, 22), ("ptb/awd-lstm-doc", 10_000, 23),
    ("wt2/awd-lstm-mos", 33_278, 35), ("wt2/awd-lstm-doc", 33_278, 37)])
def test_parameter_counts_round_to_the_papers(name, vocab, paper_m):
    """MoS and DOC print whole millions, rounded (MoS PTB: 21,500,620 -> 22M)."""
    report = param_report(get_config(name), vocab)
    assert round(report["total"] / 1e6) == paper_m == paper_value(get_config(name).paper,
                                                                 "params_m")


def test_sigsoftmax_is_exp_times_sigmoid_normalised_and_escapes_the_rank_ceiling():
    emb = emb64()
    head = SigSoftmaxHead(V, D, embedding=emb).double()
    h = torch.randn(200, D, dtype=F64)
    z = h @ emb.weight.T + head.bias
    p = torch.exp(z) * torch.sigmoid(z)
    torch.testing.assert_close(head.log_prob(h), torch.log(p / p.sum(-1, keepdim=True)))
    assert head.param_counts().dedicated == V  # nothing beyond the tied head
    with torch.no_grad():
        rank = singular_values(head.log_prob(h)).rank()
    assert rank > D + 2 and rank == V
    with torch.no_grad():
        assert math.isclose(float(head.log_prob(h).exp().sum(-1).mean()), 1.0)


def test_with_more_contexts_than_words_mixtures_reach_the_vocabulary_size():
    """DOC Table 5 in miniature: tied stays at d + 2, MoS and DOC reach V (numpy's
    tolerance, float64)."""
    torch.manual_seed(0)
    emb = emb64()
    h = torch.randn(200, DH, dtype=F64)
    h0 = torch.randn(200, D, dtype=F64)
    tied = build_head("tied", vocab_size=V, d_hidden=D, embedding=emb).double()
    mos = MoSHead(V, DH, embedding=emb, n_experts=3).double()
    doc = DOCHead(V, DH, embedding=emb, vectors_per_layer=[1, 2],
                  layer_sizes=[D, DH]).double()
    with torch.no_grad():
        tied.bias.normal_()
        ranks = {"tied": singular_values(tied.log_prob(h0)).rank(),
                 "mos": singular_values(mos.log_prob(h)).rank(),
                 "doc": singular_values(doc.log_prob(Features(h, (h0, h)))).rank()}
    assert ranks == {"tied": D + 2, "mos": V, "doc": V}


# ------------------------------------------------------------------ mixture of contexts
def test_mixture_of_contexts_is_one_softmax_over_the_weighted_mean_context():
    """mix="logits" by hand: k_k = tanh(W_l h + b_l), pi = softmax(W_p h), and one softmax
    over E (sum_k pi_k k_k) + b, which is also the pi-average of the K logit vectors."""
    emb = emb64()
    head = MoSHead(V, DH, embedding=emb, n_experts=4, mix="logits").double().eval()
    with torch.no_grad():
        head.bias.normal_()
    h = torch.randn(6, 2, DH, dtype=F64)
    w_l, b_l, w_p = head.latent.weight, head.latent.bias, head.prior.weight
    k = torch.tanh(h @ w_l.T + b_l).reshape(6, 2, 4, D)
    pi = torch.softmax(h @ w_p.T, -1)
    k_bar = (pi[..., None] * k).sum(-2)
    by_hand = torch.log_softmax(k_bar @ emb.weight.T + head.bias, -1)
    with torch.no_grad():
        torch.testing.assert_close(head.log_prob(h), by_hand)
        logits = k @ emb.weight.T + head.bias  # (6, 2, 4, V): one logit vector per component
        torch.testing.assert_close(head.log_prob(h),
                                   torch.log_softmax((pi[..., None] * logits).sum(-2), -1))
        y = torch.randint(0, V, (6, 2))
        torch.testing.assert_close(head.loss(h, y), -by_hand.gather(-1, y[..., None]).mean())
        # the same parameters mixing probabilities give another distribution (MoS)
        mos = MoSHead(V, DH, embedding=emb, n_experts=4).double().eval()
        mos.load_state_dict(head.state_dict())
        by_hand_mos = torch.logsumexp(pi.log()[..., None] + logits.log_softmax(-1), dim=-2)
        torch.testing.assert_close(mos.log_prob(h), by_hand_mos)
        assert not torch.allclose(mos.log_prob(h), head.log_prob(h))
    assert head.n_softmaxes == 1 and mos.n_softmaxes == 4 == mos.n_vectors == head.n_vectors


@pytest.mark.parametrize("k", [2, 8])
def test_mixture_of_contexts_keeps_the_softmax_rank_bound_and_mos_does_not(k):
    """Random parameters and contexts, float64, more contexts than words: averaging the
    logits stays at d + 2 (numpy's tolerance and DRILL's), averaging the probabilities
    reaches V."""
    emb = emb64()
    moc = MoSHead(V, DH, embedding=emb, n_experts=k, mix="logits").double()
    with torch.no_grad():
        moc.bias.normal_()
        moc.latent.weight.mul_(3.0)  # spread the tanh over its range
    mos = MoSHead(V, DH, embedding=emb, n_experts=k).double()
    mos.load_state_dict(moc.state_dict())
    h = torch.randn(200, DH, dtype=F64)
    with torch.no_grad():
        low, high = singular_values(moc.log_prob(h)), singular_values(mos.log_prob(h))
        # the function agrees with its definition on these inputs, too
        vectors, log_prior = moc.components(h)
        torch.testing.assert_close(
            context_mixture_log_prob(vectors, log_prior, emb.weight, moc.bias), moc.log_prob(h))
    assert low.rank() == D + 2 and low.rank(DRILL_TOL) <= D + 2
    assert high.rank() == V


def test_mix_is_a_mos_option_and_is_checked():
    emb = emb64()
    assert "mix" in MoSHead.options and "mix" not in DOCHead.options
    head = build_head("mos", vocab_size=V, d_hidden=DH, embedding=emb, n_experts=2,
                      mix="logits")
    assert head.mix == "logits" and "mix='logits'" in repr(head)
    assert MoSHead(V, DH, embedding=emb).mix == "probs"
    with pytest.raises(ConfigError) as err:
        build_head("mos", vocab_size=V, d_hidden=DH, embedding=emb, mix="log")
    assert str(err.value) == ("the 'mos' head's option mix must be 'probs' (average the "
                              "softmaxes) or 'logits' (average the logits: a mixture of "
                              "contexts), got 'log'")
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['mix'\] for head 'doc'"):
        build_head("doc", vocab_size=V, d_hidden=DH, embedding=emb, vectors_per_layer=[0, 2],
                   mix="logits")
    with pytest.raises(ValueError, match="only the mos head takes mix"):
        head_flops("doc", vocab_size=V, d=D, tokens=4, mix="logits")


def test_gradcheck_mixture_of_contexts(gradcheck_head):
    head = MoSHead(V, DH, embedding=emb64(), n_experts=3, mix="logits").double()
    gradcheck_head(head, DH)


TINY_DATA = Path(__file__).parent / "data"


@pytest.mark.usefixtures("one_thread")
def test_a_mixture_of_contexts_runs_through_the_consumers(tmp_path, gen):
    """The option reaches every consumer through the config: the language model trains,
    streams a log-probability matrix of rank <= d + 2 (in float64: float32 rounding noise
    is not low-rank), its mixture weights are diagnosed, the cost benchmark counts one
    score matrix, and translation decodes with it."""
    corpus = load_corpus_from_files({s: TINY_DATA / "tiny" / f"{s}.txt"
                                     for s in ("train", "valid", "test")}, name="tiny")
    emsize, options = 4, {"n_experts": 3, "mix": "logits"}
    config = Config(
        name="test/moc", data=DataConfig("tiny"),
        model=ModelConfig(emsize=emsize, nhid=6, nlayers=2, dropout=0.1, dropouth=0.1,
                          dropouti=0.1, dropoute=0.1, wdrop=0.1),
        head=HeadConfig("mos", options),
        train=TrainConfig(batch_size=2, eval_batch_size=1, bptt=5, variable_bptt=False,
                          lr=1.0, epochs=1, checkpoint_minutes=1e6, seed=0))
    trainer = LanguageModelTrainer(config, tmp_path / "run", device="cpu", corpus=corpus,
                                   progress=False)
    assert trainer.model.head.mix == "logits"
    assert trainer.fit(max_steps=2).reason == "steps"
    model, data = trainer.model.double().eval(), trainer.valid_data
    n_words = len(corpus.vocab)
    assert data[1:].numel() > n_words > emsize + 2  # enough contexts to exceed d + 2
    rank = matrix_rank(log_prob_chunks(model, data, bptt=5), method="svd")
    assert rank <= emsize + 2
    diag = mixture_diagnostics(model, data, bptt=5)
    torch.testing.assert_close(float(diag.usage.sum()), 1.0, rtol=0, atol=1e-6)
    cost = head_cost("mos", vocab_size=n_words, d=emsize, tokens=16, repeats=1, warmup=0,
                     **options)
    assert cost.score_bytes == 16 * n_words * 4  # one (n, V) matrix, as a tied head
    flops = head_flops("mos", vocab_size=n_words, d=emsize, tokens=16, **options)
    assert flops.scores == head_flops("tied", vocab_size=n_words, d=emsize, tokens=16).scores

    src_v, tgt_v = 13, 11
    seq2seq = Seq2Seq(src_v, tgt_v, emb_size=emsize, hidden=emsize, dropout=0.1, head="mos",
                      head_options=options).eval()
    src = torch.randint(4, src_v, (5, 3), generator=gen)
    lengths = torch.tensor([5, 4, 2])
    greedy = greedy_decode(seq2seq, src, lengths, bos=2, eos=3, max_len=6)
    assert beam_search(seq2seq, src, lengths, bos=2, eos=3, beam=1, max_len=6) == greedy


@pytest.mark.parametrize("kind", ["mos", "doc"])
def test_mixtures_mix_in_float32_under_bf16_autocast(kind):
    """``train.amp=bf16``: the projections run in bf16, the log-space mixing stays
    float32, so the log-probabilities are float32, normalised to float32 precision, and
    within bf16 rounding of the float32 head's."""
    torch.manual_seed(0)
    emb = nn.Embedding(V, D)
    if kind == "mos":
        head, h = MoSHead(V, DH, embedding=emb, n_experts=3).eval(), torch.randn(6, 2, DH)
        feats = h
    else:
        head = DOCHead(V, DH, embedding=emb, vectors_per_layer=[1, 1, 2],
                       layer_sizes=[D, 9, DH]).eval()
        h = torch.randn(6, 2, DH)
        feats = Features(h, (torch.randn(6, 2, D), torch.randn(6, 2, 9), h))
    with torch.no_grad():
        full = head.log_prob(feats)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = head.log_prob(feats)
            linear = head.prior(h)  # the autocast really lowers the projections
    assert linear.dtype == torch.bfloat16
    assert full.dtype == mixed.dtype == torch.float32
    torch.testing.assert_close(mixed.logsumexp(-1), torch.zeros(6, 2), atol=1e-5, rtol=0)
    torch.testing.assert_close(mixed, full, atol=0.05, rtol=0.02)
    assert not torch.equal(mixed, full)


def test_a_memory_budget_chooses_the_chunk():
    """``chunk_mb`` gives the most positions whose scores, in the copies training keeps
    at once, fit the budget; both ways of choosing a chunk together are refused."""
    from drillbook.heads.mixture import SCORE_COPIES, chunk_for_budget

    per_position = SCORE_COPIES * 15 * 33278 * 4
    assert chunk_for_budget(1024, 15, 33278) == 1024 * 2**20 // per_position == 179
    assert chunk_for_budget(1e-6, 15, 33278) == 1  # never less than one position
    emb = nn.Embedding(100, 8)
    mos = build_head("mos", vocab_size=100, d_hidden=8, embedding=emb, n_experts=4,
                     chunk_mb=SCORE_COPIES * 4 * 100 * 4 * 7 / 2**20)
    assert mos.chunk_size == 7
    logits = build_head("mos", vocab_size=100, d_hidden=8, embedding=emb, n_experts=4,
                        mix="logits", chunk_mb=SCORE_COPIES * 100 * 4 * 7 / 2**20)
    assert logits.chunk_size == 7  # one softmax per position when mixing logits
    doc = build_head("doc", vocab_size=100, d_hidden=8, embedding=emb,
                     vectors_per_layer=[0, 5], chunk_mb=SCORE_COPIES * 5 * 100 * 4 * 3 / 2**20)
    assert doc.chunk_size == 3
    with pytest.raises(ConfigError, match="both chunk_size and chunk_mb"):
        build_head("mos", vocab_size=100, d_hidden=8, embedding=emb, chunk_size=4, chunk_mb=1)
    with pytest.raises(ConfigError, match=r"chunk_mb must be null \(no budget\) or a "
                                          r"positive number of megabytes, got 0"):
        build_head("mos", vocab_size=100, d_hidden=8, embedding=emb, chunk_mb=0)


@pytest.mark.parametrize("kind", ["mos", "doc"])
def test_what_training_keeps_for_backward_falls_with_the_chunk(kind):
    """Measured with the benchmarks' saved-tensor counter, on the plain path: unchunked, a
    training step keeps about one float32 copy of the ``J x n x V`` scores for its backward
    pass; chunked, each chunk is recomputed there and nothing of that size is kept. The
    fused loss (the CPU's default) keeps nothing of that size, whatever the chunk."""
    from drillbook.experiments.bench.measure import saved_bytes

    vocab, d, n, j = 2000, 16, 256, 6
    opts = {"n_experts": j} if kind == "mos" else {"vectors_per_layer": [0, j],
                                                    "cv_weight": 0.0}
    kept = {}
    for chunk in (None, 64, 16):
        torch.manual_seed(0)
        head = build_head(kind, vocab_size=vocab, d_hidden=d, embedding=nn.Embedding(vocab, d),
                          chunk_size=chunk, **opts).train()
        x, y = torch.randn(n, d), torch.randint(0, vocab, (n,))
        for fused in (False, None):
            head.fused_loss = fused
            kept[chunk, fused] = saved_bytes(lambda head=head, x=x, y=y: head.loss(x, y),
                                             exclude=list(head.parameters()))
    one_copy = j * n * vocab * 4
    assert kept[None, False] >= one_copy
    assert kept[64, False] < one_copy / 20 and kept[16, False] <= kept[64, False]
    assert kept[None, None] < one_copy / 20
