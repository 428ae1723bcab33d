"""The website reads offline: MathJax and the Colab badge come from the build
(tools/sphinx_offline.py), and no page loads a script, an image or a style sheet from
another site.

A small Sphinx project built here exercises the extension on every run; the book's own
build (``make book-check``, which ``make test`` runs before the tests) is read when it
exists.
"""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

pytest.importorskip("sphinx")  # the ``book`` extra
pytest.importorskip("mathjax")  # django-static-mathjax, also the ``book`` extra

ROOT = Path(__file__).resolve().parent.parent
BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
REMOTE = re.compile(r"^(https?:)?//")


class _Sources(HTMLParser):
    """Every address a page loads by itself: scripts, images, style sheets."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("script", "img") and a.get("src"):
            self.loaded.append((tag, a["src"]))
        if tag == "link" and "stylesheet" in (a.get("rel") or "") and a.get("href"):
            self.loaded.append((tag, a["href"]))


def loaded(page: Path) -> list[tuple[str, str]]:
    """(tag, address) of each script, image and style sheet of an HTML page."""
    parser = _Sources()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.loaded


def loaded_from_elsewhere(page: Path) -> list[tuple[str, str]]:
    return [(tag, src) for tag, src in loaded(page) if REMOTE.match(src)]


# ------------------------------------------------------------------ a small project
def _build(tmp_path: Path, body: str, **config) -> tuple[Path, subprocess.CompletedProcess]:
    """A one-page Sphinx project with the extension, built in a process of its own (a
    second Sphinx in one process registers docutils' nodes twice, and says so)."""
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "images").mkdir(parents=True)
    (src / "images" / "badge.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>')
    (src / "index.rst").write_text(f"Page\n====\n\n{body}\n")
    settings = {"extensions": ["sphinx_offline"], "mathjax_path": "mathjax/tex-chtml.js",
                "offline_images": {BADGE: "images/badge.svg"}, **config}
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'tools')!r})\n"
        + "".join(f"{key} = {value!r}\n" for key, value in settings.items()))
    done = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", str(src),
                           str(out)], capture_output=True, text=True, check=False)
    return out, done


MATH_AND_BADGE = f""".. math:: \\sum_i x_i^2

.. image:: {BADGE}
   :alt: Open in Colab
"""


def test_mathjax_and_the_badge_come_from_the_site(tmp_path):
    out, done = _build(tmp_path, MATH_AND_BADGE)
    assert (done.returncode, done.stderr) == (0, "")
    page = out / "index.html"
    assert ("script", "_static/mathjax/tex-chtml.js") in loaded(page)
    assert ("img", "_images/badge.svg") in loaded(page)
    assert loaded_from_elsewhere(page) == []
    mathjax = out / "_static" / "mathjax"
    assert (mathjax / "tex-chtml.js").stat().st_size > 1_000_000  # the whole bundle
    fonts = list((mathjax / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    assert len(fonts) > 20  # the CHTML output's TeX fonts, loaded from beside the bundle
    assert (mathjax / "input" / "tex" / "extensions" / "boldsymbol.js").is_file()
    assert (out / "_images" / "badge.svg").is_file()


def test_another_remote_image_is_reported(tmp_path):
    _, done = _build(tmp_path, ".. image:: https://example.org/picture.png\n")
    warnings = done.stderr.strip().splitlines()
    assert len(warnings) == 1, warnings
    assert "https://example.org/picture.png" in warnings[0]
    assert "offline_images" in warnings[0]


@pytest.mark.parametrize("path", [
    "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-chtml.js", "/mathjax/tex-chtml.js",
    "../mathjax/tex-chtml.js", "mathjax/no-such-bundle.js"])
def test_mathjax_path_must_be_a_bundle_inside_the_site(tmp_path, path):
    _, done = _build(tmp_path, "text", mathjax_path=path)
    assert done.returncode != 0
    assert f"mathjax_path = {path!r}" in done.stderr


def test_an_image_listed_without_its_copy_is_refused(tmp_path):
    _, done = _build(tmp_path, "text", offline_images={BADGE: "images/missing.svg"})
    assert done.returncode != 0
    assert "'images/missing.svg'" in done.stderr and "not a file of the book" in done.stderr


# ------------------------------------------------------------------ the book's config
def test_the_book_configures_both():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]
    assert config["local_extensions"]["sphinx_offline"] == "tools"
    assert config["config"]["mathjax_path"] == "mathjax/tex-chtml.js"
    badge = ROOT / config["config"]["offline_images"][BADGE]
    assert badge.suffix == ".svg"
    assert badge.read_text().lstrip().startswith("<svg")
    assert not REMOTE.search(badge.read_text().replace('xmlns="http://www.w3.org/2000/svg"',
                                                       ""))


def test_every_chapter_shows_the_badge_that_is_replaced():
    for py in sorted((ROOT / "notebooks").glob("*.py")):
        assert f"[![Open In Colab]({BADGE})]" in py.read_text(), py.name


# ------------------------------------------------------------------ the book as built
BUILT = ROOT / "_build" / "html"


@pytest.mark.skipif(not (BUILT / "index.html").exists(),
                    reason="the book is not built here (make book-check builds it)")
def test_the_built_book_loads_nothing_from_elsewhere():
    pages = sorted(BUILT.rglob("*.html"))
    assert len(pages) > 10
    remote = {f"{page.relative_to(BUILT)}: {tag} {src}" for page in pages
              for tag, src in loaded_from_elsewhere(page)}
    assert remote == set()
    chapter = BUILT / "notebooks" / "04_vmf_continuous_outputs.html"
    assert ("script", "../_static/mathjax/tex-chtml.js") in loaded(chapter)
    assert any(tag == "img" and src.endswith("colab-badge.svg")
               for tag, src in loaded(chapter))
    assert (BUILT / "_static" / "mathjax" / "tex-chtml.js").is_file()
