"""Terminal views of dumps for ``dblog dumps``: a table, or progress bars redrawn until no
dump is active (``--watch``), drawn with rich."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table

ACTIVE = ("queued", "running", "paused")


def dump_table(dumps: list[dict[str, Any]], console: Console | None = None) -> None:
    table = Table("id", "state", "rows", "estimated", "chunks", "table", "last key", "ETA")
    for d in dumps:
        eta = "" if d.get("eta_s") is None else f"{d['eta_s']:.0f}s"
        table.add_row(d["id"], d["state"], str(d["rows"]), str(d["estimated_total"]),
                      str(d["chunks"]), d.get("current_table") or "",
                      "" if d.get("last_key") is None else str(d["last_key"]), eta)
    (console or Console()).print(table)


def watch(fetch: Callable[[], list[dict[str, Any]]], sleep: Callable[[float], None],
          interval: float = 1.0, console: Console | None = None) -> None:
    """Progress bars of the active dumps (and those that finish meanwhile), refreshed every
    ``interval`` until none is active."""
    progress = Progress(TextColumn("{task.fields[dump]}"), TextColumn("{task.fields[state]}"),
                        BarColumn(), TextColumn("{task.completed:>10.0f}/{task.total:<10.0f}"),
                        TextColumn("{task.fields[table]}"), TimeRemainingColumn(),
                        console=console)
    tasks: dict[str, TaskID] = {}
    first = True
    with Live(progress, console=console, refresh_per_second=4, transient=False):
        while True:
            dumps = fetch()
            for d in dumps:  # at first every dump, then those active and those shown
                if not first and d["state"] not in ACTIVE and d["id"] not in tasks:
                    continue
                fields = {"dump": d["id"], "state": d["state"],
                          "table": d.get("current_table") or ""}
                total = max(d["estimated_total"], d["rows"], 1)
                if d["id"] not in tasks:
                    tasks[d["id"]] = progress.add_task(d["id"], total=total, **fields)
                completed = total if d["state"] == "done" else d["rows"]
                progress.update(tasks[d["id"]], completed=completed, total=total, **fields)
            if not any(d["state"] in ("queued", "running") for d in dumps):
                return
            first = False
            sleep(interval)
