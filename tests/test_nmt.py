"""The translation model: decoding, BLEU, negative sampling, training runs, the CLI."""

from __future__ import annotations

import io
import json
import os
import random
from pathlib import Path

import pytest
import sacrebleu
import torch

from drillbook.cli import main
from drillbook.configs import apply_overrides, get_nmt_config, list_nmt_configs
from drillbook.errors import ConfigError
from drillbook.nmt import load_parallel_from_files
from drillbook.nmt.bleu import corpus_bleu
from drillbook.nmt.decode import beam_search, greedy_decode, translate_pairs
from drillbook.nmt.model import Seq2Seq
from drillbook.train import NMTTrainer, load_run
from drillbook.train.translation import sampled_softmax_loss

TINY = Path(__file__).parent / "data" / "tiny_parallel"


def tiny_corpus():
    return load_parallel_from_files(
        {s: (TINY / f"{s}.de", TINY / f"{s}.en") for s in ("train", "valid", "test")},
        "de", "en")


def small(name: str, *extra: str):
    return apply_overrides(get_nmt_config(name), [
        "data.min_freq=1", "model.emb_size=16", "model.hidden=16", "train.batch_size=4",
        "train.epochs=2", "train.max_len=12", *extra])


def test_bleu_equals_sacrebleu_on_fixed_and_random_strings():
    hyps = [["a", "cat", "sat", "on", "the", "mat"], ["the", "dog", "ran"]]
    refs = [["the", "cat", "sat", "on", "the", "mat"], ["a", "dog", "ran", "home"]]
    expected = sacrebleu.corpus_bleu([" ".join(h) for h in hyps],
                                     [[" ".join(r) for r in refs]], tokenize="none").score
    assert corpus_bleu(hyps, refs) == pytest.approx(expected, abs=1e-9)
    rng = random.Random(0)
    words = "a b c d e f".split()
    for _ in range(100):
        n = rng.randint(1, 5)
        refs = [[rng.choice(words) for _ in range(rng.randint(1, 7))] for _ in range(n)]
        hyps = [[rng.choice(words) for _ in range(rng.randint(0, 7))] for _ in range(n)]
        ref = sacrebleu.corpus_bleu([" ".join(h) for h in hyps],
                                    [[" ".join(r) for r in refs]], tokenize="none").score
        assert corpus_bleu(hyps, refs) == pytest.approx(ref, abs=1e-9)
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_bleu(hyps[:2] if len(hyps) > 1 else hyps * 2, refs[:1])


@pytest.mark.parametrize("head", ["softmax", "tied", "dual", "drill"])
def test_beam_of_one_is_greedy(head):
    torch.manual_seed(0)
    model = Seq2Seq(40, 30, emb_size=16, hidden=16, head=head).eval()
    src = torch.randint(4, 40, (7, 5))
    lengths = torch.tensor([7, 6, 5, 3, 1])
    src[5:, 2] = 0
    greedy = greedy_decode(model, src, lengths, bos=2, eos=3, max_len=15)
    assert beam_search(model, src, lengths, bos=2, eos=3, beam=1, max_len=15) == greedy
    wide = beam_search(model, src, lengths, bos=2, eos=3, beam=4, max_len=15)
    assert len(wide) == 5 and all(0 not in s and 2 not in s for s in wide)


def test_beam_search_finds_a_higher_scoring_sequence_than_greedy():
    torch.manual_seed(3)
    model = Seq2Seq(30, 12, emb_size=8, hidden=8, head="softmax").eval()
    src, lengths = torch.randint(4, 30, (4, 6)), torch.full((6,), 4)

    def logp(seqs):
        tgt = [[2, *s] for s in seqs]
        out = [[*s, 3] for s in seqs]
        width = max(map(len, tgt))
        tin = torch.tensor([t + [0] * (width - len(t)) for t in tgt]).T
        tout = torch.tensor([o + [0] * (width - len(o)) for o in out]).T
        lp = model.head.log_prob(model(src, lengths, tin))
        picked = lp.gather(-1, tout.unsqueeze(-1)).squeeze(-1).masked_fill(tout == 0, 0)
        return picked.sum(0)

    with torch.no_grad():
        greedy = greedy_decode(model, src, lengths, bos=2, eos=3, max_len=8)
        beam = beam_search(model, src, lengths, bos=2, eos=3, beam=6, max_len=8)
        if all(len(s) < 8 for s in greedy + beam):  # both finished: beam is never worse
            assert (logp(beam) >= logp(greedy) - 1e-5).all()


