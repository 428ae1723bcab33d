"""Sphinx extension for the book's reference pages: generated from the code, never copied.

Loaded by Jupyter Book through ``sphinx: local_extensions:`` in ``_config.yml``. It adds

``.. drillbook-cli::``
    the command-line reference: the ``--help`` text of the ``drillbook`` parser and of each
    subcommand, taken from :func:`drillbook.cli.build_parser` at build time, one section per
    subcommand (nested for a subcommand's own, ``drillbook bench heads``), so the page says
    exactly what the installed command says.

``.. drillbook-registry:: drillbook.heads.HEADS``
    a table of a name -> class/function registry: each name, a link to what it maps to and
    the first paragraph of that object's docstring; with ``:attributes: a b``, one column
    per attribute instead, with each object's value (``is_mixture``: yes or blank). For
    reStructuredText (an ``{eval-rst}`` block in a MyST page): the cells are parsed as such.

``.. drillbook-registry-modules:: drillbook.heads.HEADS``
    one section per module that defines an object of the registry, in the registry's order,
    titled by the names it defines ("mos and doc") and holding the module's ``automodule``:
    a head registered in a new module has its reference section without an edit of the page.

Two adjustments to napoleon. Attribute, data and property docstrings are prose here:
napoleon would read the first line of one as ``type: description`` (Google style) and turn
"True: the head ..." into a type called "True", so they get napoleon's ordinary treatment
instead. And an "Attributes:" entry that names several attributes (``n_rows, n_cols: ...``)
becomes one description with a signature, and a link target, for each of them.

Every object is documented once, in the module that defines it
(``drillbook.heads.drill.DrillHead``): ``automodule`` skips the classes and functions a
module only re-exports. Docstrings and chapters also name the public path
(``drillbook.heads.DrillHead``, or ``DrillHead`` inside ``drillbook.heads``), so a Python
cross-reference Sphinx cannot resolve is imported, and if the object it names is documented
under another name, the reference points there.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import re
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.ext.napoleon.docstring import GoogleDocstring
from sphinx.util.docutils import SphinxDirective

#: Column width of the rendered ``--help`` texts (independent of the build's terminal).
HELP_WIDTH = 88


def _import_object(dotted: str) -> Any:
    """The object a dotted path names: the longest importable module prefix, then getattr."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"cannot import {dotted!r}")


def _summary(obj: Any) -> str:
    """The first paragraph of an object's docstring, on one line."""
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n")[0].split())


# ------------------------------------------------------------------ command line
def _help_text(parser: argparse.ArgumentParser) -> str:
    """``parser.format_help()`` at :data:`HELP_WIDTH` columns, whatever the terminal."""
    parser.formatter_class = functools.partial(parser.formatter_class, width=HELP_WIDTH)
    return parser.format_help()


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """``(name, one-line help, parser)`` of each subcommand, in the order ``--help`` lists."""
    for action in parser._actions:  # argparse keeps no public list of subparsers
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


