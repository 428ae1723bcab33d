"""The head interface, checked on every registered head; the two classic heads."""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from drillbook.heads import (
    HEADS,
    Features,
    OutputHead,
    SoftmaxHead,
    TiedHead,
    build_head,
)

V, D = 37, 6


#: small settings for heads whose defaults are paper-sized
SMALL = {"mos": {"n_experts": 3}, "doc": {"vectors_per_layer": [0, 3]}, "vmf": {"dim": 8}}

#: heads that are not a distribution over the vocabulary (a vMF head predicts a vector):
#: tests of log_prob skip them; the generic ones call ``scores`` (their per-word output)
NOT_A_DISTRIBUTION = {kind for kind, cls in HEADS.items() if not cls.is_distribution}
DISTRIBUTIONS = sorted(set(HEADS) - NOT_A_DISTRIBUTION)


def per_word(head: OutputHead, kind: str):
    """``head.log_prob``, or ``head.scores`` for a head that is not a distribution."""
    return head.scores if kind in NOT_A_DISTRIBUTION else head.log_prob


def make(kind: str, **options) -> OutputHead:
    emb = nn.Embedding(V, D)
    return build_head(kind, vocab_size=V, d_hidden=D, embedding=emb,
                      **{**SMALL.get(kind, {}), **options})


@pytest.mark.parametrize("kind", DISTRIBUTIONS)
@pytest.mark.parametrize("lead", [(), (5,), (3, 4)])
def test_log_prob_is_normalised_with_any_leading_shape(kind, lead):
    head = make(kind)
    logp = head.log_prob(torch.randn(*lead, D))
    assert logp.shape == (*lead, V)
    torch.testing.assert_close(logp.logsumexp(-1), torch.zeros(lead))


@pytest.mark.parametrize("kind", sorted(HEADS))
def test_features_object_is_accepted(kind):
    head = make(kind)
    h = torch.randn(2, 3, D)
    out = per_word(head, kind)
    torch.testing.assert_close(out(Features(h, (h, h))), out(h))


@pytest.mark.parametrize("kind", DISTRIBUTIONS)
def test_loss_is_mean_nll_and_respects_ignore_index(kind):
    head = make(kind)
    h = torch.randn(4, 5, D)
    y = torch.randint(0, V, (4, 5))
    y[0, :2] = -1
    logp = head.log_prob(h)
    keep = y != -1
    expected = -logp[keep].gather(-1, y[keep].unsqueeze(-1)).mean()
    torch.testing.assert_close(head.loss(h, y, ignore_index=-1), expected)


@pytest.mark.parametrize("kind", sorted(HEADS))
def test_wrong_hidden_size_names_both_shapes(kind):
    head = make(kind)
    with pytest.raises(ValueError, match=r"\(\.\.\., 6\).*\(2, 3, 5\)"):
        per_word(head, kind)(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="d_hidden=6"):
        head.loss(torch.randn(4, 7), torch.zeros(4, dtype=torch.long))


def test_bad_targets_are_clear_errors():
    head = make("softmax")
    h = torch.randn(4, 5, D)
    with pytest.raises(ValueError,
                       match=r"target shape \(5, 4\).*expected target of shape \(4, 5\)"):
        head.loss(h, torch.zeros(5, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, 37\)"):
        head.loss(h, torch.full((4, 5), V))
    with pytest.raises(TypeError, match="integer word ids"):
        head.loss(h, torch.zeros(4, 5))


def test_build_head_rejects_unknown_kind_and_options():
    with pytest.raises(ValueError, match=r"unknown head kind 'nope'.*'softmax'.*'tied'"):
        build_head("nope", vocab_size=V, d_hidden=D)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['depth'\].*valid options: "
                                         r"\['bias', 'context_map'\]"):
        build_head("softmax", vocab_size=V, d_hidden=D, depth=2)
    with pytest.raises(ValueError, match="vocab_size must be a positive integer, got 0"):
        build_head("softmax", vocab_size=0, d_hidden=D)


def test_tied_head_needs_a_matching_embedding():
    with pytest.raises(ValueError, match=r"pass embedding="):
        build_head("tied", vocab_size=V, d_hidden=D)
    with pytest.raises(ValueError, match=r"\(37, 6\), got \(37, 8\).*bilinear"):
        build_head("tied", vocab_size=V, d_hidden=D, embedding=nn.Embedding(V, 8))
    with pytest.raises(TypeError, match=r"nn\.Embedding"):
        build_head("tied", vocab_size=V, d_hidden=D, embedding=torch.randn(V, D))