def test_negative_sampling_keeps_every_positive_and_is_exact_with_everything():
    torch.manual_seed(0)
    model = Seq2Seq(20, 50, emb_size=8, hidden=8, head="drill",
                    head_options={"depth": 1}).eval()
    feats = torch.randn(6, 3, 8)
    target = torch.randint(0, 50, (6, 3))
    target[0] = 0  # padding
    gen = torch.Generator().manual_seed(0)
    seen = []
    original = model.head.logits_subset
    model.head.logits_subset = lambda f, ids: seen.append(ids) or original(f, ids)
    _loss, n = sampled_softmax_loss(model.head, feats, target, percent=20, ignore_index=0,
                                   exclude=(0, 2), generator=gen)
    positives = set(target[target != 0].tolist())
    assert positives <= set(seen[-1].tolist()) and n == max(10, len(positives))
    assert 2 not in set(seen[-1].tolist()) - positives
    full, _ = sampled_softmax_loss(model.head, feats, target, percent=100, ignore_index=0)
    torch.testing.assert_close(full, model.head.loss(feats, target, ignore_index=0))
    mos = Seq2Seq(20, 50, emb_size=8, hidden=8, head="mos", head_options={"n_experts": 2})
    with pytest.raises(ConfigError, match=r"'mos' head has no per-word logits; unset "
                                          r"train\.negative_sampling"):
        sampled_softmax_loss(mos.head, feats, target, percent=5, ignore_index=0)


def test_encoder_refuses_an_empty_sentence():
    model = Seq2Seq(10, 10, emb_size=4, hidden=4)
    with pytest.raises(ValueError, match="at least one token"):
        model.encode(torch.zeros(3, 2, dtype=torch.long), torch.tensor([3, 0]))


def test_named_translation_configs_build():
    names = list_nmt_configs()
    assert {"multi30k/de-en-softmax", "multi30k/de-en-drill", "multi30k/de-en-vmf"} <= set(names)
    # "tied" says what is tied: the softmax's weights, or the vMF decoder's inputs
    assert "multi30k/de-en-tied" not in names
    assert get_nmt_config("multi30k/de-en-softmax-tied").head.kind == "tied"
    for loss in ("reg1", "reg2", "maxmargin"):
        cfg = get_nmt_config(f"multi30k/de-en-vmf-{loss}-tied")
        assert cfg.model.input_from_targets and cfg.head.options == {"loss": loss}
    assert not get_nmt_config("multi30k/de-en-vmf-maxmargin").model.input_from_targets
    cfg = apply_overrides(get_nmt_config("multi30k/de-en-drill"), ["head.options.depth=3"])
    assert cfg.head.options["depth"] == 3


@pytest.mark.parametrize("name", ["multi30k/de-en-softmax", "multi30k/de-en-dual"])
def test_training_resume_and_translation_on_tiny_data(tmp_path, name):
    corpus = tiny_corpus()
    trainer = NMTTrainer(small(name), tmp_path / "run", device="cpu", corpus=corpus,
                         progress=False)
    record = trainer.fit(max_epochs=1).record
    assert record["epoch"] == 1 and record["val_bleu"] >= 0
    resumed = NMTTrainer(small(name), tmp_path / "run", device="cpu", corpus=corpus,
                         resume=True, progress=False)
    assert resumed.epoch == 2
    resumed.fit()
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2]
    _config, model, (src_vocab, tgt_vocab) = load_run(tmp_path / "run", device="cpu")
    pairs = corpus.valid
    hyps = translate_pairs(model, pairs, src_vocab, tgt_vocab)
    again = translate_pairs(model, list(reversed(pairs)), src_vocab, tgt_vocab)
    assert hyps == list(reversed(again))  # order of the input is kept


