"""``dblog check``: the source's findings, each output's own (:class:`~dblog.spi.Checkable`),
each output format's findings on its options (:class:`~dblog.formats.base.CheckableFormat`),
each output's findings on the captured tables (:class:`~dblog.spi.findings.TableCheckable`: an
existing replica table it would refuse), and, for outputs whose format needs more than keys and
new rows, whether the source logs it for every captured table
(:class:`~dblog.formats.base.FormatWithRequirements` against
:class:`~dblog.spi.source.ImageLoggingSource`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dblog.app.config import PipelineConfig
from dblog.core.dumprequests import initial_dumps
from dblog.core.dumps import validated_dump
from dblog.core.model import TableInfo
from dblog.errors import ConfigError, DblogError
from dblog.formats.base import CheckableFormat, FormattedOutput, FormatWithRequirements
from dblog.runtime.paths import unwritable_reason
from dblog.spi import Checkable, Finding, Output, SourceConnector
from dblog.spi.findings import TableCheckable
from dblog.spi.source import ImageLoggingSource


def findings(connector: SourceConnector, outputs: Sequence[Output]) -> list[Finding]:
    """Every finding once: an output's checks that fail alike (an unreachable target) are
    printed once."""
    return list(dict.fromkeys(_findings(connector, outputs)))


def setup_findings(config: PipelineConfig) -> list[Finding]:
    """What would stop ``dblog run`` before the source is read: a state file it cannot
    write (with a file state), an API token variable that is not set."""
    found = []
    if config.state.type == "file":
        problem = unwritable_reason(Path(config.state.path))
        if problem:
            found.append(Finding(
                "error", f"state.path {config.state.path}: {problem}",
                "set state.path to a file in a folder the user that runs dblog can write"))
    if config.api.enabled:
        try:
            config.api.token()
        except ConfigError as exc:
            found.append(Finding("error", exc.message, exc.fix))
    return found


def initial_dump_findings(connector: SourceConnector,
                          requests: Sequence[Sequence[str] | None],
                          skip_unavailable: bool) -> list[Finding]:
    """What the first ``dblog run`` would say of ``initial_dumps`` (the same check): an
    error for a named table that does not exist, is not captured or has no key; with
    ``engine.initial_dumps_skip_unavailable``, a warning per table left out."""
    if all(tables is None for tables in requests):
        return []
    skipped: list[Finding] = []
    reader = connector.chunk_reader()
    try:
        initial_dumps(lambda tables: validated_dump(reader, reader.table_info, tables, None,
                                                    None),
                      requests, skip_unavailable,
                      lambda table, exc: skipped.append(Finding(
                          "warning", f"initial_dumps: {table} is left out: {exc.message}",
                          "correct the table name, or remove it from initial_dumps")))
    except ConfigError as exc:
        return [Finding("error", exc.message, exc.fix)]
    finally:
        reader.close()
    return skipped


def _findings(connector: SourceConnector, outputs: Sequence[Output]) -> list[Finding]:
    found = list(connector.check())
    for output in outputs:
        if isinstance(output, Checkable):
            found.extend(output.check())
    formats = [o.format for o in outputs if isinstance(o, FormattedOutput)]
    for fmt in formats:
        if isinstance(fmt, CheckableFormat):
            found.extend(fmt.check())
    needing = [f for f in formats if isinstance(f, FormatWithRequirements)]
    images = connector if isinstance(connector, ImageLoggingSource) else None
    checking = [o for o in outputs if isinstance(o, TableCheckable)]
    if (needing and images is not None) or checking:
        infos = _captured(connector)
        for output in checking:
            found.extend(output.check_tables(infos))
        if images is not None:
            for info in infos:
                logged = images.logged_images(info.table)
                for fmt in needing:
                    found.extend(fmt.requirements(info, logged))
    return found


def _captured(connector: SourceConnector) -> list[TableInfo]:
    """The captured tables' metadata, read once for every check that needs it. A table whose
    metadata cannot be read (no key, say) is left out: the source's own check reports it."""
    reader = connector.chunk_reader()
    try:
        infos = []
        for table in reader.list_tables():
            try:
                infos.append(reader.table_info(table))
            except DblogError as exc:
                if exc.retryable:
                    raise
        return infos
    finally:
        reader.close()
