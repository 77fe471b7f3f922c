"""Plain-text tables of the tq commands: a header, a rule of dashes, one line a row."""

from __future__ import annotations

from collections.abc import Sequence


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str]) -> list[str]:
    """Columns as wide as their widest cell, two spaces apart; ``align`` holds ``"<"`` or ``">"`` per column."""
    widths = [max(len(title), *(len(row[i]) for row in rows)) for i, title in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(f"{c:{a}{w}}" for c, a, w in zip(cells, align, widths, strict=True)).rstrip()

    return [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]