def test_vmf_training_with_given_target_vectors(tmp_path):
    corpus = tiny_corpus()
    words = sorted({w for _, tgt in corpus.train for w in tgt})
    gen = torch.Generator().manual_seed(0)
    vectors = torch.randn(len(words), 12, generator=gen).numpy()
    trainer = NMTTrainer(small("multi30k/de-en-vmf"), tmp_path / "vmf", device="cpu",
                         corpus=corpus, target_vectors=(words, vectors), progress=False)
    record = trainer.fit().record
    assert record["epoch"] == 2 and trainer.model.is_continuous
    _, model, (src_vocab, tgt_vocab) = load_run(tmp_path / "vmf", device="cpu")
    assert translate_pairs(model, corpus.valid[:2], src_vocab, tgt_vocab)
    with pytest.raises(ValueError, match="nearest neighbour"):
        beam_search(model, torch.tensor([[5]]), torch.tensor([1]), bos=2, eos=3)


def test_vmf_tied_inputs_read_the_frozen_table(tmp_path):
    """The vMF paper's best setup: decoder inputs are the frozen target vectors through a
    trained Linear(m, emb_size); no target embedding is trained."""
    corpus = tiny_corpus()
    words = sorted({w for _, tgt in corpus.train for w in tgt})
    vectors = torch.randn(len(words), 12, generator=torch.Generator().manual_seed(0)).numpy()
    trainer = NMTTrainer(small("multi30k/de-en-vmf-maxmargin-tied"), tmp_path / "tied",
                         device="cpu", corpus=corpus, target_vectors=(words, vectors),
                         progress=False)
    trainer.fit(max_epochs=1)
    _, model, (src_vocab, tgt_vocab) = load_run(tmp_path / "tied", device="cpu")
    assert model.tgt_embed is None and model.head.decode_metric == "cosine"
    tokens = torch.tensor([[2, 5], [7, 3]])
    expected = model.head.target_embeddings[tokens] @ model.input_proj.weight.T \
        + model.input_proj.bias
    torch.testing.assert_close(model._input_embed(tokens), expected)
    untied = Seq2Seq(len(src_vocab), len(tgt_vocab), emb_size=16, hidden=16, head="vmf",
                     head_options={"target_embeddings": model.head.target_embeddings})
    count = sum(p.numel() for p in model.parameters())
    assert count == sum(p.numel() for p in untied.parameters()) \
        - len(tgt_vocab) * 16 + (12 * 16 + 16)  # no V x d embedding, a Linear(m, d)
    assert translate_pairs(model, corpus.valid[:2], src_vocab, tgt_vocab)
    # refused before the (missing) target embedding would confuse build_head
    with pytest.raises(ConfigError, match="input_from_targets feeds the decoder the frozen"):
        Seq2Seq(10, 10, emb_size=4, hidden=4, head="tied", input_from_targets=True)


needs_data = pytest.mark.skipif(
    not (Path(os.environ.get("DRILLBOOK_DATA", "/nonexistent")) / "multi30k").is_dir(),
    reason="needs the corpora: set DRILLBOOK_DATA (make test points it at ../shared/data)")


