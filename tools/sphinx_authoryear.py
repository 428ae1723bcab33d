"""Sphinx extension: an author-year bibliography to go with the author-year citations.

``bibtex_reference_style: author_year`` makes sphinxcontrib-bibtex cite "(Pappas and
Henderson, 2019)" in the text, but the bibliography keeps the formatting style's labels
(``plain``: [1], [2], ...). This registers the pybtex formatting style ``author_year``:
``plain``'s entries and order (by author, year, title), labelled the way the text cites
them: "Pappas and Henderson, 2019", "Yang et al., 2018" (more than two authors: the first
and "et al."). Two entries that would get the same label get "2018a", "2018b".

Select it with ``bibtex_default_style: author_year`` in ``sphinx: config:``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from pybtex.database import Entry, Person
from pybtex.plugin import register_plugin
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle
from sphinx.application import Sphinx


def _surname(person: Person) -> str:
    """"von Last" as text (LaTeX accents decoded), the part of a name a citation shows."""
    parts = person.rich_prelast_names + person.rich_last_names
    return " ".join(part.render_as("text") for part in parts)


def _authors(entry: Entry) -> str:
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_surname(person) for person in people]
    if not names:
        return entry.fields.get("title", entry.key)
    if len(names) == 1:
        return names[0]
    if len(names) == 2:
        return f"{names[0]} and {names[1]}"
    return f"{names[0]} et al."


class AuthorYearLabelStyle(BaseLabelStyle):
    """Labels "Authors, Year", with a letter after the year where two would be equal."""

    def format_labels(self, sorted_entries: Iterable[Entry]) -> Iterator[str]:
        entries = list(sorted_entries)
        bases = [(_authors(entry), entry.fields.get("year", "n.d.")) for entry in entries]
        count = Counter(bases)
        seen: Counter = Counter()
        for authors, year in bases:
            suffix = ""
            if count[authors, year] > 1:
                suffix = "abcdefghijklmnopqrstuvwxyz"[seen[authors, year]]
                seen[authors, year] += 1
            yield f"{authors}, {year}{suffix}"


class AuthorYearStyle(PlainStyle):
    """pybtex's ``plain`` entries, labelled by :class:`AuthorYearLabelStyle`."""

    default_label_style = AuthorYearLabelStyle


def setup(app: Sphinx) -> dict:
    register_plugin("pybtex.style.formatting", "author_year", AuthorYearStyle)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
