"""The FLOP model of every head against PyTorch's own FlopCounterMode (an independent count)."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from drillbook.analysis import head_flops
from drillbook.heads import HEADS, Features, build_head

V, D, T, B = 97, 12, 5, 3
CASES = [("softmax", {}), ("softmax", {"context_map": True}), ("tied", {}), ("sigsoftmax", {}),
         ("bilinear", {}),
         ("dual", {"d_joint": 7}), ("drill", {"depth": 3}), ("mos", {"n_experts": 4}),
         ("mos", {"n_experts": 4, "mix": "logits"}),
         ("doc", {"vectors_per_layer": [1, 2, 3], "layer_sizes": [D, 9, D]}),
         ("vmf", {"dim": 10})]
IDS = [kind + ("-" + o["mix"] if "mix" in o else "") + ("-mapped" if "context_map" in o else "")
       for kind, o in CASES]


def _head_and_inputs(kind: str, options: dict):
    torch.manual_seed(0)
    head = build_head(kind, vocab_size=V, d_hidden=D, embedding=nn.Embedding(V, D), **options)
    layers = tuple(torch.randn(T, B, s) for s in options.get("layer_sizes", [D, D]))
    return head, Features(layers[-1], layers), torch.randint(0, V, (T, B))


def _counted(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize(("kind", "options"), CASES, ids=IDS)
def test_forward_flops_match_pytorchs_counter_in_training_and_evaluation(kind, options):
    head, feats, target = _head_and_inputs(kind, options)
    model = head_flops(kind, vocab_size=V, d=D, tokens=T * B, **options)
    head.train()
    with torch.no_grad():
        assert _counted(lambda: head.loss(feats, target)) == model.train_forward
    head.eval()
    with torch.no_grad():
        head.loss(feats, target)  # the first evaluation call fills the label cache
        assert _counted(lambda: head.loss(feats, target)) == model.eval_forward


@pytest.mark.parametrize("kind", sorted(HEADS))
def test_every_registered_head_declares_a_flop_model_pytorch_agrees_with(kind):
    """The FLOP model is the head's own (:meth:`OutputHead.flops`), for each head of the
    registry with the options it declares for tests and for the benchmark."""
    cls = HEADS[kind]
    variants = [cls.tiny_options(), *cls.bench_variants().values()]
    for options in variants:
        if cls.reads_layers:
            options["layer_sizes"] = [D] * len(options.get("vectors_per_layer", [0, 0, 0, 0]))
        head, feats, target = _head_and_inputs(kind, options)
        model = cls.flops(vocab_size=V, d=D, tokens=T * B, **options)
        assert model == head_flops(kind, vocab_size=V, d=D, tokens=T * B, **options)
        loss = functools.partial(head.loss, feats, target)
        head.train()
        with torch.no_grad():
            assert _counted(loss) == model.train_forward, options
        head.eval()
        with torch.no_grad():
            loss()  # the first evaluation call fills the label cache
            assert _counted(loss) == model.eval_forward, options


def test_label_work_is_independent_of_the_batch_and_cached_at_evaluation():
    small = head_flops("drill", vocab_size=V, d=D, tokens=10, depth=4)
    large = head_flops("drill", vocab_size=V, d=D, tokens=1000, depth=4)
    assert small.label == large.label == 2 * 4 * V * D * D and small.eval_label == 0
    assert large.scores == 100 * small.scores
    mos = head_flops("mos", vocab_size=V, d=D, tokens=10, n_experts=15)
    assert mos.scores == 15 * head_flops("tied", vocab_size=V, d=D, tokens=10).scores
    assert mos.score_values == 15 * 10 * V


def test_decoding_flops_match_the_counter_for_argmax_and_nearest_neighbour():
    tied, feats, _ = _head_and_inputs("tied", {})
    with torch.no_grad():
        assert _counted(lambda: tied.logits(feats).argmax(-1)) == head_flops(
            "tied", vocab_size=V, d=D, tokens=T * B).decode
    vmf, feats, _ = _head_and_inputs("vmf", {"dim": 10})
    model = head_flops("vmf", vocab_size=V, d=D, tokens=T * B, dim=10)
    with torch.no_grad():
        assert _counted(lambda: vmf.decode(feats)) == model.context + model.decode
    assert model.scores == 0 and model.score_values == 0


def test_a_training_step_is_three_forward_passes_for_a_tied_head():
    head, feats, target = _head_and_inputs("tied", {})
    hidden = feats.last.clone().requires_grad_(True)
    total = _counted(lambda: head.loss(hidden, target).backward())
    assert total == 3 * head_flops("tied", vocab_size=V, d=D, tokens=T * B).train_forward


def test_unknown_kinds_and_mismatched_doc_layers_are_clear_errors():
    with pytest.raises(ValueError, match="no FLOP model for head kind 'nope'"):
        head_flops("nope", vocab_size=V, d=D, tokens=4)
    with pytest.raises(ValueError, match=r"\['dropout'\] for head 'mos'.*only the bilinear, "
                                         r"dual, drill heads take dropout"):
        head_flops("mos", vocab_size=V, d=D, tokens=4, dropout=0.5)
    with pytest.raises(ValueError, match=r"unknown head option\(s\) \['detph'\]"):
        head_flops("drill", vocab_size=V, d=D, tokens=4, detph=2)
    assert head_flops("mos", vocab_size=V, d=D, tokens=4, chunk_size=2, latent_dropout=0.3) \
        == head_flops("mos", vocab_size=V, d=D, tokens=4)
    with pytest.raises(ValueError, match="vectors_per_layer has 2 entries"):
        head_flops("doc", vocab_size=V, d=D, tokens=4, vectors_per_layer=[1, 2],
                   layer_sizes=[D])


def test_awd_lstm_flops_count_every_gate_weight_once_per_position():
    from drillbook.analysis import awd_lstm_flops
    from drillbook.configs import get_config
    from drillbook.models import build_model

    config = get_config("ptb/awd-lstm")
    model = build_model(config, vocab_size=50)
    gate_weights = sum(p.numel() for name, p in model.encoder.named_parameters()
                       if "weight_ih" in name or "weight_hh" in name)
    m = config.model
    assert awd_lstm_flops(emsize=m.emsize, nhid=m.nhid, nlayers=m.nlayers, d_out=m.d_out,
                          tokens=7) == 2 * 7 * gate_weights