class CLIDirective(SphinxDirective):
    """The ``drillbook`` command's ``--help``, then one section per subcommand (and, inside
    it, one per subcommand of its own, as ``drillbook bench heads``)."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from pathlib import Path

        from drillbook import cli

        for module in sorted(Path(cli.__file__).parent.glob("*.py")):
            self.env.note_dependency(str(module))
        parser = cli.build_parser()
        return [nodes.literal_block(text=_help_text(parser)), *self._sections(parser)]

    def _sections(self, parser: argparse.ArgumentParser) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        for name, summary, sub in _subcommands(parser):
            title = f"{parser.prog} {name}"
            section = nodes.section(ids=[nodes.make_id(title)],
                                    names=[nodes.fully_normalize_name(title)])
            section += nodes.title(text=title)
            if summary:
                section += nodes.paragraph(text=summary[0].upper() + summary[1:] + ".")
            section += nodes.literal_block(text=_help_text(sub))
            section.extend(self._sections(sub))
            self.state.document.note_implicit_target(section, section)
            out.append(section)
        return out


# ------------------------------------------------------------------ registries
def _cell(value: Any) -> str:
    """A declared value as a table cell: booleans as yes/blank, anything else as code."""
    if isinstance(value, bool):
        return "yes" if value else ""
    return f"``{value!r}``"


def registry_rows(registry: dict, attributes: list[str], name_header: str = "name"
                  ) -> list[list[str]]:
    """The rows of a registry's table, header first: each name, a cross-reference to what
    it maps to, then the value of each of ``attributes`` or (none given) the first paragraph
    of its docstring."""
    rows = [[name_header, "object", *([f"``{a}``" for a in attributes] or ["summary"])]]
    for key, obj in registry.items():
        role = "class" if inspect.isclass(obj) else "func"
        row = [f"``{key}``", f":py:{role}:`~{obj.__module__}.{obj.__qualname__}`"]
        row += [_cell(getattr(obj, a)) for a in attributes] or [_summary(obj)]
        rows.append(row)
    return rows


class RegistryDirective(SphinxDirective):
    """A table of a ``name -> class or function`` mapping, generated from the mapping."""

    required_arguments = 1
    has_content = False
    option_spec: ClassVar[dict] = {"name-header": directives.unchanged,
                                   "attributes": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        registry = _import_object(self.arguments[0])
        rows = registry_rows(registry, self.options.get("attributes", "").split(),
                             self.options.get("name-header", "name"))
        module = importlib.import_module(self.arguments[0].rsplit(".", 1)[0])
        self.env.note_dependency(module.__file__)
        return self._table(rows)

    def _table(self, rows: list[list[str]]) -> list[nodes.Node]:
        """A list-table, parsed as reStructuredText so the roles resolve."""
        lines = [".. list-table::", "   :header-rows: 1", ""]
        for row in rows:
            lines.append(f"   * - {row[0]}")
            lines.extend(f"     - {cell}" if cell else "     -" for cell in row[1:])
        return self.parse_text_to_nodes("\n".join(lines))


def registry_modules(registry: dict) -> list[tuple[str, list[str]]]:
    """``(module, names)``: each module that defines an object of ``registry``, in the
    registry's order, with the names of the objects it defines."""
    modules: dict[str, list[str]] = {}
    for key, obj in registry.items():
        modules.setdefault(obj.__module__, []).append(key)
    return list(modules.items())


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


class RegistryModulesDirective(SphinxDirective):
    """One section per module that defines an object of a registry (the heads of
    :data:`drillbook.heads.HEADS`: a new head's module gets its section with no edit of the
    page), titled by the names it defines, holding the module's ``automodule``."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        for module, names in registry_modules(_import_object(self.arguments[0])):
            self.env.note_dependency(importlib.import_module(module).__file__)
            title = _and(names)
            section = nodes.section(ids=[nodes.make_id(module)],
                                    names=[nodes.fully_normalize_name(title)])
            section += nodes.title(text=title)
            section.extend(self.parse_text_to_nodes(f".. automodule:: {module}\n"
                                                    f"   :members:\n"))
            self.state.document.note_implicit_target(section, section)
            out.append(section)
        return out


# ------------------------------------------------------------------ attribute docstrings
_ATTRIBUTE_KINDS = ("attribute", "data", "property")
_STASH = "drillbook:attribute-docstrings"


def stash_attribute_doc(app: Sphinx, what: str, name: str, obj: Any, options,
                        lines: list[str]) -> None:
    """Before napoleon: keep an attribute's docstring as written."""
    if what in _ATTRIBUTE_KINDS:
        app.env.temp_data.setdefault(_STASH, {})[id(lines)] = list(lines)


def reparse_attribute_doc(app: Sphinx, what: str, name: str, obj: Any, options,
                          lines: list[str]) -> None:
    """After napoleon: parse that docstring as napoleon parses any other one."""
    original = app.env.temp_data.get(_STASH, {}).pop(id(lines), None)
    if original is not None:
        lines[:] = GoogleDocstring(original, app.config, app, "", "", obj, options).lines()


_SEVERAL_ATTRIBUTES = re.compile(r"^(\s*)\.\. attribute:: (\w+(?:, \w+)+)\s*$")


