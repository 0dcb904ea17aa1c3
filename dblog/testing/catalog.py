"""A refreshable table lookup (:class:`dblog.formats.schema.RefreshableLookup`) whose cache is
stale until refreshed: what a format sees when the source's schema changed after the catalog
was read."""

from __future__ import annotations

from dataclasses import replace

from dblog.core.model import TableId, TableInfo


class StaleCatalog:
    """Answers ``cached`` for every table until :meth:`refresh` reads ``current`` (as a new
    object, as a real read of the catalog returns); counts the refreshes."""

    def __init__(self, cached: TableInfo, current: TableInfo) -> None:
        self.cached, self.current, self.refreshes = cached, current, 0

    def __call__(self, table: TableId) -> TableInfo | None:
        return self.cached

    def refresh(self, table: TableId) -> TableInfo | None:
        self.refreshes += 1
        current = self.current
        self.cached = replace(current)
        return self.cached
