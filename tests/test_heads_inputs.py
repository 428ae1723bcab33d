"""Every head checks what it is given, and takes an empty batch.

Run over the whole registry (a head registered later is covered without an edit here):
features of another dtype or width, targets of another dtype, shape or range are refused
in one line that says what the head expected, through every call that reads features
(``log_prob``, ``loss``, ``logits`` and ``logits_subset``, vMF's ``scores``, ``decode`` and
``predict_vectors``, DOC's middle layers); autocast keeps working; an empty batch gives
empty outputs of the right shape and a loss of 0 with zero gradients.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from drillbook.heads import HEADS, Features, MixtureHead, VectorHead, build_head

pytestmark = pytest.mark.usefixtures("one_thread")

KINDS = sorted(HEADS)
V, D = 11, 8
N_LAYERS = 3  # the embedding and two layers, as the heads' tiny options assume


def make(kind: str):
    options = HEADS[kind].tiny_options()
    if HEADS[kind].reads_layers:
        options["layer_sizes"] = [D] * N_LAYERS
    with warnings.catch_warnings():  # vMF's random table: said in test_vmf
        warnings.simplefilter("ignore")
        return build_head(kind, vocab_size=V, d_hidden=D, embedding=nn.Embedding(V, D),
                          **options)


def features(*lead: int, dtype=torch.float32, middle=None) -> Features:
    """Features ``(*lead, D)`` with every layer (the middle ones of ``middle`` dtype)."""
    layers = [torch.randn(*lead, D).to(middle or dtype) for _ in range(N_LAYERS - 1)]
    last = torch.randn(*lead, D).to(dtype)
    return Features(last, (*layers, last))


def reads(head) -> dict:
    """Every call of ``head`` that reads features, by name."""
    calls = {"loss": lambda f: head.loss(f, torch.zeros(f.last.shape[:-1], dtype=torch.long,
                                                        device=f.last.device))}
    if isinstance(head, VectorHead):
        calls |= {"scores": head.scores, "decode": head.decode,
                  "predict_vectors": head.predict_vectors}
    else:
        calls["log_prob"] = head.log_prob
    if head.has_logits:
        calls |= {"logits": head.logits,
                  "logits_subset": lambda f: head.logits_subset(
                      f, torch.tensor([1, 3], device=f.last.device))}
    if isinstance(head, MixtureHead):
        calls["mixture_weights"] = head.mixture_weights
    return calls


def one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert message and "\n" not in message
    return message


# ------------------------------------------------------------------ dtypes
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float64, torch.int64])
def test_features_of_another_dtype_are_refused_in_one_line(kind, dtype):
    head = make(kind)
    for name, call in reads(head).items():
        with pytest.raises(ValueError) as err:
            call(features(3, dtype=dtype))
        message = one_line(err)
        assert "expects hidden of dtype torch.float32" in message, name
        assert f"got {dtype}" in message, name
        if dtype.is_floating_point:
            assert f".to({dtype})" in message  # the head's way, or the features'
        else:
            assert "not word ids" in message


@pytest.mark.parametrize("kind", [k for k in KINDS if HEADS[k].reads_layers])
def test_a_middle_layer_of_another_dtype_is_named(kind):
    head = make(kind)
    with pytest.raises(ValueError) as err:
        head.loss(features(3, middle=torch.float64), torch.zeros(3, dtype=torch.long))
    assert "expects layer 0 of dtype torch.float32" in one_line(err)


@pytest.mark.parametrize("kind", KINDS)
def test_a_head_in_float64_takes_float64_features_and_refuses_float32(kind):
    head = make(kind).double()
    feats = features(4, dtype=torch.float64)
    for name, call in reads(head).items():
        out = call(feats)
        assert out.dtype in (torch.float64, torch.int64), name
    with pytest.raises(ValueError, match=r"dtype torch\.float64 .*got torch\.float32"):
        head.loss(features(4), torch.zeros(4, dtype=torch.long))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_autocast_keeps_working(kind, dtype):
    """Under autocast an encoder hands over bf16 or float32 features, whatever the head's
    parameters are: the head takes both."""
    head = make(kind).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for name, call in reads(head).items():
            out = call(features(2, 3, dtype=dtype))
            assert out.shape[:2] == (2, 3) or out.dim() == 0, name
            if out.is_floating_point():
                assert out.float().isfinite().all(), name
        loss = head.loss(features(2, 3, dtype=dtype), torch.randint(0, V, (2, 3)),
                         regularize=True)
    loss.backward()
    assert all(p.grad is None or p.grad.isfinite().all() for p in head.parameters())


@pytest.mark.parametrize("kind", KINDS)
def test_a_feature_width_the_head_does_not_read_is_refused_as_before(kind):
    head = make(kind)
    with pytest.raises(ValueError) as err:
        head.loss(torch.randn(3, D + 1), torch.zeros(3, dtype=torch.long))
    assert one_line(err).endswith(f"must have d_hidden={D} features")


# ------------------------------------------------------------------ targets
@pytest.mark.parametrize("kind", KINDS)
def test_targets_are_checked(kind):
    head, feats = make(kind), features(2, 3)
    for bad in (V, -1):
        target = torch.zeros(2, 3, dtype=torch.long)
        target[1, 2] = bad
        with pytest.raises(ValueError) as err:
            head.loss(feats, target)
        assert f"target ids must lie in [0, {V})" in one_line(err)
    target = torch.full((2, 3), -100)  # ignored positions may hold anything
    target[0, 0] = 4
    assert head.loss(feats, target).isfinite()
    with pytest.raises(TypeError, match=r"integer word ids, got dtype torch\.float32"):
        head.loss(feats, torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"target shape \(3, 2\) does not match"):
        head.loss(feats, torch.zeros(3, 2, dtype=torch.long))


@pytest.mark.parametrize("kind", KINDS)
def test_a_batch_whose_every_target_is_ignored_has_a_nan_loss_as_stated(kind):
    loss = make(kind).loss(features(2, 3), torch.full((2, 3), -100))
    assert loss.shape == () and loss.isnan()


# ------------------------------------------------------------------ empty batches
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lead", [(0,), (0, 4), (4, 0)])
def test_an_empty_batch_gives_empty_outputs_and_a_zero_loss(kind, lead):
    head = make(kind).train()
    feats = features(*lead)
    for name, call in reads(head).items():
        if name == "loss":
            continue
        out = call(feats)
        width = {"scores": V, "log_prob": V, "logits": V, "logits_subset": 2,
                 "predict_vectors": getattr(head, "dim", None), "decode": None,
                 "mixture_weights": getattr(head, "n_vectors", None)}[name]
        assert tuple(out.shape) == (*lead, *([width] if width else [])), name
    target = torch.zeros(lead, dtype=torch.long)
    for regularize in (False, True):
        loss = head.loss(feats, target, regularize=regularize)
        assert loss.shape == () and loss.item() == 0.0
    head.zero_grad()
    head.loss(feats, target, regularize=True).backward()
    grads = [p.grad for p in head.parameters() if p.requires_grad]
    assert grads and all(g is not None and not g.any() for g in grads)


@pytest.mark.parametrize("kind", KINDS)
def test_an_empty_batch_in_evaluation_mode(kind):
    head = make(kind).eval()
    with torch.no_grad():
        loss = head.loss(features(0, 2), torch.zeros(0, 2, dtype=torch.long))
        out = head.scores(features(0)) if isinstance(head, VectorHead) else head.log_prob(
            features(0))
    assert loss.item() == 0.0 and out.shape == (0, V)


# ------------------------------------------------------------------ through the command line
@pytest.mark.skipif(not (Path(os.environ.get("DRILLBOOK_DATA", "/nonexistent")) / "ptb").is_dir(),
                    reason="needs PTB: set DRILLBOOK_DATA")
@pytest.mark.parametrize("kind", ["mos", "doc"])
def test_autocast_training_and_evaluation_from_the_command_line(kind, tmp_path):
    """``train.amp=bf16`` on a CPU: the LSTM hands the mixture bf16 or float32 features
    under autocast, in training and in evaluation, and the heads take them (what the
    planner picks for mixtures on a GPU, ``amp=auto``, is bf16 too)."""
    run = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "drillbook.cli", "train", f"tutorial/ptb-{kind}", "--out",
         str(run), "--set", "model.emsize=8", "model.nhid=8", "train.epochs=1",
         "train.max_batches_per_epoch=2", "train.max_eval_tokens=200", "train.amp=bf16"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([sys.executable, "-m", "drillbook.cli", "eval", str(run),
                           "--max-tokens", "100", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["loss"] > 0


# ------------------------------------------------------------------ on a GPU
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("amp", [torch.float16, torch.bfloat16])
def test_cuda_autocast_and_an_empty_batch(kind, amp):
    """CUDA autocast hands a head fp16 or bf16 features, or float32 ones: it takes all, and
    an empty batch on the GPU too (its targets are checked on the device, without a
    read-back)."""
    head = make(kind).cuda().train()

    def on_gpu(*lead, dtype=torch.float32):
        f = features(*lead, dtype=dtype)
        return Features(f.last.cuda(), tuple(t.cuda() for t in f.layers))

    for dtype in (torch.float32, amp):
        with torch.autocast("cuda", dtype=amp):
            loss = head.loss(on_gpu(2, 3, dtype=dtype),
                             torch.randint(0, V, (2, 3), device="cuda"), regularize=True)
            empty = head.loss(on_gpu(0, 3, dtype=dtype),
                              torch.zeros(0, 3, dtype=torch.long, device="cuda"))
            for name, call in reads(head).items():
                out = call(on_gpu(0, 3, dtype=dtype))
                assert out.shape[:2] == (0, 3) or out.dim() == 0, name
        loss.backward()
        assert loss.isfinite() and empty.item() == 0.0
    with pytest.raises(ValueError, match=r"expects hidden of dtype torch\.float32"):
        head.loss(on_gpu(2, dtype=amp), torch.zeros(2, dtype=torch.long, device="cuda"))
