"""Key values in a canonical form under the column's collation.

Key equality follows the database: under a case-insensitive collation ``'abc'`` and ``'ABC'``
are one key, and under a PAD SPACE collation ``'a'`` and ``'a '`` are too. Keys from the log and
from chunk SELECTs go through the same normaliser, chosen by the column's collation name:

- binary columns and ``*_bin`` / ``*_cs`` collations: unchanged (PAD SPACE ones without trailing
  spaces);
- ``*_ci`` collations: upper case, and without accents unless the collation is accent-sensitive
  (``_as_ci``); MariaDB's ``utf8mb4_general_ci`` and ``utf8mb4_unicode_ci`` as well as MySQL 8's
  ``utf8mb4_0900_ai_ci`` compare ``'é'`` equal to ``'E'``;
- ``*_nopad_*`` collations and MySQL 8's ``*_0900_*`` collations keep trailing spaces.

The normalised value is itself equal to the original under the collation, so it is also a valid
bound for the chunk SELECT's ``>`` comparison. Known limit: characters whose upper case is
longer than one character (``ß``) are kept as they are; collations that equate such characters
with others (``ß`` = ``ss`` under ``utf8mb4_unicode_ci``) are not modelled.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from functools import lru_cache

Normaliser = Callable[[str], str]


def _fold_char(ch: str) -> str:
    upper = ch.upper()
    return upper if len(upper) == 1 else ch


def _fold(text: str, strip_accents: bool) -> str:
    if text.isascii():
        return text.upper()
    if strip_accents:
        text = "".join(c for c in unicodedata.normalize("NFD", text)
                       if not unicodedata.combining(c))
    return unicodedata.normalize("NFC", "".join(_fold_char(c) for c in text))


@lru_cache(maxsize=256)
def normaliser(collation: str | None) -> Normaliser | None:
    """The key normaliser for a column's collation; None for no change (binary, numbers)."""
    if not collation or collation == "binary":
        return None
    name = collation.lower()
    pad = "_nopad_" not in name and "_0900_" not in name and not name.endswith("_nopad")
    insensitive = name.endswith("_ci")
    strip_accents = insensitive and "_as_" not in name
    if insensitive:
        if pad:
            return lambda text: _fold(text.rstrip(" "), strip_accents)
        return lambda text: _fold(text, strip_accents)
    if pad:
        return _rstrip
    return None


def _rstrip(text: str) -> str:
    return text.rstrip(" ")


def key_converter(collation: str | None) -> Callable[[object], object] | None:
    """A normaliser that leaves non-strings (and None) alone, or None when nothing changes."""
    norm = normaliser(collation)
    if norm is None:
        return None

    def convert(value: object) -> object:
        return norm(value) if isinstance(value, str) else value

    return convert
