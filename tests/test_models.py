"""Encoders: AWD-LSTM's dropouts, the LSTM stack, the Transformer, checkpoints."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

from drillbook.heads import Features
from drillbook.models import (
    AWDLSTM,
    DropConnect,
    LockedDropout,
    TransformerLM,
    embedding_dropout,
)


def test_locked_dropout_shares_one_mask_over_time():
    drop = LockedDropout(0.5).train()
    x = torch.ones(6, 3, 8)
    y = drop(x)
    assert torch.equal(y, y[:1].expand_as(y))  # the same at every time step
    assert set(y.unique().tolist()) <= {0.0, 2.0}
    assert torch.equal(drop.eval()(x), x)


def test_embedding_dropout_drops_whole_words():
    emb = nn.Embedding(50, 4)
    words = torch.arange(50).repeat(2, 1)
    torch.manual_seed(1)
    out = embedding_dropout(emb, words, 0.5, training=True)
    dropped = (out == 0).all(-1)
    assert dropped.any() and not dropped.all()
    assert torch.equal(dropped[0], dropped[1])  # a dropped word is dropped everywhere
    kept = ~dropped[0]
    torch.testing.assert_close(out[0, kept], 2 * emb.weight[kept])
    torch.testing.assert_close(embedding_dropout(emb, words, 0.5, training=False), emb(words))


def test_dropconnect_on_lstm_samples_per_call_and_is_exact_in_eval():
    torch.manual_seed(0)
    plain = nn.LSTM(4, 5)
    dropped = nn.LSTM(4, 5)
    dropped.load_state_dict(plain.state_dict())
    parametrize.register_parametrization(dropped, "weight_hh_l0", DropConnect(0.5))
    x = torch.randn(7, 2, 4)
    dropped.train()
    assert not torch.allclose(dropped(x)[0], dropped(x)[0])  # a fresh mask each call
    dropped.eval()
    torch.testing.assert_close(dropped(x)[0], plain(x)[0])
    # gradients reach the underlying (undropped) weight
    dropped.train()
    dropped(x)[0].sum().backward()
    assert dropped.parametrizations.weight_hh_l0.original.grad is not None


def _explicit_forward(enc: AWDLSTM, plain: list[nn.LSTM], x: torch.Tensor, wasted: int):
    """AWD-LSTM's training forward written out: ``wasted`` DropConnect masks drawn and
    thrown away per layer, then one drawn and used, the LSTM run on it by
    ``functional_call`` of a plain ``nn.LSTM`` (one per layer, built before seeding)."""
    h = enc.drop_i(embedding_dropout(enc.embedding, x, enc.dropoute, True))
    for i, rnn in enumerate(enc.rnns):
        w = rnn.parametrizations.weight_hh_l0.original
        for _ in range(wasted + 1):
            dropped = torch.nn.functional.dropout(w, enc.wdrop, True)
        params = {"weight_ih_l0": rnn.weight_ih_l0, "weight_hh_l0": dropped,
                  "bias_ih_l0": rnn.bias_ih_l0, "bias_hh_l0": rnn.bias_hh_l0}
        raw, _ = torch.func.functional_call(plain[i], params, (h,))
        h = enc.drop_h(raw) if i < enc.nlayers - 1 else enc.drop_o(raw)
    return h


def test_awd_lstm_draws_one_dropconnect_mask_per_layer_and_forward():
    torch.manual_seed(0)
    enc = AWDLSTM(30, emsize=6, nhid=8, nlayers=3, dropout=0.3, dropouth=0.3, dropouti=0.3,
                  dropoute=0.1, wdrop=0.5).train()
    plain = [nn.LSTM(r.input_size, r.hidden_size) for r in enc.rnns]
    calls = []
    for rnn in enc.rnns:
        rnn.parametrizations.weight_hh_l0[0].register_forward_hook(
            lambda *_: calls.append(1))
    x = torch.randint(0, 30, (5, 3))

    def loss_and_grads(forward) -> list[torch.Tensor]:
        enc.zero_grad(set_to_none=True)
        torch.manual_seed(7)
        loss = forward().pow(2).sum()
        loss.backward()
        return [loss.detach(), *(p.grad for p in enc.parameters())]

    package = loss_and_grads(lambda: enc(x).features.last)
    assert len(calls) == 3  # one mask per layer: nn.LSTM reads its weight four times
    # bit for bit the forward that uses the first mask drawn (not a later one)
    explicit = loss_and_grads(lambda: _explicit_forward(enc, plain, x, wasted=0))
    assert all(torch.equal(a, b) for a, b in zip(package, explicit, strict=True))
    later = loss_and_grads(lambda: _explicit_forward(enc, plain, x, wasted=1))
    assert not torch.equal(package[0], later[0])  # the comparison sees which mask is used


def test_awd_lstm_shapes_layers_and_hidden():
    enc = AWDLSTM(30, emsize=8, nhid=12, nlayers=3, d_out=10).eval()
    x = torch.randint(0, 30, (5, 4))
    out = enc(x)
    assert isinstance(out.features, Features)
    assert out.features.last.shape == (5, 4, 10)
    assert [t.shape[-1] for t in out.features.layers] == [8, 12, 12, 10]
    assert [h[0].shape for h in out.hidden] == [(1, 4, 12), (1, 4, 12), (1, 4, 10)]
    assert enc.d_out == 10 and AWDLSTM(30, emsize=8, nhid=12).d_out == 8
    torch.testing.assert_close(out.raw_last, out.features.last)  # eval: no output dropout
    with pytest.raises(ValueError, match=r"\(T, B\)"):
        enc(torch.zeros(5, dtype=torch.long))


def test_awd_lstm_state_carries_over():
    enc = AWDLSTM(30, emsize=8, nhid=12, nlayers=2).eval()
    x = torch.randint(0, 30, (10, 2))
    whole = enc(x).features.last
    first = enc(x[:4])
    second = enc(x[4:], first.hidden)
    torch.testing.assert_close(torch.cat([first.features.last, second.features.last]), whole)


def test_awd_lstm_checkpoint_round_trip_with_weights_only():
    torch.manual_seed(0)
    enc = AWDLSTM(30, emsize=8, nhid=12, nlayers=2).eval()
    buf = io.BytesIO()
    torch.save(enc.state_dict(), buf)
    buf.seek(0)
    fresh = AWDLSTM(30, emsize=8, nhid=12, nlayers=2).eval()
    fresh.load_state_dict(torch.load(buf, weights_only=True))
    x = torch.randint(0, 30, (6, 3))
    torch.testing.assert_close(fresh(x).features.last, enc(x).features.last)


def test_dropout_arguments_are_checked():
    with pytest.raises(ValueError, match=r"wdrop must be a probability in \[0, 1\)"):
        AWDLSTM(10, emsize=4, nhid=4, wdrop=1.0)
    with pytest.raises(ValueError, match="nlayers"):
        AWDLSTM(10, emsize=4, nhid=4, nlayers=0)


def test_transformer_is_causal_and_shaped_like_the_lstm():
    torch.manual_seed(0)
    enc = TransformerLM(40, d_model=16, nhead=2, nlayers=2, d_ff=32, max_len=12).eval()
    x = torch.randint(0, 40, (9, 3))
    out = enc(x)
    assert out.features.last.shape == (9, 3, 16) and len(out.features.layers) == 3
    y = x.clone()
    y[5:] = (y[5:] + 1) % 40  # change the future
    torch.testing.assert_close(enc(y).features.last[:5], out.features.last[:5])
    with pytest.raises(ValueError, match="max_len=12"):
        enc(torch.zeros(13, 1, dtype=torch.long))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_awd_lstm_on_cuda_matches_cpu_in_eval():
    enc = AWDLSTM(30, emsize=8, nhid=12, nlayers=2).eval()
    x = torch.randint(0, 30, (6, 3))
    cpu = enc(x).features.last
    gpu = enc.cuda()(x.cuda()).features.last.cpu()
    torch.testing.assert_close(gpu, cpu, rtol=1e-4, atol=1e-5)
