"""Raw text in and out of the translation models: Moses tokenisation as Multi30k has it.

The models read and write the release's own tokens (``tok/*.lc.norm.tok.<lang>``): the raw
captions lowercased, punctuation-normalised and tokenised by the Moses scripts, with XML
escapes that :func:`moses_unescape` undoes. :func:`moses_tokenize` repeats these steps on a
new sentence with sacremoses (the ``nmt`` extra; a missing one raises
:class:`~drillbook.errors.MissingPackageError`), so a sentence typed by a user reaches the
model as the training sentences did; :func:`moses_detokenize` turns tokens back into text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from types import MappingProxyType
from typing import Any

from ..errors import MissingPackageError

__all__ = ["moses_detokenize", "moses_tokenize", "moses_unescape"]

# Moses' escape-special-chars.perl writes these; one regex pass undoes them (so that
# "&amp;apos;" correctly becomes the literal text "&apos;").
_MOSES_ENTITIES: Mapping[str, str] = MappingProxyType({
    "&amp;": "&", "&apos;": "'", "&quot;": '"', "&lt;": "<", "&gt;": ">", "&#91;": "[",
    "&#93;": "]", "&#124;": "|"})
_MOSES_RE = re.compile("|".join(re.escape(e) for e in _MOSES_ENTITIES))


def moses_unescape(text: str) -> str:
    """Undo Moses' XML escaping: ``"man &apos;s"`` -> ``"man 's"``."""
    return _MOSES_RE.sub(lambda m: _MOSES_ENTITIES[m.group(0)], text)


@cache
def _moses(lang: str) -> tuple[Any, Any, Any]:
    """sacremoses' punctuation normaliser, tokeniser and detokeniser for ``lang`` (built
    once per language: each reads its language's non-breaking prefixes)."""
    try:
        from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer
    except ImportError:
        raise MissingPackageError(
            "Moses tokenisation of raw text needs sacremoses, an optional dependency of "
            "drillbook; install it with `pip install 'drillbook[nmt]'`") from None
    return MosesPunctNormalizer(lang), MosesTokenizer(lang), MosesDetokenizer(lang)


def moses_tokenize(sentence: str, lang: str, *, lowercase: bool = True) -> list[str]:
    """The tokens of a raw sentence, as Multi30k's ``lc.norm.tok`` files would have them.

    Lowercase (unless ``lowercase=False``), normalise punctuation, tokenise; no XML
    escaping (a quote stays ``"``, as :func:`~drillbook.nmt.corpus.load_parallel` reads the
    files by default).

    Args:
        sentence: one untokenised sentence, e.g. ``"Ein Mann hält ein Schild: „Hallo!“"``.
        lang: its language code (``"en"``, ``"de"``, ``"fr"``): it picks the
            non-breaking prefixes (``z.B.``) and the language's rules for apostrophes.
        lowercase: lowercase first, as the corpus was (the models are trained on
            lowercased text).

    Returns:
        the tokens, e.g. ``['ein', 'mann', 'hält', 'ein', 'schild', ':', '"', 'hallo',
        '!', '"']``; ``[]`` for a blank sentence.

    How faithful: on the 1,000 sentences of ``test_2016_flickr`` it gives exactly the
    release's tokens for 1,000 English, 1,000 German and 999 French lines (the French one
    differs in where normalisation puts a full stop next to a closing quote). Lowercasing
    comes first, as in the release: with its capital, a German sentence-final ``Bart.`` is
    kept whole by the tokeniser, as if it were an abbreviation.

    Raises:
        MissingPackageError: sacremoses is not installed.
    """
    normalizer, tokenizer, _ = _moses(lang)
    text = sentence.lower() if lowercase else sentence
    return tokenizer.tokenize(normalizer.normalize(text), escape=False)


def moses_detokenize(tokens: Sequence[str], lang: str) -> str:
    """Text from tokens: Moses' detokeniser (``['a', 'dog', "'s", 'toy', '.']`` ->
    ``"a dog's toy."``).

    Moses' rule-based inverse is not exact for every sentence (a German ``mcdonald ' s-menü``
    comes back as ``mcdonald 's-menü``), and the text stays lowercased: the models never see
    case.

    Args:
        tokens: unescaped tokens, as :func:`moses_tokenize` or a model gives them.
        lang: the language's rules for attaching punctuation and apostrophes.

    Raises:
        MissingPackageError: sacremoses is not installed.
    """
    _, _, detokenizer = _moses(lang)
    return detokenizer.detokenize(list(tokens), unescape=False)