def split_attribute_names(app: Sphinx, what: str, name: str, obj: Any, options,
                          lines: list[str]) -> None:
    """After napoleon: ``.. attribute:: a, b`` becomes one directive with two signatures."""
    out: list[str] = []
    for line in lines:
        match = _SEVERAL_ATTRIBUTES.match(line)
        if not match:
            out.append(line)
            continue
        prefix = f"{match.group(1)}.. attribute:: "
        first, *others = match.group(2).split(", ")
        out.append(prefix + first)
        out.extend(" " * len(prefix) + name for name in others)  # one signature a line
    lines[:] = out


# ------------------------------------------------------------------ re-exported names
def skip_member(app: Sphinx, what: str, name: str, obj: Any, skip: bool, options) -> bool | None:
    """``autodoc-skip-member`` handler: a module's member defined in another module is
    documented there, not here; a NamedTuple's generated field accessors are not documented
    (the class docstring's "Attributes:" section describes the fields)."""
    if what == "class" and (getattr(obj, "__doc__", None) or "").startswith(
            "Alias for field number"):
        return True  # a NamedTuple field: its class docstring's "Attributes:" describes it
    module = app.env.temp_data.get("autodoc:module")  # the module whose members these are
    if what != "module" or not module or not (inspect.isclass(obj) or inspect.isroutine(obj)):
        return None
    return True if getattr(obj, "__module__", module) != module else None


def _documented_name(objects: dict, obj: Any, hint: str) -> str | None:
    """The name under which ``obj`` is documented, if it is documented exactly once."""
    qualname = getattr(obj, "__qualname__", None)
    module = getattr(obj, "__module__", None)
    if qualname and module and f"{module}.{qualname}" in objects:
        return f"{module}.{qualname}"
    parent, _, attr = hint.rpartition(".")
    try:
        owner = _import_object(parent)
    except (ImportError, AttributeError):
        owner = None
    if inspect.isclass(owner):  # an undocumented override: the documented definition
        for base in owner.__mro__:
            if attr in vars(base) and f"{base.__module__}.{base.__qualname__}.{attr}" in objects:
                return f"{base.__module__}.{base.__qualname__}.{attr}"
    # data (numbers, dicts, tuples) carry no name: find a documented name ending like the
    # reference, inside the same package, that imports as this very object
    last = hint.rsplit(".", 1)[-1]
    package = hint.split(".", 1)[0]
    found = []
    for name in objects:
        if name != hint and name.startswith(package + ".") and name.endswith("." + last):
            try:
                if _import_object(name) is obj:
                    found.append(name)
            except (ImportError, AttributeError):
                continue
    return found[0] if len(found) == 1 else None


def resolve_reexport(app: Sphinx, env, node: pending_xref, contnode: nodes.Element):
    """``missing-reference`` handler: resolve a Python name through what it imports as."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip(".~")
    module, cls = node.get("py:module"), node.get("py:class")
    candidates = [target]
    if module:
        candidates.insert(0, f"{module}.{target}")
        if cls:
            candidates.insert(0, f"{module}.{cls}.{target}")
    domain = env.get_domain("py")
    objects = domain.objects
    for candidate in candidates:
        if not candidate.startswith("drillbook"):
            continue
        try:
            obj = _import_object(candidate)
        except (ImportError, AttributeError):
            continue
        name = _documented_name(objects, obj, candidate)
        if name is None:
            continue
        new = node.deepcopy()
        new["reftarget"] = name
        if "refspecific" in new:  # an exact name: no fuzzy search
            del new["refspecific"]
        return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], name,
                                   new, contnode)
    return None


def setup(app: Sphinx) -> dict:
    app.add_directive("drillbook-cli", CLIDirective)
    app.add_directive("drillbook-registry", RegistryDirective)
    app.add_directive("drillbook-registry-modules", RegistryModulesDirective)
    app.setup_extension("sphinx.ext.napoleon")
    # napoleon's own handler runs at the default priority, 500
    app.connect("autodoc-process-docstring", stash_attribute_doc, priority=400)
    app.connect("autodoc-process-docstring", reparse_attribute_doc, priority=600)
    app.connect("autodoc-process-docstring", split_attribute_names, priority=600)
    app.connect("autodoc-skip-member", skip_member)
    app.connect("missing-reference", resolve_reexport)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
