"""Sphinx extension: the website reads offline.

Two things on the book's pages would otherwise come from the network each time a page is
opened: MathJax, which Sphinx loads from a CDN, and the Colab badge at the top of every
chapter, an image on Colab's site. Opened from ``_build/html`` without a network, a page
would show raw TeX and the badge's alt text. This extension serves both from the build:

* **MathJax.** ``mathjax_path`` (in ``_config.yml``'s ``sphinx: config:``) names a file
  inside the site's ``_static/``, ``mathjax/tex-chtml.js``. When an HTML build ends,
  :func:`copy_mathjax` copies that MathJax 3 bundle there from the installed
  ``django-static-mathjax`` package (MathJax 3.2's distribution as package data; the
  ``book`` extra installs it), with every file the bundle loads by itself or from its
  menu (:data:`MATHJAX_PARTS`): the CHTML and SVG output and their fonts, the TeX
  extensions it loads on demand (``\\boldsymbol``, ``\\require``, ...), the menu and the
  accessibility parts. The speech-rule engine (``sre/``, 3.9 MB, for reading formulas
  aloud) is left out.
* **Images.** ``offline_images`` (also in ``sphinx: config:``) maps a remote image's
  address to a file of the book, relative to the book's root; :class:`LocalImages` puts
  the file in the address's place while each page is read, so Sphinx copies it into the
  site like any other image. The notebooks keep the remote badge, which Colab and GitHub
  show. Any other remote image is a warning naming the page and the address, an error in
  the book's warnings-as-errors build.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path, PurePosixPath

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ExtensionError
from sphinx.transforms import SphinxTransform
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: the PyPI package that ships MathJax 3's distribution (its module is ``mathjax``)
MATHJAX_PACKAGE = "django-static-mathjax"
#: what of the distribution's ``es5/`` folder the site needs beside the bundle itself:
#: the TeX extensions it loads on demand, both outputs with their fonts (the menu switches
#: between them), the menu and the accessibility components
MATHJAX_PARTS = ("input/tex/extensions", "output", "ui", "a11y")
REMOTE = ("http://", "https://", "//")


def mathjax_source() -> Path:
    """The ``es5/`` folder of the installed MathJax 3 distribution.

    Raises:
        ExtensionError: the package is missing or holds no ``es5/tex-chtml.js``.
    """
    spec = importlib.util.find_spec("mathjax")
    if spec is not None and spec.origin is not None:
        es5 = Path(spec.origin).parent / "static" / "mathjax" / "es5"
        if (es5 / "tex-chtml.js").is_file():
            return es5
    raise ExtensionError(f"the site serves MathJax itself and takes it from the "
                         f"{MATHJAX_PACKAGE} package, which is not installed: run "
                         f"`pip install {MATHJAX_PACKAGE}` (part of drillbook[book])")


def check_config(app: Sphinx, config: Config) -> None:
    """``mathjax_path`` must name a file inside ``_static/`` that the distribution has."""
    path = str(config.mathjax_path or "")
    if path.startswith(REMOTE) or PurePosixPath(path).is_absolute() or ".." in path:
        raise ExtensionError(f"mathjax_path = {path!r} is not a file of the site: set it "
                             f"to a path inside _static, e.g. 'mathjax/tex-chtml.js', so "
                             f"that pages render their mathematics offline")
    if not (mathjax_source() / PurePosixPath(path).name).is_file():
        raise ExtensionError(f"mathjax_path = {path!r}: {MATHJAX_PACKAGE} has no MathJax "
                             f"bundle of that name; use 'mathjax/tex-chtml.js'")
    for remote, local in config.offline_images.items():
        if not (Path(app.srcdir) / local).is_file():
            raise ExtensionError(f"offline_images: {local!r} (in place of {remote}) is not "
                                 f"a file of the book")


def copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    """Copy the bundle named by ``mathjax_path`` and :data:`MATHJAX_PARTS` beside it."""
    if exception is not None or app.builder.format != "html":
        return
    source = mathjax_source()
    bundle = PurePosixPath(app.config.mathjax_path)
    target = Path(app.outdir) / "_static" / bundle.parent
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source / bundle.name, target / bundle.name)
    for part in MATHJAX_PARTS:
        shutil.copytree(source / part, target / part, dirs_exist_ok=True)


class LocalImages(SphinxTransform):
    """Each remote image named in ``offline_images`` becomes its local copy; any other
    remote image is reported. Runs while a page is read, before Sphinx collects the
    page's images to copy them."""

    default_priority = 400

    def apply(self, **kwargs) -> None:
        local = self.config.offline_images
        for node in self.document.findall(nodes.image):
            uri = node["uri"]
            if uri in local:
                node["uri"] = "/" + str(PurePosixPath(local[uri]))  # from the book's root
                if "candidates" in node:
                    del node["candidates"]
            elif uri.startswith(REMOTE):
                logger.warning(f"a remote image, {uri}, would not show on a page read "
                               f"offline: add it to offline_images in _config.yml with a "
                               f"copy in the book", location=node)


def setup(app: Sphinx) -> dict:
    app.setup_extension("sphinx.ext.mathjax")
    app.add_config_value("offline_images", {}, "env", types=[dict])
    app.connect("config-inited", check_config)
    app.add_transform(LocalImages)
    app.connect("build-finished", copy_mathjax)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
