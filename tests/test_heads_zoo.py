"""The bilinear, dual and DRILL heads: equations, equivalences, dropout, eval cache."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from torch import nn

from drillbook.heads import (
    HEADS,
    BilinearHead,
    DrillHead,
    DualHead,
    TiedHead,
    build_head,
)
from drillbook.heads.label_cache import LabelCache

V, D = 37, 6
F64 = torch.float64


def emb64(v: int = V, d: int = D) -> nn.Embedding:
    emb = nn.Embedding(v, d).double()
    with torch.no_grad():
        emb.weight.normal_()
    return emb


def randomise(head: nn.Module, exclude: tuple[str, ...] = ("embedding_weight",)) -> None:
    """Random weights everywhere (biases included), so nothing passes by being zero."""
    with torch.no_grad():
        for name, p in head.named_parameters():
            if name not in exclude:
                p.normal_().mul_(0.5)


def drill_by_hand(head: DrillHead, h: torch.Tensor) -> torch.Tensor:
    """DRILL Eqs. 8-12 written out as a plain loop (no dropout)."""
    act = {"sigmoid": torch.sigmoid, "relu": torch.relu, "tanh": torch.tanh,
           "identity": lambda x: x}[head.activation]
    E = head.embedding_weight
    prev = E
    for k, layer in enumerate(head.layers, start=1):
        U_k, b_k = layer.weight, layer.bias
        new = act(prev @ U_k.T + b_k)
        if head.residual_previous and k >= 2:
            new = new + prev
        if head.residual:
            new = new + E
        prev = new
    return h @ prev.T + head.bias


# ------------------------------------------------------------------ registry, docs
def test_new_heads_are_registered_and_buildable():
    assert HEADS["bilinear"] is BilinearHead
    assert HEADS["dual"] is DualHead
    assert HEADS["drill"] is DrillHead
    emb = nn.Embedding(V, D)
    head = build_head("drill", vocab_size=V, d_hidden=D, embedding=emb, depth=2,
                      activation="relu", dropout=0.3, dropout_kind="standard")
    assert isinstance(head, DrillHead) and len(head.layers) == 2
    head = build_head("dual", vocab_size=V, d_hidden=9, embedding=emb, d_joint=4)
    assert head.log_prob(torch.randn(2, 9)).shape == (2, V)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['depht'\].*'depth'"):
        build_head("drill", vocab_size=V, d_hidden=D, embedding=emb, depht=2)


@pytest.mark.parametrize("cls", [BilinearHead, DualHead, DrillHead])
def test_docstring_first_line_names_the_equation(cls):
    first = cls.__doc__.strip().splitlines()[0]
    assert "Eq" in first and first.endswith(".")


# ------------------------------------------------------------------ equivalences
def test_drill_depth_0_is_the_tied_head():
    emb = emb64()
    drill = DrillHead(V, D, embedding=emb, depth=0, dropout=0.5).double()
    tied = TiedHead(V, D, embedding=emb).double()
    with torch.no_grad():
        tied.bias.normal_()
        drill.bias.copy_(tied.bias)
    h = torch.randn(4, 5, D, dtype=F64)
    for mode in (True, False):  # no layers, so no dropout even in training mode
        drill.train(mode)
        torch.testing.assert_close(drill.logits(h), tied.logits(h), rtol=0, atol=0)
    assert drill.label_embeddings() is emb.weight
    assert drill.param_counts() == tied.param_counts()


def test_bilinear_with_identity_W_is_the_tied_head():
    emb = emb64()
    bil = BilinearHead(V, D, embedding=emb).double()
    tied = TiedHead(V, D, embedding=emb).double()
    with torch.no_grad():
        tied.bias.normal_()
        bil.bias.copy_(tied.bias)
        bil.weight.copy_(torch.eye(D))
    h = torch.randn(3, 4, D, dtype=F64)
    torch.testing.assert_close(bil.logits(h), tied.logits(h))


def test_bilinear_computes_E_W_h_plus_b():
    emb = emb64(V, 5)
    bil = BilinearHead(V, 8, embedding=emb).double()
    randomise(bil)
    h = torch.randn(3, 8, dtype=F64)
    expected = (emb.weight @ bil.weight @ h.T).T + bil.bias  # (E W h_t + b) per column
    torch.testing.assert_close(bil.logits(h), expected)
    torch.testing.assert_close(bil.output_embeddings(), emb.weight @ bil.weight)


def test_dual_linear_is_bilinear_with_W_equal_U_V():
    """Identity activation, b_u = b_v = 0: the logit of word w is
    (V_w h) . (U_w E_w) = E_w^T (U_w^T V_w) h, with U_w = label_proj.weight (d_j, d),
    V_w = context_proj.weight (d_j, d_h); in the paper's orientation U = U_w^T, so
    W = U V. Sizes all differ so that a wrong orientation cannot even run."""
    d, d_h, d_j = 5, 7, 4
    emb = emb64(V, d)
    dual = DualHead(V, d_h, embedding=emb, d_joint=d_j, activation="identity").double()
    randomise(dual)
    with torch.no_grad():
        dual.label_proj.bias.zero_()
        dual.context_proj.bias.zero_()
    bil = BilinearHead(V, d_h, embedding=emb).double()
    with torch.no_grad():
        bil.weight.copy_(dual.label_proj.weight.T @ dual.context_proj.weight)  # (d, d_h)
        bil.bias.copy_(dual.bias)
    h = torch.randn(6, d_h, dtype=F64)
    torch.testing.assert_close(dual.logits(h), bil.logits(h))


def test_dual_computes_the_joint_embedding_formula():
    emb = emb64(V, 5)
    dual = DualHead(V, 7, embedding=emb, d_joint=3).double()  # tanh
    randomise(dual)
    h = torch.randn(2, 4, 7, dtype=F64)
    U_w, b_u = dual.label_proj.weight, dual.label_proj.bias
    V_w, b_v = dual.context_proj.weight, dual.context_proj.bias
    g_out = torch.tanh(emb.weight @ U_w.T + b_u)  # (V, d_j)
    g_in = torch.tanh(h @ V_w.T + b_v)             # (..., d_j)
    torch.testing.assert_close(dual.logits(h), g_in @ g_out.T + dual.bias)
    torch.testing.assert_close(dual.label_embeddings(), g_out)


def test_drill_depth_1_linear_is_bilinear_with_W_equal_U1_transposed():
    """E^(1) = E U_1^T, so logits = h (E U_1^T)^T = (E U_1^T h)^T: W = U_1^T, not U_1."""
    emb = emb64()
    drill = DrillHead(V, D, embedding=emb, depth=1, activation="identity",
                      residual=False).double()
    randomise(drill)
    with torch.no_grad():
        drill.layers[0].bias.zero_()
    bil = BilinearHead(V, D, embedding=emb).double()
    U1 = drill.layers[0].weight
    assert not torch.allclose(U1, U1.T)
    h = torch.randn(5, D, dtype=F64)
    with torch.no_grad():
        bil.bias.copy_(drill.bias)
        bil.weight.copy_(U1.T)
    torch.testing.assert_close(drill.logits(h), bil.logits(h))
    with torch.no_grad():
        bil.weight.copy_(U1)  # the other orientation is a different model
    assert not torch.allclose(drill.logits(h), bil.logits(h))


@pytest.mark.parametrize("residual_previous", [False, True])
@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("activation", ["sigmoid", "relu", "tanh"])
def test_drill_matches_the_equations_written_as_a_loop(residual_previous, residual,
                                                       activation):
    emb = emb64()
    drill = DrillHead(V, D, embedding=emb, depth=3, activation=activation, dropout=0.5,
                      residual=residual, residual_previous=residual_previous).double()
    randomise(drill)
    drill.eval()  # dropout 0.5 but eval mode: no dropout
    h = torch.randn(4, 3, D, dtype=F64)
    torch.testing.assert_close(drill.logits(h), drill_by_hand(drill, h))
    with torch.no_grad():  # the cached route gives the same numbers
        torch.testing.assert_close(drill.logits(h), drill_by_hand(drill, h))
    # and so does training mode with dropout off
    drill.dropout = 0.0
    drill.train()
    torch.testing.assert_close(drill.logits(h), drill_by_hand(drill, h))


def test_residual_previous_changes_the_output_from_layer_2_only():
    emb = emb64()
    h = torch.randn(3, D, dtype=F64)
    heads = {}
    for rp in (False, True):
        torch.manual_seed(3)
        heads[rp] = DrillHead(V, D, embedding=emb, depth=1, residual_previous=rp).double()
    torch.testing.assert_close(heads[False].logits(h), heads[True].logits(h))
    for rp in (False, True):
        torch.manual_seed(3)
        heads[rp] = DrillHead(V, D, embedding=emb, depth=2, residual_previous=rp).double()
    assert not torch.allclose(heads[False].logits(h), heads[True].logits(h))


# ------------------------------------------------------------------ dropout
def layer_inputs(head: DrillHead) -> list[torch.Tensor]:
    """Record what each label-encoder layer receives (the dropped E^(k-1))."""
    seen: list[torch.Tensor] = []
    for layer in head.layers:
        layer.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach()))
    return seen


def test_variational_dropout_drops_whole_embedding_dimensions():
    d = 64
    emb = nn.Embedding(V, d)
    head = DrillHead(V, d, embedding=emb, depth=2, dropout=0.5)  # variational default
    seen = layer_inputs(head)
    h = torch.randn(2, d)
    head.train()
    head.logits(h)
    head.logits(h)
    first, second = seen[0], seen[2]  # layer-1 inputs of the two passes: dropped E
    E = emb.weight.detach()
    for dropped in (first, second):
        dead = (dropped == 0).all(dim=0)  # columns zeroed for all V rows
        assert 0 < int(dead.sum()) < d
        kept = ~dead
        assert (dropped[:, kept] != 0).all()  # the same dimensions for every row
        torch.testing.assert_close(dropped[:, kept], 2 * E[:, kept])  # scaled 1/(1-p)
    assert not torch.equal(first, second)  # resampled on every forward pass
    # layer 2's input is dropped too, with its own whole-column mask
    dead2 = (seen[1] == 0).all(dim=0)
    assert 0 < int(dead2.sum()) < d
    assert (seen[1][:, ~dead2] != 0).all()


def test_standard_dropout_drops_independent_entries():
    d = 64
    emb = nn.Embedding(V, d)
    head = DrillHead(V, d, embedding=emb, depth=1, dropout=0.5, dropout_kind="standard")
    seen = layer_inputs(head)
    head.train()
    head.logits(torch.randn(2, d))
    dropped, E = seen[0], emb.weight.detach()
    zero = dropped == 0
    assert 0.3 < zero.float().mean() < 0.7
    assert not (zero.all(dim=0) | (~zero).all(dim=0)).all()  # not whole columns
    torch.testing.assert_close(dropped[~zero], 2 * E[~zero])


@pytest.mark.parametrize("kind", ["variational", "standard"])
def test_no_dropout_in_eval_mode(kind):
    emb = nn.Embedding(V, D)
    head = DrillHead(V, D, embedding=emb, depth=2, dropout=0.5, dropout_kind=kind)
    seen = layer_inputs(head)
    head.eval()
    h = torch.randn(3, D)
    out1, out2 = head.logits(h), head.logits(h)
    torch.testing.assert_close(out1, out2, rtol=0, atol=0)
    assert torch.equal(seen[0], emb.weight.detach())


def test_dropout_acts_on_layer_inputs_and_the_skip_uses_the_undropped_E():
    """E^(1) = act(D(E) U^T + b) + E: the residual adds E itself, never the dropped one."""
    emb = nn.Embedding(V, D)
    head = DrillHead(V, D, embedding=emb, depth=1, dropout=0.5)
    record = {}

    def hook(_m, args, out):
        record["in"], record["out"] = args[0], out

    head.layers[0].register_forward_hook(hook)
    head.train()
    h = torch.randn(4, D)
    logits = head.logits(h)
    assert (record["in"] == 0).all(dim=0).any()  # something was dropped
    E1 = torch.sigmoid(record["out"]) + emb.weight
    torch.testing.assert_close(logits, h @ E1.T + head.bias)


def test_training_pass_with_dropout_still_backpropagates():
    emb = nn.Embedding(V, D)
    head = DrillHead(V, D, embedding=emb, depth=2, dropout=0.4)
    head.loss(torch.randn(5, D), torch.randint(0, V, (5,))).backward()
    for name, p in head.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


# ------------------------------------------------ dual and bilinear: DRILL's footnote 6
def test_dual_with_residuals_and_zero_projections_is_the_tied_head():
    """g_out(E) = tanh(E U + b_u) + E, g_in(h) = tanh(V h + b_v) + h: with U, V, b_u, b_v
    all zero both sides reduce to E and h."""
    emb = emb64()
    dual = DualHead(V, D, embedding=emb, residual_label=True, residual_context=True,
                    dropout=0.5).double().eval()
    tied = TiedHead(V, D, embedding=emb).double()
    with torch.no_grad():
        for p in (*dual.label_proj.parameters(), *dual.context_proj.parameters()):
            p.zero_()
        dual.bias.normal_()
        tied.bias.copy_(dual.bias)
    h = torch.randn(4, 3, D, dtype=F64)
    torch.testing.assert_close(dual.logits(h), tied.logits(h))


@pytest.mark.parametrize(("label", "context"), [(True, False), (False, True), (True, True)])
def test_dual_residuals_add_E_and_h(label, context):
    emb = emb64()
    dual = DualHead(V, D, embedding=emb, residual_label=label, residual_context=context)
    dual = dual.double().eval()
    randomise(dual)
    E, h = emb.weight, torch.randn(5, D, dtype=F64)
    g_out = torch.tanh(E @ dual.label_proj.weight.T + dual.label_proj.bias) + (E if label else 0)
    g_in = torch.tanh(h @ dual.context_proj.weight.T + dual.context_proj.bias) + (
        h if context else 0)
    torch.testing.assert_close(dual.logits(h), g_in @ g_out.T + dual.bias)
    ids = torch.tensor([3, 0, 11])
    torch.testing.assert_close(dual.logits_subset(h, ids), dual.logits(h)[:, ids])


def test_bilinear_with_residual_and_zero_W_is_the_tied_head():
    emb = emb64()
    bil = BilinearHead(V, D, embedding=emb, residual=True, dropout=0.5).double().eval()
    randomise(bil)
    tied = TiedHead(V, D, embedding=emb).double()
    with torch.no_grad():
        tied.bias.copy_(bil.bias)
    h = torch.randn(4, D, dtype=F64)
    W = bil.weight.detach().clone()
    torch.testing.assert_close(bil.logits(h), h @ (emb.weight @ W + emb.weight).T + bil.bias)
    torch.testing.assert_close(bil.output_embeddings(), emb.weight @ W + emb.weight)
    with torch.no_grad():
        bil.weight.zero_()
    torch.testing.assert_close(bil.logits(h), tied.logits(h))
    bil.train()  # the residual adds the undropped E: W = 0 leaves nothing to drop
    torch.testing.assert_close(bil.logits(h), tied.logits(h))


def test_residual_options_check_their_sizes():
    emb = nn.Embedding(V, D)
    with pytest.raises(ValueError, match="d_joint must equal the embedding size 6"):
        DualHead(V, D, embedding=emb, d_joint=4, residual_label=True)
    with pytest.raises(ValueError, match="d_joint must equal d_hidden=7"):
        DualHead(V, 7, embedding=emb, residual_context=True)
    with pytest.raises(ValueError, match="d_hidden must equal the embedding size 6"):
        BilinearHead(V, 7, embedding=emb, residual=True)
    with pytest.raises(ValueError, match="unknown dropout_kind 'locked' for the 'dual'"):
        DualHead(V, D, embedding=emb, dropout=0.1, dropout_kind="locked")
    with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\)"):
        BilinearHead(V, D, embedding=emb, dropout=1.0)


def dropped_label_matrix(head: nn.Module, d: int) -> torch.Tensor:
    """δ(E) of one training pass of a bilinear head with W = I and b = 0: its logits for
    the contexts h = e_1 .. e_d are the columns of δ(E)."""
    with torch.no_grad():
        head.weight.copy_(torch.eye(d))
        head.bias.zero_()
    head.train()
    return head.logits(torch.eye(d)).T  # (V, d)


@pytest.mark.parametrize("kind", ["variational", "standard"])
def test_bilinear_dropout_acts_on_E_in_training_only(kind):
    d = 64
    emb = nn.Embedding(V, d)
    head = BilinearHead(V, d, embedding=emb, dropout=0.5, dropout_kind=kind)
    E = emb.weight.detach()
    dropped = dropped_label_matrix(head, d)
    zero = dropped == 0
    torch.testing.assert_close(dropped[~zero], 2 * E[~zero])  # kept entries scaled 1/(1-p)
    whole_columns = (zero.all(dim=0) | (~zero).all(dim=0)).all()
    assert 0.2 < zero.float().mean() < 0.8
    assert bool(whole_columns) == (kind == "variational")  # one (1, d) mask for every word
    head.eval()
    torch.testing.assert_close(head.logits(torch.eye(d)).T, E, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["variational", "standard"])
def test_dual_dropout_acts_on_the_label_input_and_the_residual_is_undropped(kind):
    """Identity activation, U = I, b_u = 0: g_out(E) = δ(E) + E, so g_out(E) - E is δ(E)."""
    d = 64
    emb = nn.Embedding(V, d)
    head = DualHead(V, d, embedding=emb, activation="identity", dropout=0.5,
                    dropout_kind=kind, residual_label=True)
    with torch.no_grad():
        head.label_proj.weight.copy_(torch.eye(d))
        head.label_proj.bias.zero_()
    E = emb.weight.detach()
    head.train()
    dropped = head.label_embeddings().detach() - E
    zero = dropped.abs() < 1e-6
    torch.testing.assert_close(dropped[~zero], 2 * E[~zero])
    assert 0.2 < zero.float().mean() < 0.8
    assert bool((zero.all(dim=0) | (~zero).all(dim=0)).all()) == (kind == "variational")
    h = torch.randn(3, d)  # the context side is never dropped
    torch.testing.assert_close(head.context_embeddings(h), head.context_proj(h))
    head.eval()
    torch.testing.assert_close(head.label_embeddings(), 2 * E)
    with torch.no_grad():  # and the eval cache holds the undropped value
        torch.testing.assert_close(head.label_embeddings(), 2 * E)


# ------------------------------------------------------------------ eval cache
def cached_head(kind: str, **options) -> nn.Module:
    emb = nn.Embedding(V, D)
    if kind == "drill":
        head = DrillHead(V, D, embedding=emb, depth=2, **options)
    else:
        head = DualHead(V, D, embedding=emb, **options)
    randomise(head)
    return head


def count_encodings(head: nn.Module) -> list[int]:
    calls = [0]
    encode = head._encode_labels

    def counted():
        calls[0] += 1
        return encode()

    head._encode_labels = counted  # instance attribute shadows the method
    return calls


@pytest.mark.parametrize("kind", ["drill", "dual"])
def test_eval_no_grad_computes_the_label_encoding_once(kind):
    head = cached_head(kind).eval()
    calls = count_encodings(head)
    h = torch.randn(3, D)
    with torch.no_grad():
        first = head.label_embeddings()
        assert head.label_embeddings() is first
        out1 = head.logits(h)
        out2 = head.log_prob(h)
        head.loss(h, torch.tensor([0, 1, 2]))
    assert calls[0] == 1
    assert head._label_cache.hits == 4 and head._label_cache.misses == 1
    torch.testing.assert_close(out2, torch.log_softmax(out1, -1))
    # cached and uncached agree
    torch.testing.assert_close(first, head._encode_labels())
    torch.testing.assert_close(out1, head.logits(h))  # grad enabled: uncached route


@pytest.mark.parametrize("kind", ["drill", "dual"])
def test_nothing_is_cached_while_training_or_with_grad_enabled(kind):
    head = cached_head(kind)
    calls = count_encodings(head)
    h = torch.randn(3, D)
    with torch.no_grad():  # training mode: the weights are about to change
        head.logits(h)
        head.logits(h)
    assert calls[0] == 2 and not head._label_cache.filled
    head.eval()  # eval mode with autograd on: no graph is ever stored
    out = head.logits(h)
    head.logits(h)
    assert calls[0] == 4 and not head._label_cache.filled
    out.logsumexp(-1).sum().backward()
    for name, p in head.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("kind", ["drill", "dual"])
def test_cache_follows_in_place_weight_changes(kind):
    head = cached_head(kind)
    h = torch.randn(4, D)
    y = torch.randint(0, V, (4,))
    opt = torch.optim.SGD(head.parameters(), lr=0.5)

    def eval_logits():
        head.eval()
        with torch.no_grad():
            out = head.logits(h)
            assert head._label_cache.filled
            fresh = torch.nn.functional.linear(
                head._hidden(h) if kind == "drill" else head.context_embeddings(h),
                head._encode_labels(), head.bias)
        torch.testing.assert_close(out, fresh)  # cached == recomputed, every time
        return out

    before = eval_logits()
    torch.testing.assert_close(eval_logits(), before)
    assert head._label_cache.hits == 1  # the second call reused the first's encoding
    # an optimiser step
    head.train()
    head.loss(h, y).backward()
    opt.step()
    after_step = eval_logits()
    assert not torch.allclose(after_step, before)
    # an in-place edit of a label-encoder weight
    layer = head.layers[-1] if kind == "drill" else head.label_proj
    with torch.no_grad():
        layer.weight.add_(1.0)
    after_edit = eval_logits()
    assert not torch.allclose(after_edit, after_step)
    with torch.no_grad():
        layer.bias.mul_(-1.0)
    after_bias = eval_logits()
    assert not torch.allclose(after_bias, after_edit)
    # an in-place edit of the shared input embedding (owned by the encoder)
    with torch.no_grad():
        head.embedding_weight.mul_(2.0)
    assert not torch.allclose(eval_logits(), after_bias)


@pytest.mark.parametrize("kind", ["drill", "dual"])
def test_cache_follows_load_state_dict_and_stays_out_of_it(kind):
    head = cached_head(kind).eval()
    other = cached_head(kind).eval()
    h = torch.randn(3, D)
    with torch.no_grad():
        head.logits(h)  # fill the cache
        assert head._label_cache.filled
        state = head.state_dict()
        assert set(state) == {n for n, _ in head.named_parameters()}
        assert not any("cache" in k for k in state)
        head.load_state_dict(other.state_dict())
        torch.testing.assert_close(head.logits(h), other.logits(h))
    buf = io.BytesIO()
    torch.save(head.state_dict(), buf)
    buf.seek(0)
    assert set(torch.load(buf, weights_only=True)) == set(state)


@pytest.mark.parametrize("kind", ["drill", "dual"])
def test_cache_follows_dtype_and_module_copies(kind):
    head = cached_head(kind).eval()
    h = torch.randn(3, D)
    with torch.no_grad():
        ref = head.logits(h)
        head.double()
        assert not head._label_cache.filled  # .to() drops the old value
        out = head.logits(h.double())
        assert out.dtype == F64
        torch.testing.assert_close(out.float(), ref)
        head.float()
        torch.testing.assert_close(head.logits(h), ref)
        assert head._label_cache.filled
        twin = copy.deepcopy(head)
        assert not twin._label_cache.filled
        torch.testing.assert_close(twin.logits(h), ref)
        clone = pickle.loads(pickle.dumps(head))
        assert not clone._label_cache.filled
        torch.testing.assert_close(clone.logits(h), ref)


@pytest.mark.parametrize("kind", ["drill", "dual"])
def test_cache_is_not_fooled_by_swapped_parameters_or_edits_of_its_value(kind):
    head = cached_head(kind).eval()
    h = torch.randn(3, D)
    with torch.no_grad():
        ref = head.logits(h)
        for _ in range(3):
            # fresh tensors each time, freed before the next ones are allocated: a freed
            # address must not be mistaken for the tensor that used to live there
            params = {n: torch.randn_like(p) for n, p in head.named_parameters()}
            swapped = torch.func.functional_call(head, params, (h,))  # cached
            head.train()
            expected = torch.func.functional_call(head, params, (h,))  # not cached
            head.eval()
            torch.testing.assert_close(swapped, expected)
            del params
        torch.testing.assert_close(head.logits(h), ref)
        labels = head.label_embeddings()
        labels.mul_(0.0)  # an in-place edit of the returned tensor is noticed
        torch.testing.assert_close(head.logits(h), ref)
        head.clear_cache()
        assert not head._label_cache.filled
        torch.testing.assert_close(head.logits(h), ref)
    head.clear_cache()
    with torch.inference_mode():  # a value cached in inference mode serves no_grad too
        torch.testing.assert_close(head.logits(h), ref)
    assert head._label_cache.filled
    with torch.no_grad():
        torch.testing.assert_close(head.logits(h), ref)
    assert head._label_cache.hits >= 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["drill", "dual"])
def test_cache_on_cuda_with_freed_and_reused_addresses(kind):
    """CUDA's caching allocator hands a freed block straight back: the case the pinned
    storages guard against."""
    head = cached_head(kind).cuda().eval()
    h = torch.randn(3, D, device="cuda")
    with torch.no_grad():
        for _ in range(4):
            params = {n: torch.randn_like(p) for n, p in head.named_parameters()}
            swapped = torch.func.functional_call(head, params, (h,))
            head.train()
            expected = torch.func.functional_call(head, params, (h,))
            head.eval()
            torch.testing.assert_close(swapped, expected)
            del params, swapped, expected


def test_label_cache_on_its_own():
    module = nn.Linear(2, 2)
    cache = LabelCache()
    w = module.weight
    calls = [0]

    def compute():
        calls[0] += 1
        return w * 2

    module.eval()
    with torch.no_grad():
        a = cache.get(module, [w], compute)
        assert cache.get(module, [w], compute) is a and calls[0] == 1
        w.add_(1)
        b = cache.get(module, [w], compute)
        assert calls[0] == 2 and b is not a
        torch.testing.assert_close(b, w * 2)
    assert "filled=True" in repr(cache)
    # while a value is held, its sources' memory stays allocated, so a later tensor can
    # never sit at the same address (and version) and pass for the freed one
    src = torch.randn(5)
    ptr = src.data_ptr()
    with torch.no_grad():
        cache.get(module, [src], lambda: torch.zeros(5))
    del src
    assert any(pin.data_ptr() == ptr for pin in cache._pins)
    cache.clear()
    assert not cache.filled and cache._pins == ()
    module.train()
    with torch.no_grad():
        cache.get(module, [w], compute)
    assert calls[0] == 3


def test_drill_label_embeddings_are_E_K():
    emb = emb64()
    head = DrillHead(V, D, embedding=emb, depth=3, residual_previous=True).double().eval()
    randomise(head)
    eye = torch.eye(D, dtype=F64)
    with torch.no_grad():
        head.bias.zero_()
        E_K = head.label_embeddings()
    assert E_K.shape == (V, D)
    # logits of the unit vectors e_i are the columns of E^(K)
    torch.testing.assert_close(head.logits(eye), drill_by_hand(head, eye))
    torch.testing.assert_close(head.logits(eye).T, E_K)


# ------------------------------------------------------------------ gradients
CONFIGS = [
    ("bilinear", 5, 7, {}),
    ("bilinear", 6, 6, {"bias": False}),
    ("bilinear", 6, 6, {"residual": True}),
    ("dual", 5, 7, {"d_joint": 4}),
    ("dual", 6, 6, {"residual_label": True, "residual_context": True}),
    ("dual", 5, 7, {"d_joint": 5, "residual_label": True, "activation": "sigmoid"}),
    ("dual", 6, 6, {"activation": "sigmoid"}),
    ("dual", 6, 6, {"activation": "relu", "d_joint": 8}),
    ("dual", 6, 6, {"activation": "identity"}),
    ("drill", 6, 6, {"depth": 3}),
    ("drill", 6, 6, {"depth": 2, "activation": "tanh", "residual_previous": True}),
    ("drill", 6, 6, {"depth": 2, "activation": "relu", "residual": False}),
    ("drill", 6, 6, {"depth": 0}),
]


@pytest.mark.parametrize(("kind", "d", "d_h", "options"), CONFIGS)
@pytest.mark.parametrize("training", [True, False])
def test_gradcheck_float64_wrt_hidden_and_every_parameter(kind, d, d_h, options,
                                                          training, gradcheck_head):
    emb = emb64(V, d)
    head = build_head(kind, vocab_size=V, d_hidden=d_h, embedding=emb, **options).double()
    head.train(training)
    assert "embedding_weight" in dict(head.named_parameters())
    gradcheck_head(head, d_h)


# ------------------------------------------------------------------ parameter counts
def test_param_counts_follow_the_formulas():
    d, d_h, d_j = 5, 7, 3
    emb = nn.Embedding(V, d)
    bil = BilinearHead(V, d_h, embedding=emb)
    assert bil.param_counts().dedicated == d * d_h + V
    assert bil.param_counts().shared == V * d
    assert BilinearHead(V, d_h, embedding=emb, bias=False).param_counts().dedicated == d * d_h
    dual = DualHead(V, d_h, embedding=emb, d_joint=d_j)
    assert dual.param_counts().dedicated == d * d_j + d_j + d_j * d_h + d_j + V
    assert DualHead(V, d_h, embedding=emb).d_joint == d  # default joint size: d
    emb6 = nn.Embedding(V, D)
    for depth in range(4):
        drill = DrillHead(V, D, embedding=emb6, depth=depth)
        assert drill.param_counts().dedicated == depth * (D * D + D) + V
        assert drill.param_counts().shared == V * D


def test_param_counts_at_ptb_size():
    """AWD-LSTM on PTB: V = 10,000 and emsize = d_h = 400. The AWD-LSTM itself (embedding,
    LSTMs, tied decoder's shared E) is 24,211,600 parameters; adding these dedicated counts
    gives 24.38M / 24.54M / 24.70M / 24.86M for DRILL depth 1-4, the 24.3 / 24.5 / 24.7 /
    24.8M of DRILL Table 4 (truncated to 0.1M). The model-level check lives elsewhere."""
    v, d = 10_000, 400
    emb = nn.Embedding(v, d, device="meta")  # counts only: no memory needed

    def dedicated(kind, **options):
        head = build_head(kind, vocab_size=v, d_hidden=d, embedding=emb, **options)
        assert head.param_counts().shared == v * d
        return head.param_counts().dedicated

    assert dedicated("bilinear") == 170_000
    assert dedicated("dual", d_joint=400) == 330_800
    assert dedicated("dual") == 330_800  # d_joint defaults to d
    assert [dedicated("drill", depth=k) for k in (1, 2, 3, 4)] == [
        170_400, 330_800, 491_200, 651_600]
    assert dedicated("drill", depth=0) == dedicated("tied") == 10_000


# ------------------------------------------------------------------ bad inputs
@pytest.mark.parametrize("kind", ["bilinear", "dual", "drill"])
def test_missing_embedding_says_to_pass_one(kind):
    with pytest.raises(ValueError, match=rf"the '{kind}' head shares the input embedding: "
                                         r"pass embedding="):
        build_head(kind, vocab_size=V, d_hidden=D)


@pytest.mark.parametrize("kind", ["bilinear", "dual", "drill"])
def test_embedding_over_another_vocabulary_is_rejected(kind):
    with pytest.raises(ValueError, match=r"\(37, .*got \(40, 6\)"):
        build_head(kind, vocab_size=V, d_hidden=D, embedding=nn.Embedding(40, D))


def test_drill_needs_d_hidden_equal_to_the_embedding_size():
    with pytest.raises(ValueError, match=r"d_hidden must equal the embedding dimension.*"
                                         r"kind='bilinear' or kind='dual'"):
        build_head("drill", vocab_size=V, d_hidden=8, embedding=nn.Embedding(V, D))
    # the bilinear and dual heads are made for this case
    for kind in ("bilinear", "dual"):
        head = build_head(kind, vocab_size=V, d_hidden=8, embedding=nn.Embedding(V, D))
        assert head.log_prob(torch.randn(2, 8)).shape == (2, V)


@pytest.mark.parametrize(("kind", "bad"), [("dual", "gelu"), ("drill", "softmax"),
                                           ("dual", "Tanh")])
def test_unknown_activation_lists_the_choices(kind, bad):
    with pytest.raises(ValueError, match=rf"unknown activation '{bad}'.*choose one of \[.*"
                                         r"'tanh'.*\]"):
        build_head(kind, vocab_size=V, d_hidden=D, embedding=nn.Embedding(V, D),
                   activation=bad)


@pytest.mark.parametrize("depth", [-1, 1.5, True, "2"])
def test_drill_depth_must_be_a_non_negative_integer(depth):
    with pytest.raises(ValueError, match=r"depth must be a non-negative integer \(0 gives the "
                                         r"tied head\)"):
        DrillHead(V, D, embedding=nn.Embedding(V, D), depth=depth)


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5, "0.5"])
def test_drill_dropout_must_lie_in_0_1(p):
    with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\)"):
        DrillHead(V, D, embedding=nn.Embedding(V, D), dropout=p)


def test_drill_unknown_dropout_kind_and_dual_bad_d_joint():
    with pytest.raises(ValueError, match=r"unknown dropout_kind 'locked'.*'variational', "
                                         r"'standard'"):
        DrillHead(V, D, embedding=nn.Embedding(V, D), dropout_kind="locked")
    with pytest.raises(ValueError, match=r"d_joint must be a positive integer, got 0"):
        DualHead(V, D, embedding=nn.Embedding(V, D), d_joint=0)
