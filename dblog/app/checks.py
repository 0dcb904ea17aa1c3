"""``dblog check``: the source's findings, each output's own (:class:`~dblog.spi.Checkable`),
each output format's findings on its options (:class:`~dblog.formats.base.CheckableFormat`),
and, for outputs whose format needs more than keys and new rows, whether the source logs it for
every captured table (:class:`~dblog.formats.base.FormatWithRequirements` against
:class:`~dblog.spi.source.ImageLoggingSource`)."""

from __future__ import annotations

from collections.abc import Sequence

from dblog.formats.base import CheckableFormat, FormattedOutput, FormatWithRequirements
from dblog.spi import Checkable, Finding, Output, SourceConnector
from dblog.spi.source import ImageLoggingSource


def findings(connector: SourceConnector, outputs: Sequence[Output]) -> list[Finding]:
    found = list(connector.check())
    for output in outputs:
        if isinstance(output, Checkable):
            found.extend(output.check())
    formats = [o.format for o in outputs if isinstance(o, FormattedOutput)]
    for fmt in formats:
        if isinstance(fmt, CheckableFormat):
            found.extend(fmt.check())
    needing = [f for f in formats if isinstance(f, FormatWithRequirements)]
    if needing and isinstance(connector, ImageLoggingSource):
        found.extend(_format_findings(connector, connector, needing))
    return found


def _format_findings(connector: SourceConnector, images: ImageLoggingSource,
                     formats: Sequence[FormatWithRequirements]) -> list[Finding]:
    reader = connector.chunk_reader()
    try:
        found: list[Finding] = []
        for table in reader.list_tables():
            info = reader.table_info(table)
            logged = images.logged_images(table)
            for fmt in formats:
                found.extend(fmt.requirements(info, logged))
        return found
    finally:
        reader.close()