def test_tied_head_computes_E_h_plus_b_and_trains_the_embedding():
    emb = nn.Embedding(V, D)
    head = TiedHead(V, D, embedding=emb)
    with torch.no_grad():
        head.bias.normal_()
    h = torch.randn(3, D)
    torch.testing.assert_close(head.logits(h), h @ emb.weight.T + head.bias)
    head.loss(h, torch.tensor([1, 2, 3])).backward()
    assert emb.weight.grad is not None and emb.weight.grad.abs().sum() > 0
    assert head.weight is emb.weight


def test_tied_equals_untied_softmax_with_copied_weights():
    """Eq. 2 is Eq. 1 with W = E: the two heads must agree exactly."""
    emb = nn.Embedding(V, D)
    tied = TiedHead(V, D, embedding=emb)
    untied = SoftmaxHead(V, D)
    with torch.no_grad():
        tied.bias.normal_()
        untied.weight.copy_(emb.weight)
        untied.bias.copy_(tied.bias)
    h = torch.randn(4, 9, D)
    torch.testing.assert_close(tied.log_prob(h), untied.log_prob(h))


def test_param_counts_separate_dedicated_from_shared():
    soft = make("softmax")
    assert soft.param_counts().dedicated == V * D + V  # C_base
    assert soft.param_counts().shared == 0
    tied = make("tied")
    assert tied.param_counts().dedicated == V           # C_tied: the bias only
    assert tied.param_counts().shared == V * D
    assert make("softmax", bias=False).param_counts().dedicated == V * D


def test_param_counts_at_ptb_size():
    """AWD-LSTM PTB: V = 10,000, emsize 400. The tied head adds only its bias, while an
    untied head on the same 400-d output adds 4.01M (DRILL Table 4's 43.8M full-softmax
    model also widens its last LSTM layer to 1,150; see chapter 2)."""
    emb = nn.Embedding(10_000, 400)
    tied = build_head("tied", vocab_size=10_000, d_hidden=400, embedding=emb)
    soft = build_head("softmax", vocab_size=10_000, d_hidden=400)
    assert tied.param_counts().dedicated == 10_000
    assert soft.param_counts().dedicated == 4_010_000


@pytest.mark.parametrize("kind", DISTRIBUTIONS)
def test_gradcheck_float64(kind, gradcheck_head):
    """Analytic gradients of the loss, w.r.t. the features and every parameter."""
    gradcheck_head(make(kind).double(), D)


def test_softmax_family_loss_matches_log_softmax_path():
    head = make("softmax")
    h, y = torch.randn(6, D), torch.randint(0, V, (6,))
    torch.testing.assert_close(head.loss(h, y), F.nll_loss(head.log_prob(h), y))
    torch.testing.assert_close(head.loss(h, y), OutputHead._mean_nll(head, h, y, -100))


@pytest.mark.parametrize("kind", sorted(HEADS))
def test_state_dict_round_trip_with_weights_only(kind):
    head = make(kind)
    with torch.no_grad():
        for p in head.parameters():
            p.normal_()
    buf = io.BytesIO()
    torch.save(head.state_dict(), buf)
    buf.seek(0)
    fresh = make(kind)
    fresh.load_state_dict(torch.load(buf, weights_only=True, map_location="cpu"))
    h = torch.randn(2, D)
    torch.testing.assert_close(per_word(fresh, kind)(h), per_word(head, kind)(h))


def test_dtype_and_device_follow_the_parameters():
    head = make("tied").double()
    assert head.log_prob(torch.randn(2, D, dtype=torch.float64)).dtype == torch.float64


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", sorted(HEADS))
def test_cuda_matches_cpu(kind):
    head = make(kind)
    h, y = torch.randn(4, D), torch.randint(0, V, (4,))
    cpu = head.loss(h, y)
    gpu = head.to("cuda").loss(h.cuda(), y.cuda())
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", sorted(k for k, c in HEADS.items() if c.has_logits))
def test_logits_subset_equals_the_chosen_columns(kind):
    head = make(kind).eval()
    h = torch.randn(2, 3, D)
    ids = torch.tensor([5, 0, V - 1, 12])
    with torch.no_grad():
        torch.testing.assert_close(head.logits_subset(h, ids), head.logits(h)[..., ids])
