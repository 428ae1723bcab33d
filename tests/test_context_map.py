"""The untied softmax with a trained context map, ``W^T M h + b``: the plain softmax's
functions written as a product of two trained matrices (the translation chapter's early
updates compare it with the bilinear head's ``E W h``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_fused_loss import assert_same, build, loss_and_grads

from drillbook.heads import SoftmaxHead, build_head

V, D = 29, 5


def test_its_scores_are_w_m_h_plus_b_and_with_m_the_identity_the_plain_softmax():
    torch.manual_seed(0)
    mapped = SoftmaxHead(V, D, context_map=True)
    h = torch.randn(4, 3, D)
    expected = h @ mapped.context_map.T @ mapped.weight.T + mapped.bias
    torch.testing.assert_close(mapped.logits(h), expected)
    torch.testing.assert_close(mapped.log_prob(h), F.log_softmax(expected, -1))
    plain = SoftmaxHead(V, D)
    with torch.no_grad():
        plain.weight.copy_(mapped.weight)
        plain.bias.uniform_()
        mapped.bias.copy_(plain.bias)
        mapped.context_map.copy_(torch.eye(D))
    assert torch.equal(mapped.logits(h), plain.logits(h))
    ids = torch.tensor([3, 0, 28])
    torch.testing.assert_close(mapped.logits_subset(h, ids), plain.logits(h)[..., ids])


def test_off_by_default_it_leaves_the_plain_softmax_as_it_was():
    torch.manual_seed(3)
    plain = SoftmaxHead(V, D)
    torch.manual_seed(3)
    off = build_head("softmax", vocab_size=V, d_hidden=D, context_map=False)
    assert off.context_map is None and off.state_dict().keys() == plain.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(off.state_dict().values(),
                                                 plain.state_dict().values(), strict=True))


def test_counts_and_flops_add_one_d_h_by_d_h_matrix():
    mapped, plain = SoftmaxHead(V, D, context_map=True), SoftmaxHead(V, D)
    assert mapped.param_counts().dedicated == V * (D + 1) + D * D
    assert plain.param_counts().dedicated == V * (D + 1)
    with_map = SoftmaxHead.flops(vocab_size=V, d=D, tokens=7, context_map=True)
    without = SoftmaxHead.flops(vocab_size=V, d=D, tokens=7)
    assert with_map.context - without.context == 2 * 7 * D * D
    assert with_map.scores == without.scores


def test_gradcheck_in_float64(gradcheck_head):
    torch.manual_seed(0)
    gradcheck_head(SoftmaxHead(11, 4, context_map=True).double(), 4)


@pytest.mark.parametrize("dtype,rtol,atol", [(torch.float64, 1e-10, 1e-12),
                                             (torch.float32, 1e-5, 1e-6)])
def test_the_fused_loss_equals_the_plain_one(dtype, rtol, atol):
    head = build("softmax", dtype, context_map=True).train()
    head.fused_chunk_bytes = 3 * 53 * 8  # chunks of 3 positions, the last one shorter
    plain = loss_and_grads(head, "softmax", dtype, fused=False)
    fused = loss_and_grads(head, "softmax", dtype, fused=True)
    assert_same(plain, fused, rtol=rtol, atol=atol)


def test_a_bad_value_is_one_clear_error():
    with pytest.raises(ValueError, match="context_map"):
        SoftmaxHead(V, D, context_map="yes")