@needs_data
def test_cli_train_eval_translate(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    assert main(["train", "multi30k/de-en-softmax-tied", "--out", str(run), "--quiet", "--set",
                 "data.max_train_pairs=300", "train.epochs=1", "train.max_eval_pairs=20",
                 "model.hidden=16", "model.emb_size=16"]) == 0
    assert "best valid BLEU" in capsys.readouterr().out
    assert main(["eval", str(run), "--split", "test", "--max-tokens", "20", "--beam", "2",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["sentences"] == 20 and result["beam"] == 2 and result["bleu"] >= 0
    # reported BLEU is sacrebleu's on detokenised text, with its signature
    assert result["bleu_signature"].startswith("nrefs:1|case:lc|eff:no|tok:13a|smooth:exp")
    assert main(["eval", str(run), "--split", "test", "--max-tokens", "5"]) == 0
    assert "sacreBLEU signature: nrefs:1|case:lc" in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.StringIO("ein mann .\nzwei hunde .\n"))
    assert main(["translate", str(run)]) == 0
    tokenised = capsys.readouterr().out.splitlines()
    assert len(tokenised) == 2
    # --raw: ordinary text in (cased, punctuation attached), detokenised text out; the
    # model sees exactly the tokens of the tokenised input above
    monkeypatch.setattr("sys.stdin", io.StringIO("Ein Mann.\nZwei Hunde.\n"))
    assert main(["translate", str(run), "--raw"]) == 0
    from drillbook.nmt.text import moses_detokenize
    assert capsys.readouterr().out.splitlines() == [moses_detokenize(line.split(), "en")
                                                    for line in tokenised]
    # a blank line at the end is nothing to translate; one in the middle is named
    monkeypatch.setattr("sys.stdin", io.StringIO("ein mann .\n\n"))
    assert main(["translate", str(run)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    monkeypatch.setattr("sys.stdin", io.StringIO("ein mann .\n\nzwei hunde .\n"))
    with pytest.raises(SystemExit):
        main(["translate", str(run)])
    assert "standard input, line 2, is empty" in capsys.readouterr().err
    # the same UTF-8 rule on standard input (bytes) as on --input, the bad line named
    latin1 = "ein mann .\nzwei m\u00e4dchen .\n".encode("latin-1")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(latin1), encoding="latin-1"))
    with pytest.raises(SystemExit):
        main(["translate", str(run)])
    from_stdin = capsys.readouterr().err
    (tmp_path / "in.txt").write_bytes(latin1)
    with pytest.raises(SystemExit):
        main(["translate", str(run), "--input", str(tmp_path / "in.txt")])
    from_file = capsys.readouterr().err
    assert "standard input, line 2, is not UTF-8" in from_stdin
    assert f"{tmp_path / 'in.txt'}, line 2, is not UTF-8" in from_file
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(SystemExit):
        main(["translate", str(run)])
    assert "no sentence to translate in standard input" in capsys.readouterr().err


@pytest.mark.parametrize("arch", ["lstm", "transformer"])
def test_accuracy_by_frequency_counts_every_kept_token(arch):
    from drillbook.analysis import accuracy_by_frequency
    from drillbook.nmt.transformer import TransformerSeq2Seq

    corpus = tiny_corpus()
    src_vocab, tgt_vocab = corpus.build_vocabs()
    make, sizes = ((Seq2Seq, dict(emb_size=8, hidden=8)) if arch == "lstm" else
                   (TransformerSeq2Seq, dict(d_model=8, nhead=2, layers=1, d_ff=16)))
    model = make(len(src_vocab), len(tgt_vocab), head="tied", **sizes)
    rows = accuracy_by_frequency(model, corpus.train, src_vocab, tgt_vocab,
                                 bands=[(1, 3), (3, None)])
    kept = sum(1 for _, tgt in corpus.train for w in tgt if tgt_vocab.index(w) > 3)
    assert sum(r["tokens"] for r in rows) == kept
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in rows if r["tokens"])


@pytest.mark.parametrize("extra", [(), ("train.negative_sampling=50",)])
def test_two_fresh_runs_with_one_seed_are_identical(tmp_path, extra):
    """The book's claim that a rerun on the same machine and versions reproduces its
    numbers, for translation (sampled-softmax candidates included): same seed, same bits."""
    def run(folder):
        trainer = NMTTrainer(small("multi30k/de-en-drill", "train.epochs=1", *extra),
                             tmp_path / folder, device="cpu", corpus=tiny_corpus(),
                             progress=False)
        trainer.fit()
        return trainer

    a, b = run("a"), run("b")
    for (name, wa), wb in zip(a.model.state_dict().items(), b.model.state_dict().values(),
                              strict=True):
        assert torch.equal(wa, wb), name
    assert (tmp_path / "a" / "log.jsonl").read_text().count("val_loss") == 1
    la = [json.loads(x) for x in (tmp_path / "a" / "log.jsonl").read_text().splitlines()]
    lb = [json.loads(x) for x in (tmp_path / "b" / "log.jsonl").read_text().splitlines()]
    assert [r["val_loss"] for r in la] == [r["val_loss"] for r in lb]
    different = NMTTrainer(small("multi30k/de-en-drill", "train.epochs=1", "train.seed=5",
                                 *extra), tmp_path / "c", device="cpu",
                           corpus=tiny_corpus(), progress=False)
    different.fit()
    assert not torch.equal(next(iter(different.model.state_dict().values())),
                           next(iter(a.model.state_dict().values())))
