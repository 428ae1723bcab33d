"""Named configs of both tasks: the papers' setups, and small ``tutorial/`` ones for a CPU.

:func:`get_config` and :func:`list_configs` look a name up in the one registry; code that
needs to know which kind it got asks the config its
:attr:`~drillbook.configs.base.SectionedConfig.task`, and :func:`config_from_dict` reads a
config of either task back.

Hyper-parameters follow the authors' public code (see the book's appendix on sources):
AWD-LSTM (Merity et al., 2018) for ``*/awd-lstm*``, DRILL (Pappas & Henderson, 2019)
for ``*/awd-lstm-drill``, MoS (Yang et al., 2018) and DOC (Takase et al., 2018) for the
mixtures. Seeds are those of the authors' README commands for the same run. ``paper`` is
the key in :data:`drillbook.papers.RECORD` of the authors' final result for the setup
(after fine-tuning); the reproduction tables name their own records row by row.

DRILL Table 4's bilinear and dual baselines: the paper's footnote 6 says they used dropout
and residual connections (to ``E`` and to ``h_t``) *where that helped validation*, without
saying where it did, and the authors' README gives no command for them. The heads offer
those options (``dropout``, ``dropout_kind``, ``residual`` / ``residual_label``,
``residual_context``); ``ptb/awd-lstm-bilinear`` and ``ptb/awd-lstm-dual`` leave them off,
so they are the plain layers of DRILL Eqs. 3 and 5. Switch them on with ``--set
head.options.residual_label=true`` and the like to search as the authors did.

Parameter counts: the DRILL paper's Table 4 prints totals truncated to 0.1M (24,382,000
is printed as 24.3M); :func:`paper_millions` does the same so tests can compare.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from ..errors import ConfigError
from ..validation import check_choice
from .base import HeadConfig, SectionedConfig
from .language_model import Config, DataConfig, ModelConfig, TrainConfig
from .translation import NMTConfig, NMTDataConfig, NMTModelConfig

__all__ = ["FINETUNE_LR", "LANGUAGE_MODEL", "TRANSLATION", "config_classes",
           "config_from_dict", "finetune_lr", "get_config", "get_nmt_config", "list_configs",
           "list_nmt_configs", "paper_millions", "register_config_class", "task_named_by",
           "unregister_config_class"]

#: the two tasks, as configs name them (:attr:`SectionedConfig.task`)
LANGUAGE_MODEL, TRANSLATION = Config.task, NMTConfig.task

#: seeds of the authors' README commands (salesforce/awd-lstm-lm, idiap/drill,
#: zihangdai/mos, nttcslab-nlp/doc_lm): AWD-LSTM PTB 141 (the TrainConfig default), every
#: WikiText-2 command 1882, DRILL/MoS/DOC on PTB 28. The full-softmax, bilinear and dual
#: baselines have no command of their own: they keep AWD-LSTM's.
SEED_WT2, SEED_PTB_DRILL_MOS_DOC = 1882, 28

#: learning rate of the authors' fine-tuning command where it differs from training's:
#: MoS's README fine-tunes at 25 on PTB and 20 on WikiText-2 (trained at 20 and 15).
#: AWD-LSTM's, DRILL's and DOC's fine-tuning commands repeat the training rate.
FINETUNE_LR: dict[str, float] = {"ptb/awd-lstm-mos": 25.0, "wt2/awd-lstm-mos": 20.0}


def paper_millions(n: int) -> float:
    """A parameter count as the DRILL paper prints it: millions, truncated to 0.1."""
    return math.floor(n / 1e5) / 10


def finetune_lr(name: str) -> float | None:
    """The learning rate the authors fine-tune the named config at, when it is not the
    training rate (None: fine-tune at ``train.lr``)."""
    return FINETUNE_LR.get(name)


def _ptb(name: str, description: str, head: HeadConfig, paper: str | None,
         **model) -> Config:
    return Config(name=name, description=description, data=DataConfig("ptb"),
                  model=ModelConfig(**model), head=head, train=TrainConfig(), paper=paper)


def _wt2(cfg: Config, name: str, description: str, paper: str | None) -> Config:
    """The WikiText-2 counterpart of a PTB config (AWD-LSTM's WT2 settings and seed)."""
    cfg = cfg.copy()
    cfg.name, cfg.description, cfg.paper = name, description, paper
    cfg.data.corpus = "wikitext-2"
    cfg.model.dropouth, cfg.model.dropouti = 0.2, 0.65
    cfg.train.batch_size, cfg.train.epochs, cfg.train.seed = 80, 750, SEED_WT2
    return cfg


def _drill_ptb() -> Config:
    cfg = _ptb("ptb/awd-lstm-drill", "AWD-LSTM with a 4-layer DRILL head (sigmoid, "
               "variational dropout 0.6)",
               HeadConfig("drill", {"depth": 4, "activation": "sigmoid", "dropout": 0.6,
                                    "dropout_kind": "variational"}),
               "drill:table1:awd-lstm-drill")
    cfg.train.epochs, cfg.train.seed = 1000, SEED_PTB_DRILL_MOS_DOC
    return cfg


def _drill_wt2() -> Config:
    cfg = _wt2(_drill_ptb(), "wt2/awd-lstm-drill", "AWD-LSTM with a 4-layer DRILL head "
               "(relu, standard dropout 0.6) on WikiText-2", "drill:table2:awd-lstm-drill")
    cfg.head.options.update({"activation": "relu", "dropout_kind": "standard"})
    cfg.train.epochs = 2000
    return cfg


def _mixture(name: str, corpus: str, head: HeadConfig, paper: str, *, nonmono: int,
             epochs: int, dropouti: float, dropouth: float) -> Config:
    """The MoS/DOC papers' AWD-LSTM: a narrower embedding, a 3-layer LSTM whose last layer
    is wider than the embedding (the mixture head projects it down)."""
    ptb = corpus == "ptb"
    return Config(
        name=name, description=f"AWD-LSTM with a {head.kind.upper()} head"
                               + ("" if ptb else " on WikiText-2"),
        data=DataConfig(corpus),
        model=ModelConfig(emsize=280 if ptb else 300, nhid=960 if ptb else 1150, nlayers=3,
                          d_out=620 if ptb else 650, dropout=0.4, dropouth=dropouth,
                          dropouti=dropouti, dropoute=0.1, wdrop=0.5),
        head=head,
        train=TrainConfig(batch_size=12 if ptb else 15, lr=20.0 if ptb else 15.0,
                          nonmono=nonmono, epochs=epochs,
                          seed=SEED_PTB_DRILL_MOS_DOC if ptb else SEED_WT2),
        paper=paper)


def _mos(corpus: str) -> Config:
    ptb = corpus == "ptb"
    return _mixture(
        f"{'ptb' if ptb else 'wt2'}/awd-lstm-mos", corpus,
        HeadConfig("mos", {"n_experts": 15, "latent_dropout": 0.29,
                           "chunk_size": None if ptb else 256}),
        f"doc:table{7 if ptb else 8}:awd-lstm-mos",
        nonmono=5, epochs=1000, dropouti=0.4 if ptb else 0.55,
        dropouth=0.225 if ptb else 0.2)


def _doc(corpus: str) -> Config:
    ptb = corpus == "ptb"
    return _mixture(
        f"{'ptb' if ptb else 'wt2'}/awd-lstm-doc", corpus,
        HeadConfig("doc", {"vectors_per_layer": [0, 0, 5, 15], "latent_dropout": 0.6,
                           "cv_weight": 0.001, "chunk_size": None if ptb else 256}),
        f"doc:table{7 if ptb else 8}:awd-lstm-doc",
        nonmono=60, epochs=500, dropouti=0.4 if ptb else 0.65, dropouth=0.225 if ptb else 0.2)


def _tutorial(name: str, head: HeadConfig, corpus: str = "ptb") -> Config:
    """Small enough for a laptop CPU: 2 x 256 LSTM, 128-d embeddings, capped epochs."""
    return Config(
        name=name,
        description=f"CPU-sized {head.kind} head on {corpus} (minutes, not hours)",
        data=DataConfig(corpus),
        model=ModelConfig(emsize=128, nhid=256, nlayers=2, dropout=0.2, dropouth=0.1,
                          dropouti=0.2, dropoute=0.0, wdrop=0.2),
        head=head,
        train=TrainConfig(batch_size=32, eval_batch_size=32, test_batch_size=32, bptt=35,
                          lr=20.0, epochs=2, max_batches_per_epoch=150,
                          max_eval_tokens=20_000, nonmono=2, checkpoint_minutes=2.0,
                          log_interval=50),
    )


def _tutorial_transformer(name: str, head: HeadConfig) -> Config:
    """The tutorial run with a small causal Transformer instead of the AWD-LSTM.

    Two pre-norm blocks of width 128 (4 attention heads, feed-forward 512, dropout 0.1),
    trained with Adam at 2e-3 and gradient clipping at 1, without AR/TAR (they regularise
    an LSTM's activations); the data, batches and budget are the AWD-LSTM tutorial's. A
    CPU-sized stand-in for DRILL Table 5's Transformer (base), which is a translation
    model with 6 + 6 blocks of width 512.
    """
    config = _tutorial(name, head)
    config.description = f"CPU-sized Transformer LM with a {head.kind} head on ptb"
    config.model = ModelConfig(encoder="transformer", emsize=128, nlayers=2, nhead=4,
                               d_ff=512, dropout=0.1, max_len=256)
    t = config.train
    t.optimizer, t.lr, t.clip, t.wdecay, t.alpha, t.beta = "adam", 2e-3, 1.0, 0.0, 0.0, 0.0
    return config


def _language_models() -> dict[str, Callable[[], Config]]:
    tied = HeadConfig("tied")
    b: dict[str, Callable[[], Config]] = {
        "ptb/awd-lstm": lambda: _ptb(
            "ptb/awd-lstm", "AWD-LSTM with a tied softmax (the baseline)", tied,
            "drill:table1:awd-lstm"),
        "ptb/awd-lstm-full-softmax": lambda: _ptb(
            "ptb/awd-lstm-full-softmax", "AWD-LSTM with an untied softmax on a 1150-d last "
            "layer", HeadConfig("softmax"),
            "drill:table4:full-softmax", d_out=1150),
        "ptb/awd-lstm-bilinear": lambda: _ptb(
            "ptb/awd-lstm-bilinear", "AWD-LSTM with a bilinear output layer E W h",
            HeadConfig("bilinear"), "drill:table4:bilinear"),
        "ptb/awd-lstm-dual": lambda: _ptb(
            "ptb/awd-lstm-dual", "AWD-LSTM with the dual nonlinear (joint) output layer",
            HeadConfig("dual", {"d_joint": 400, "activation": "tanh"}),
            "drill:table4:dual"),
        "ptb/awd-lstm-drill": _drill_ptb,
        "wt2/awd-lstm-drill": _drill_wt2,
    }
    for key in ["awd-lstm", "awd-lstm-full-softmax", "awd-lstm-bilinear", "awd-lstm-dual"]:
        b[f"wt2/{key}"] = (lambda key=key: _wt2(
            b[f"ptb/{key}"](), f"wt2/{key}", b[f"ptb/{key}"]().description + " on WikiText-2",
            "drill:table2:awd-lstm" if key == "awd-lstm" else None))
    for corpus in ("ptb", "wikitext-2"):
        for make in (_mos, _doc):
            b[make(corpus).name] = (lambda make=make, corpus=corpus: make(corpus))
    for kind, options in [("tied", {}), ("drill", {"depth": 2, "dropout": 0.3})]:
        name = f"tutorial/ptb-transformer-{kind}"
        b[name] = (lambda name=name, kind=kind, options=options:
                   _tutorial_transformer(name, HeadConfig(kind, dict(options))))
    return b


# ------------------------------------------------------------------ translation
# Two kinds of "tied" appear in the papers, so the names say which:
# * multi30k/de-en-softmax-tied: a softmax whose output matrix is the decoder's input
#   embedding (weight tying, the ``tied`` head; the joint-embedding paper's baseline);
# * multi30k/de-en-vmf-<loss>-tied: a continuous-output model whose decoder *inputs* are
#   the frozen pretrained target embeddings (model.input_from_targets), the vMF paper's
#   "tied" column (Table 1) and its best setups (vmf:table1:fasttext-tied-* in the paper
#   record). The extracted paper text lost which regulariser that NLLvMF row used, so both
#   reg1 and reg2 are provided. Here the vectors are GloVe 50-d and the data Multi30k, so
#   the numbers are not comparable with the paper's.
def _multi30k(head: str, options: dict | None = None, *, pair=("de", "en"),
              embeddings: str | None = None, description: str = "",
              input_from_targets: bool = False) -> NMTConfig:
    src, tgt = pair
    name = f"multi30k/{src}-{tgt}-{head}"
    return NMTConfig(
        name=name, description=description or f"{src}->{tgt} with a {head} output layer",
        data=NMTDataConfig(src=src, tgt=tgt, target_embeddings=embeddings),
        model=NMTModelConfig(input_from_targets=input_from_targets),
        head=HeadConfig(head, dict(options or {})))


def _translations() -> dict[str, Callable[[], NMTConfig]]:
    b = {}
    for head, options in [("softmax", {}), ("tied", {}), ("bilinear", {}),
                          ("dual", {"d_joint": 512, "activation": "tanh"}),
                          ("drill", {"depth": 2, "activation": "relu", "dropout": 0.3,
                                     "dropout_kind": "standard"})]:
        cfg = _multi30k(head, options)
        if head == "tied":  # a weight-tied softmax, not the vMF paper's tied inputs
            cfg.name = "multi30k/de-en-softmax-tied"
            cfg.description = "de->en with a weight-tied softmax (output matrix = input " \
                              "embedding)"
        b[cfg.name] = cfg.copy
    for loss in ["nllvmf", "reg1", "reg2", "l2", "cosine", "maxmargin"]:
        cfg = _multi30k("vmf", {"loss": loss}, embeddings="glove-50d",
                        description=f"de->en, continuous outputs on GloVe-50d, {loss} loss")
        cfg.name = f"multi30k/de-en-vmf-{loss}" if loss != "nllvmf" else "multi30k/de-en-vmf"
        b[cfg.name] = cfg.copy
    for loss in ["reg1", "reg2", "maxmargin"]:  # the vMF paper's best rows: tied inputs
        cfg = _multi30k("vmf", {"loss": loss}, embeddings="glove-50d",
                        input_from_targets=True,
                        description=f"de->en, continuous outputs on GloVe-50d, {loss} loss, "
                                    f"decoder inputs tied to the frozen target embeddings")
        cfg.name = f"multi30k/de-en-vmf-{loss}-tied"
        b[cfg.name] = cfg.copy
    for pair in [("en", "de"), ("en", "fr")]:
        cfg = _multi30k("softmax", pair=pair)
        b[cfg.name] = cfg.copy
    for base in ("multi30k/de-en-softmax", "multi30k/de-en-drill"):  # CPU-sized, like tutorial/
        cfg = b[base]()
        cfg.name = f"{base}-tutorial"
        cfg.description += "; tutorial size: 128 units, 3 epochs, minutes on a CPU"
        cfg.model.emb_size = cfg.model.hidden = 128
        cfg.train.epochs, cfg.train.lr, cfg.train.max_eval_pairs = 3, 0.003, 200
        b[cfg.name] = cfg.copy
    b.update(_transformers())
    return b


#: the Transformer translation rows: (name suffix, head, options at width d)
def _transformer_heads(d: int, drill_dropout: float) -> list[tuple[str, str, dict]]:
    return [("tied", "tied", {}),
            ("dual", "dual", {"d_joint": d, "activation": "tanh"}),
            ("drill", "drill", {"depth": 2, "activation": "sigmoid", "dropout": drill_dropout,
                                "dropout_kind": "standard", "residual": True})]


def _transformers() -> dict[str, Callable[[], NMTConfig]]:
    """Transformer encoder-decoders (``model.arch = "transformer"``) on Multi30k de-en with
    a weight-tied softmax, the dual nonlinear mapping, or DRILL (DRILL Sec. 4.2-4.3):

    * ``multi30k/de-en-transformer-<head>``: a size a CPU trains (3 + 3 pre-norm blocks of
      width 128, the laptop plans' translation width, 4 attention heads, feed-forward
      512), the DRILL label encoder as in Table 5 but for its width (2 layers, sigmoid,
      residual to E, dropout 0.6);
    * ``multi30k/de-en-transformer-base-<head>``: Transformer (base) (6 + 6 blocks of width
      512, 8 heads, feed-forward 2048; pre-norm as OpenNMT-py, which the DRILL authors
      used) with Table 5's label encoder (2 layers of 512, dropout 0.6, sigmoid, residual
      to E), for a GPU; trained on Multi30k, not on WMT English-German.

    Both: Adam (beta2 0.98), the inverse-square-root warm-up schedule, label smoothing
    0.1, dropout 0.1, separate source and target vocabularies (the target embedding tied
    to the head's), sinusoidal positions. Table 5's parameter counts
    (``drill:sec4.3:transformer-params`` and ``-drill-params`` in the paper record) are
    checked against the base configs by the tests, not named as ``paper``: that field names
    an authors' final result a table row is compared with."""
    b: dict[str, Callable[[], NMTConfig]] = {}
    sizes = {"": dict(d_model=128, nhead=4, layers=3, d_ff=512),
             "-base": dict(d_model=512, nhead=8, layers=6, d_ff=2048)}
    for size, dims in sizes.items():
        for suffix, head, options in _transformer_heads(dims["d_model"], 0.6):
            cfg = _multi30k(head, options)
            cfg.name = f"multi30k/de-en-transformer{size}-{suffix}"
            what = "Transformer (base)" if size else "CPU-sized Transformer"
            cfg.description = f"de->en, {what} with a {suffix} output layer"
            cfg.model = NMTModelConfig(arch="transformer", dropout=0.1, **dims)
            t = cfg.train
            t.label_smoothing, t.adam_beta2, t.clip, t.epochs = 0.1, 0.98, 1.0, 40
            t.batch_size, t.lr, t.warmup = (128, 7e-4, 4000) if size else (64, 7e-4, 1000)
            b[cfg.name] = cfg.copy
    return b


def _tutorials() -> dict[str, Callable[[], Config]]:
    """``tutorial/ptb-<kind>`` for every head of the registry that can end a language
    model, with the options its class declares for the tutorial's size
    (:attr:`~drillbook.heads.OutputHead.tutorial`). Read from the registry at each
    look-up, so a head registered after import has its config too."""
    from ..heads.registry import HEADS, language_model_refusal  # torch: only when asked

    return {f"tutorial/ptb-{kind}": (lambda kind=kind, cls=cls: _tutorial(
                f"tutorial/ptb-{kind}", HeadConfig(kind, cls.tutorial_options())))
            for kind, cls in HEADS.items() if language_model_refusal(cls) is None}


#: the papers' configs and the fixed tutorial ones of both tasks: name -> a function that
#: builds a fresh copy (:func:`_configs` adds the tutorial config of every head)
_CONFIGS: dict[str, Callable[[], SectionedConfig]] = {**_language_models(), **_translations()}


#: the config class of each task, by the task's name: the two of this package, and those
#: a task registered (:func:`register_config_class`)
_CLASSES: dict[str, type[SectionedConfig]] = {cls.task: cls for cls in (Config, NMTConfig)}
#: the named configs of registered tasks
_REGISTERED: dict[str, Callable[[], SectionedConfig]] = {}


def register_config_class(cls: type[SectionedConfig],
                          configs: dict[str, Callable[[], SectionedConfig]]) -> None:
    """Read the configs of ``cls.task`` with ``cls``, and know its named ``configs``
    (``name -> () -> config``): what :func:`drillbook.train.register_task` calls for a
    task's package.

    Raises:
        ConfigError: a config name already taken by another config.
    """
    taken = sorted(set(configs) & set(_configs()) - set(_REGISTERED))
    if taken:
        raise ConfigError(f"the config names {taken} are taken: give the task's configs "
                          f"names of their own")
    _CLASSES[cls.task] = cls
    _REGISTERED.update(configs)


def unregister_config_class(cls: type[SectionedConfig],
                            configs: dict[str, Callable[[], SectionedConfig]]) -> None:
    """Undo :func:`register_config_class` (this package's own classes stay)."""
    if cls not in (Config, NMTConfig):
        _CLASSES.pop(cls.task, None)
    for name in configs:
        _REGISTERED.pop(name, None)


def _configs() -> dict[str, Callable[[], SectionedConfig]]:
    """Every named config of every task: name -> a function that builds a fresh copy."""
    return {**_CONFIGS, **_tutorials(), **_REGISTERED}


def list_configs(task: str | None = None) -> list[str]:
    """The names of the named configs, sorted; only those of ``task`` if given
    (``"language-model"`` or ``"translation"``)."""
    if task is None:
        return sorted(_configs())
    check_choice(task, sorted(config_classes()), "task")
    return sorted(name for name, build in _configs().items() if build().task == task)


def get_config(name: str) -> SectionedConfig:
    """A fresh copy of a named config of either task (its ``task`` says which).

    Raises:
        ConfigError: unknown name; the message lists the valid ones.
    """
    configs = _configs()
    check_choice(name, sorted(configs), "config")
    return configs[name]()


def list_nmt_configs() -> list[str]:
    """The names of the translation configs (``list_configs("translation")``)."""
    return list_configs(TRANSLATION)


def get_nmt_config(name: str) -> NMTConfig:
    """A fresh copy of a named translation config (ConfigError listing names if unknown)."""
    check_choice(name, list_nmt_configs(), "translation config")
    return _configs()[name]()


def config_classes() -> dict[str, type[SectionedConfig]]:
    """The config class of each task: ``{"language-model": Config, "translation":
    NMTConfig}`` and those registered (:func:`register_config_class`)."""
    return dict(_CLASSES)


def config_from_dict(d: dict) -> SectionedConfig:
    """The validated config a :meth:`~SectionedConfig.to_dict` dict describes, of the class
    its ``"task"`` names. A dict without one (written before configs named their task) is
    read by the class whose ``data`` section has every key it gives.

    Raises:
        ConfigError: not a dict, an unknown task, or what
            :meth:`SectionedConfig.from_dict` refuses.
    """
    if not isinstance(d, dict):
        raise ConfigError(f"a config must be a JSON object, got {type(d).__name__}")
    classes = config_classes()
    task = task_named_by(d)
    if task not in classes:
        raise ConfigError(f"unknown task {task!r}; a config's task is one of "
                          f"{', '.join(sorted(classes))}")
    return classes[task].from_dict(d)


def task_named_by(d: dict) -> str:
    """The task a :meth:`~SectionedConfig.to_dict` dict is of, without reading the rest:
    its ``"task"``, or for a dict without one (written before configs named their task) the
    task whose ``data`` section has every key it gives (a language model when none has)."""
    task = d.get("task")
    if task is not None:
        return task
    data = d.get("data") if isinstance(d.get("data"), dict) else {}
    return next((t for t, cls in config_classes().items()
                 if set(data) <= {f.name for f in dataclasses.fields(cls.sections()["data"])}),
                LANGUAGE_MODEL)
