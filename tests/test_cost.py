"""The FLOP model of every head against PyTorch's own FlopCounterMode (an independent count)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from drillbook.analysis import head_flops
from drillbook.heads import Features, build_head

V, D, T, B = 97, 12, 5, 3
CASES = [("softmax", {}), ("tied", {}), ("sigsoftmax", {}), ("bilinear", {}),
         ("dual", {"d_joint": 7}), ("drill", {"depth": 3}), ("mos", {"n_experts": 4}),
         ("mos", {"n_experts": 4, "mix": "logits"}),
         ("doc", {"vectors_per_layer": [1, 2, 3], "layer_sizes": [D, 9, D]}),
         ("vmf", {"dim": 10})]
IDS = [kind + ("-" + o["mix"] if "mix" in o else "") for kind, o in CASES]


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
