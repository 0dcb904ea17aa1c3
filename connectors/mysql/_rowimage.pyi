from collections.abc import Callable
from typing import Any

class Layout:
    def __init__(
        self, specs: tuple[tuple[str, int, int, int, int, Callable[..., Any] | None], ...]
    ) -> None: ...
    def decode(self, data: bytes, pos: int, end: int) -> list[dict[str, Any]]: ...
