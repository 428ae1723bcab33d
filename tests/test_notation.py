"""Every symbol of the book's mathematics is on the notation page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
PAGES = [ROOT / "book" / "glossary.md", ROOT / "book" / "intro.md"]

GREEK = ("alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda "
         "mu nu xi pi varpi rho sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta "
         "Lambda Xi Pi Sigma Phi Psi Omega").split()


def prose(path: Path) -> str:
    """The text a reader reads: a chapter's markdown cells, or a page."""
    text = path.read_text()
    if path.suffix != ".py":
        return text
    lines, markdown = [], False
    for line in text.splitlines():
        if line.startswith("# %%"):
            markdown = "[markdown]" in line
        elif markdown and line.startswith("#"):
            lines.append(line[2:] if line.startswith("# ") else line[1:])
    return "\n".join(lines)


def math(text: str) -> list[str]:
    """The mathematics of ``text``: ``$$...$$`` blocks and ``$...$`` spans, outside code."""
    text = re.sub(r"```python.*?```", " ", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", " ", text)
    blocks = re.findall(r"\$\$(.+?)\$\$", text, flags=re.S)
    text = re.sub(r"\$\$(.+?)\$\$", " ", text, flags=re.S)
    return blocks + re.findall(r"(?<![\\$])\$([^$]+?)\$", text)


def symbols(tex: str) -> set[str]:
    """The symbols of a formula: its Latin letters and Greek letters, without the words in
    ``\\mathrm{}``/``\\text{}``, the commands (``\\log``, ``\\softmax``) and one-letter
    subscripts, which label a symbol (``b_u``, ``W_l``) rather than being one."""
    tex = re.sub(r"\\(mathrm|text|operatorname|mathbf|texttt|mathit|textrm)\{[^{}]*\}", " ", tex)
    tex = re.sub(r"_[A-Za-z]", " ", tex)
    found = set(re.findall(r"\\(" + "|".join(GREEK) + r")(?![A-Za-z])", tex))
    tex = re.sub(r"\\[A-Za-z]+", " ", tex)
    return found | set(re.findall(r"(?<![A-Za-z0-9])([A-Za-z])(?![A-Za-z])", tex))


def on_notation_page() -> set[str]:
    page = (ROOT / "book" / "notation.md").read_text()
    return set().union(*(symbols(span) for span in math(page)))


def test_the_symbol_finder_finds_symbols_and_skips_words_and_code(tmp_path):
    chapter = tmp_path / "99_probe.py"
    chapter.write_text("# %% [markdown]\n# With $\\omega_t = W_l x$ and $\\mathrm{PPL}$,\n"
                       "# `$HOME` and $$\\log Z$$\n\n# %%\nx = '$q$'\n")
    assert set().union(*map(symbols, math(prose(chapter)))) == {"omega", "W", "x", "Z"}


@pytest.mark.parametrize("path", CHAPTERS + PAGES, ids=lambda p: p.name)
def test_every_symbol_of_a_chapter_is_on_the_notation_page(path):
    listed = on_notation_page()
    missing = sorted(set().union(*map(symbols, math(prose(path)))) - listed)
    assert not missing, (f"{path.name} uses {missing} in its mathematics; add each to "
                         f"book/notation.md with its meaning (or use the symbol listed there)")


def test_mos_components_are_k_and_doc_vectors_are_j():
    """The two symbols the notation page keeps apart: no chapter writes MoS's count as J."""
    for path in CHAPTERS:
        assert not re.search(r"MoS[^.]*\$J = 15\$", prose(path)), path.name
