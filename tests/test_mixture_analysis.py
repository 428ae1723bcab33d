"""Mixture diagnostics, cost measurement, and a DOC model through the trainer."""

from __future__ import annotations

import math

import pytest
import torch

from drillbook.analysis import mixture_diagnostics
from drillbook.configs import Config, DataConfig, HeadConfig, ModelConfig
from drillbook.data import batchify
from drillbook.experiments import compare_heads, head_cost
from drillbook.heads import build_head
from drillbook.models import AWDLSTM, LanguageModel, build_model


def doc_model(vocab: int = 30) -> LanguageModel:
    cfg = Config(name="t", data=DataConfig("tiny"),
                 model=ModelConfig(emsize=6, nhid=8, nlayers=2, d_out=7),
                 head=HeadConfig("doc", {"vectors_per_layer": [1, 2, 3], "cv_weight": 0.1}))
    return build_model(cfg, vocab)


def test_build_model_hands_doc_the_layer_sizes():
    model = doc_model()
    assert model.head.layer_sizes == [6, 8, 7]
    out = model(torch.randint(0, 30, (5, 2)))
    assert model.head.regularizer(out.features).ndim == 0


def test_mixture_diagnostics_summarise_the_prior():
    torch.manual_seed(0)
    model = doc_model().eval()
    data = batchify(torch.randint(0, 30, (300,)), 3)
    diag = mixture_diagnostics(model, data, bptt=9)
    # the weights are float32 softmax outputs: they sum to one to float32 precision
    assert diag.usage.shape == (6,) and math.isclose(float(diag.usage.sum()), 1.0,
                                                     rel_tol=1e-6)
    assert diag.n_positions == data[1:].numel()
    assert 0 <= diag.entropy <= diag.max_entropy == pytest.approx(math.log(6))
    assert set(diag.usage_by_layer) == {0, 1, 2}
    assert math.isclose(sum(diag.usage_by_layer.values()), 1.0, rel_tol=1e-6)
    assert diag.cv >= 0 and diag.cv_batch_mean >= 0


def test_mixture_diagnostics_refuse_a_softmax_head():
    enc = AWDLSTM(20, emsize=4, nhid=4, nlayers=1)
    model = LanguageModel(enc, build_head("tied", vocab_size=20, d_hidden=4,
                                          embedding=enc.embedding))
    with pytest.raises(TypeError, match="MoS or DOC"):
        mixture_diagnostics(model, batchify(torch.arange(40) % 20, 2), bptt=5)


def test_head_cost_and_ratios_run_end_to_end():
    size = {"vocab_size": 300, "d": 8, "tokens": 64, "repeats": 2, "warmup": 1}
    cost = head_cost("mos", n_experts=3, chunk_size=16, **size)
    assert cost.tokens == 64 and cost.train_step_s > 0 and cost.eval_token_s > 0
    assert cost.score_bytes == 3 * 16 * 300 * 4 and cost.peak_bytes is None
    rows = compare_heads([("tied", {}), ("drill", {"depth": 2}),
                          ("doc", {"vectors_per_layer": [1, 2], "layer_sizes": [8, 8]})],
                         **size)
    assert [r["kind"] for r in rows] == ["tied", "drill", "doc"]
    assert rows[0]["train_ratio"] == 1.0 and all(r["train_ratio"] > 0 for r in rows)
