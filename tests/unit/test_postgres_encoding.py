"""wal2json writes in the database's encoding: the replication reader decodes each message with
the Python codec of the server's ``server_encoding`` (connectors/postgres/replication.py)."""

from __future__ import annotations

import pytest

from dblog.connectors.postgres.replication import python_codec, undecodable
from dblog.errors import FatalSourceError


@pytest.mark.parametrize(("server", "codec", "text"), [
    ("UTF8", "utf-8", "café ✓"),
    ("LATIN1", "iso8859-1", "café"),
    ("LATIN9", "iso8859-15", "€uro"),
    ("WIN1252", "cp1252", "€uro"),
    ("WIN1251", "cp1251", "привет"),
    ("KOI8R", "koi8-r", "привет"),
    ("EUC_JP", "euc_jp", "日本"),
    ("ISO_8859_7", "iso8859-7", "αβγ"),
])
def test_server_encodings_map_to_python_codecs(server: str, codec: str, text: str) -> None:
    assert python_codec(server) == codec
    assert str(text.encode(codec), python_codec(server)) == text


def test_sql_ascii_is_read_as_utf8() -> None:
    assert python_codec("SQL_ASCII") == "utf-8"


def test_an_encoding_without_a_python_codec_is_refused_with_the_fix() -> None:
    with pytest.raises(FatalSourceError) as refused:
        python_codec("MULE_INTERNAL")
    assert "MULE_INTERNAL" in refused.value.message
    assert refused.value.fix is not None and "ENCODING 'UTF8'" in refused.value.fix


def test_bytes_that_are_not_utf8_in_a_sql_ascii_database_stop_with_the_fix() -> None:
    try:
        str(b'{"value":"caf\xe9"}', python_codec("SQL_ASCII"))
    except UnicodeDecodeError as exc:
        error = undecodable(exc, "SQL_ASCII")
    assert not error.retryable
    assert "not valid utf-8 text (database encoding SQL_ASCII)" in error.message
    assert error.fix is not None and "store its text as UTF-8" in error.fix
