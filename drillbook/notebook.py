"""What every chapter notebook runs first: device, profile, seeds, figure style.

>>> from drillbook.notebook import setup
>>> nb = setup(seed=0)               # doctest: +SKIP
drillbook 0.1.0 | torch 2.x | device cpu | profile small (auto (cpu)) | seed 0
>>> n_steps = nb.pick(small=200, t4=1000, full=2000)  # doctest: +SKIP
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from . import __version__
from .runtime import Profile, resolve_device, resolve_profile, seed_everything
from .validation import BOOLEAN, SEED

__all__ = ["FigureError", "Session", "check_open_figures", "in_colab", "setup", "show_source"]


def in_colab() -> bool:
    """True inside Google Colab."""
    return "google.colab" in sys.modules


@dataclass(frozen=True)
class Session:
    """The choices a notebook made at its top.

    Attributes:
        device: where tensors go.
        profile: experiment size (see :mod:`drillbook.runtime`).
        seed: the seed every generator was reset to.
    """

    device: torch.device
    profile: Profile
    seed: int
    runs: Path | None = None

    @property
    def progress(self) -> bool:
        """Whether long cells show progress bars: not in the ``small`` profile (CI logs and
        a quick CPU run), yes on a GPU, where a cell may train for minutes."""
        return not self.profile.small

    def run_dir(self, name: str) -> Path:
        """A folder for the run folders of one experiment.

        Under ``runs`` (e.g. a Google Drive folder, so a Colab session that disconnects
        keeps its checkpoints and can resume) when :func:`setup` was given one, else a
        fresh temporary folder that the notebook's end forgets.
        """
        if self.runs is None:
            return Path(tempfile.mkdtemp(prefix=f"drillbook-{name}-"))
        folder = self.runs / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def pick(self, *, small, full, t4=None):
        """Shorthand for ``self.profile.pick(small=..., full=..., t4=...)``: ``t4`` is
        optional and falls back to ``full``."""
        return self.profile.pick(small=small, full=full, t4=t4)


def _figure_style() -> None:
    try:
        import matplotlib as mpl
        import seaborn as sns
    except ImportError:  # plotting extras not installed: leave matplotlib alone
        return
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    mpl.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "figure.figsize": (6.4, 4.0),
                         "axes.titleweight": "bold", "legend.fontsize": 9})
    if os.environ.get("DRILLBOOK_CHECK_FIGURES") == "1":
        _check_figures_after_each_cell()


class FigureError(Exception):
    """A figure a reader could not read (:func:`drillbook.plotting.figure_problems`)."""


def check_open_figures() -> None:
    """Run :func:`~drillbook.plotting.figure_problems` on every open figure.

    Raises:
        FigureError: one line per problem, naming the figure (its number, or the label a
            chapter gave it).
    """
    from matplotlib._pylab_helpers import Gcf

    from .plotting import figure_problems

    problems = [f"figure {manager.canvas.figure.get_label() or manager.num}: {problem}"
                for manager in Gcf.get_all_fig_managers()
                for problem in figure_problems(manager.canvas.figure)]
    if problems:
        raise FigureError("\n".join(problems))


def _check_figures_after_each_cell() -> None:
    """Check every figure before it is shown: ``pyplot.show`` checks the open figures
    first (a problem raises in the cell that drew it), and in IPython a ``post_execute``
    callback, run before the inline backend shows and closes what a cell left open, does
    the same for figures shown without ``show`` (a problem becomes the cell's error
    output, which nbval fails)."""
    import matplotlib.pyplot as plt

    if not getattr(plt.show, "checks_figures", False):
        shown = plt.show

        def show(*args, **kwargs):
            check_open_figures()
            return shown(*args, **kwargs)

        show.checks_figures = True
        plt.show = show
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    callbacks = shell.events.callbacks["post_execute"]
    if check_open_figures not in callbacks:
        callbacks.insert(0, check_open_figures)


def setup(seed: int = 0, device: str | torch.device | None = None, quiet: bool = False,
          profile: str = "auto", runs: str | Path | None = None) -> Session:
    """Pick the device and profile, seed every generator, set the figure style.

    Args:
        seed: seed for Python, numpy and torch.
        device: override the automatic choice (CUDA, then MPS, then CPU); checked with
            :func:`~drillbook.runtime.resolve_device` (a DeviceError if this machine
            lacks it).
        quiet: do not print the one-line summary.
        profile: ``small``, ``t4``, ``full``, or ``auto`` (the default), which defers to
            ``DRILLBOOK_PROFILE`` and then to the device (see :mod:`drillbook.runtime`).
            A chapter's Colab form field passes it.
        runs: where :meth:`Session.run_dir` puts run folders (None or ``""``: temporary
            folders). In Colab, a path under ``/content/drive`` mounts Google Drive first.

    Raises:
        DeviceError: see ``device``.
        ConfigError: ``profile`` (or ``DRILLBOOK_PROFILE``) is not a profile; ``seed`` is
            not an integer in ``[-2**63, 2**63)`` (:data:`~drillbook.validation.SEED`), or
            ``quiet`` not a boolean.
    """
    seed = SEED.check(seed, "setup: seed")  # checked before anything is chosen or printed
    quiet = BOOLEAN.check(quiet, "setup: quiet")
    dev = resolve_device(device)
    chosen = resolve_profile(dev, name=profile)
    seed_everything(seed)
    _figure_style()
    folder = Path(runs).expanduser() if runs else None
    if folder is not None and in_colab() and folder.parts[:3] == ("/", "content", "drive"):
        from google.colab import drive  # only inside Colab

        drive.mount("/content/drive")
    if not quiet:
        print(f"drillbook {__version__} | torch {torch.__version__.split('+')[0]} | "
              f"device {dev.type} | profile {chosen.name} ({chosen.source}) | seed {seed}")
    return Session(device=dev, profile=chosen, seed=seed, runs=folder)


def show_source(obj) -> None:
    """Display the source of a package function or class, highlighted.

    Chapters use it to put an equation next to the code that implements it, without
    copying the code into the notebook. Outside IPython (a chapter run as a script,
    ``python notebooks/02_tied_joint_drill.py``) the source is printed.
    """
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(obj))
    try:
        from IPython.display import Code, display
    except ImportError:
        print(source)
        return
    display(Code(source, language="python"))
