"""The fused output loss against the plain path, over every head of the registry that has
one: loss and every gradient, float64 and float32, with dropout, padding, DOC's regulariser,
a last chunk shorter than the others, the evaluation path; and its own gradients checked
numerically."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from torch import nn

from drillbook.heads import HEADS, Features, build_head
from drillbook.heads.fused import (
    SIGSOFTMAX,
    ScoreFactors,
    Workspace,
    chunk_rows,
    fused_cross_entropy,
    fused_mixture_nll,
)

V, D, T, B = 53, 6, 7, 3
PAD = -100

#: every head whose loss can take the fused path: a distribution head (vMF predicts vectors)
FUSED = sorted(kind for kind, cls in HEADS.items() if cls.is_distribution)


def options_with_dropout(kind: str) -> dict:
    """The head's tiny options, with every dropout it takes switched on."""
    cls = HEADS[kind]
    options = cls.tiny_options()
    for name in ("dropout", "latent_dropout"):
        if name in cls.options:
            options[name] = 0.3
    if cls.reads_layers:
        options["layer_sizes"] = [D, D, D]
    return options


def build(kind: str, dtype: torch.dtype, **options) -> nn.Module:
    torch.manual_seed(0)
    emb = nn.Embedding(V, D)
    head = build_head(kind, vocab_size=V, d_hidden=D, embedding=emb,
                      **{**options_with_dropout(kind), **options})
    head.embedding_for_test = emb  # keeps the shared embedding alive with the head
    return head.to(dtype)


def inputs(kind: str, dtype: torch.dtype, device: str = "cpu"):
    g = torch.Generator().manual_seed(1)

    def leaf() -> torch.Tensor:
        return torch.randn(T, B, D, dtype=dtype, generator=g).to(device).requires_grad_(True)

    h = leaf()
    layers = (leaf(), leaf())
    features = Features(h, (*layers, h)) if HEADS[kind].reads_layers else h
    y = torch.randint(0, V, (T, B), generator=g).to(device)
    y[0, 0] = y[3, 2] = PAD  # padding inside the batch
    return features, (h, *layers), y


def loss_and_grads(head, kind: str, dtype, *, fused: bool, regularize: bool = False,
                   seed: int = 5, device: str = "cpu"):
    head.fused_loss = fused  # True: fused on every device (None: on the CPU only)
    features, leaves, y = inputs(kind, dtype, device)
    torch.manual_seed(seed)  # the same dropout masks on both paths
    loss = head.loss(features, y, ignore_index=PAD, regularize=regularize)
    params = [p for p in head.parameters()]
    grads = torch.autograd.grad(loss, [*leaves, *params], allow_unused=True)
    return loss.detach(), grads


def assert_same(a, b, rtol: float, atol: float) -> None:
    (loss_a, grads_a), (loss_b, grads_b) = a, b
    torch.testing.assert_close(loss_a, loss_b, rtol=rtol, atol=atol)
    assert len(grads_a) == len(grads_b)
    for ga, gb in zip(grads_a, grads_b, strict=True):
        if ga is None or gb is None:
            assert (ga is None and gb is None) or (ga if gb is None else gb).abs().max() == 0
            continue
        torch.testing.assert_close(ga, gb, rtol=rtol, atol=atol)


@pytest.mark.parametrize("kind", FUSED)
@pytest.mark.parametrize("chunk_bytes", [None, 3 * V * 8])
def test_fused_equals_plain_in_float64(kind, chunk_bytes):
    """Loss and every gradient (features, middle layers, every parameter) to 1e-10, in
    training mode (dropout on, the same masks), with padding; in chunks of 3 positions
    (21 positions: the last chunk shorter) and all at once."""
    head = build(kind, torch.float64).train()
    head.fused_chunk_bytes = chunk_bytes
    regularize = kind == "doc"
    plain = loss_and_grads(head, kind, torch.float64, fused=False, regularize=regularize)
    fused = loss_and_grads(head, kind, torch.float64, fused=True, regularize=regularize)
    assert_same(plain, fused, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", FUSED)
def test_fused_equals_plain_in_float32(kind):
    head = build(kind, torch.float32).train()
    head.fused_chunk_bytes = 4 * V * 4 * 5  # several chunks
    plain = loss_and_grads(head, kind, torch.float32, fused=False)
    fused = loss_and_grads(head, kind, torch.float32, fused=True)
    assert_same(plain, fused, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", FUSED)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_fused_equals_plain_on_cuda(kind, dtype):
    """On a GPU the plain path is the default and ``fused_loss = True`` takes the fused one:
    the same loss and gradients there too (float64 to 1e-10, float32 to 1e-5), in several
    chunks, dropout on, DOC's regulariser included."""
    head = build(kind, dtype).train().cuda()
    head.fused_chunk_bytes = 4 * V * 8 * 5  # several chunks
    regularize = kind == "doc"
    plain = loss_and_grads(head, kind, dtype, fused=False, regularize=regularize,
                           device="cuda")
    fused = loss_and_grads(head, kind, dtype, fused=True, regularize=regularize,
                           device="cuda")
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5,
                                                                           atol=1e-6)
    assert_same(plain, fused, **tol)


@pytest.mark.parametrize("kind", FUSED)
def test_evaluation_path_equals_plain(kind):
    """Eval mode under no_grad (the label cache on, no gradient formed)."""
    head = build(kind, torch.float64).eval()
    features, _, y = inputs(kind, torch.float64)
    with torch.no_grad():
        head.fused_loss = False
        plain = head.loss(features, y, ignore_index=PAD)
        head.fused_loss = None
        fused = head.loss(features, y, ignore_index=PAD)
    torch.testing.assert_close(plain, fused, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", FUSED)
def test_the_fused_path_is_taken_on_the_cpu(kind, monkeypatch):
    """By default, on the CPU, in float32: the plain path's full-vocabulary logits are never
    formed (the cross-entropy of torch.nn.functional is not called)."""
    import torch.nn.functional as F

    def refuse(*args, **kwargs):
        raise AssertionError("the plain path ran")

    head = build(kind, torch.float32).train()
    features, _, y = inputs(kind, torch.float32)
    monkeypatch.setattr(F, "cross_entropy", refuse)
    monkeypatch.setattr(F, "nll_loss", refuse)
    head.loss(features, y, ignore_index=PAD).backward()


@pytest.mark.parametrize("kind", ["tied", "mos"])
def test_autocast_and_low_precision_take_the_plain_path(kind):
    head = build(kind, torch.float32).eval()
    features, _, y = inputs(kind, torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = head.loss(features, y, ignore_index=PAD)
        head.fused_loss = False
        plain = head.loss(features, y, ignore_index=PAD)
    assert torch.equal(mixed, plain)


@pytest.mark.parametrize("kind", FUSED)
def test_empty_and_fully_padded_batches(kind):
    head = build(kind, torch.float64)
    h = torch.zeros(0, B, D, dtype=torch.float64, requires_grad=True)
    features = Features(h, (h, h, h)) if HEADS[kind].reads_layers else h
    loss = head.loss(features, torch.zeros(0, B, dtype=torch.long))
    assert loss.item() == 0.0
    features, _, y = inputs(kind, torch.float64)
    all_pad = torch.full_like(y, PAD)
    assert torch.isnan(head.loss(features, all_pad, ignore_index=PAD))


def test_gradcheck_fused_cross_entropy_with_and_without_a_score_map():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(9, 4, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(11, 4, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(11, dtype=torch.float64, generator=g, requires_grad=True)
    y = torch.randint(0, 11, (9,), generator=g)
    y[2] = PAD
    for score_map in (None, SIGSOFTMAX):
        def f(x, w, b, score_map=score_map):
            return fused_cross_entropy(ScoreFactors(x, w, b, score_map), y, PAD,
                                       chunk_bytes=2 * 11 * 8)
        assert torch.autograd.gradcheck(f, (x, w, b))


def test_gradcheck_fused_mixture():
    g = torch.Generator().manual_seed(4)
    vectors = torch.randn(8, 3, 4, dtype=torch.float64, generator=g, requires_grad=True)
    logits = torch.randn(8, 3, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(10, 4, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(10, dtype=torch.float64, generator=g, requires_grad=True)
    y = torch.randint(0, 10, (8,), generator=g)
    y[5] = PAD

    def f(vectors, logits, w, b):
        return fused_mixture_nll(vectors, logits.log_softmax(-1), w, b, y, PAD,
                                 chunk_bytes=3 * 3 * 10 * 8)
    assert torch.autograd.gradcheck(f, (vectors, logits, w, b))


def test_sigsoftmax_map_matches_its_definition():
    """The fused sigsoftmax loss against cross-entropy of z + log sigmoid(z) written out."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(5, 3, dtype=torch.float64, generator=g)
    w = torch.randn(7, 3, dtype=torch.float64, generator=g) * 4  # large scores too
    y = torch.randint(0, 7, (5,), generator=g)
    z = x @ w.T
    expected = torch.nn.functional.cross_entropy(z + torch.nn.functional.logsigmoid(z), y)
    got = fused_cross_entropy(ScoreFactors(x, w, None, SIGSOFTMAX), y)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_workspace_is_reused_and_never_part_of_a_heads_state():
    head = build("tied", torch.float32)
    features, _, y = inputs("tied", torch.float32)
    head.loss(features, y, ignore_index=PAD).backward()
    [buffer] = head._workspace._buffers.values()
    head.loss(features, y, ignore_index=PAD).backward()
    [again] = head._workspace._buffers.values()
    assert again.data_ptr() == buffer.data_ptr()  # the same memory, step after step
    assert not any("workspace" in k for k in head.state_dict())
    assert copy.deepcopy(head)._workspace._buffers == {}
    assert pickle.loads(pickle.dumps(head))._workspace._buffers == {}
    buf = io.BytesIO()
    torch.save(head.state_dict(), buf)
    head.double()  # a move empties it
    assert head._workspace._buffers == {}
    assert repr(Workspace()) == "Workspace(0.0 MiB held)"


def test_chunk_rows_fill_the_budget():
    cpu = torch.device("cpu")
    assert chunk_rows(cpu, 10_000, torch.float32, 8 * 2**20) == 209
    assert chunk_rows(cpu, 10_000, torch.float64, 8 * 2**20) == 104
    assert chunk_rows(cpu, 10**9, torch.float32, 1024) == 1  # at least one position
