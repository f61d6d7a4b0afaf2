"""Plain-text tables for people (the CLI's default output)."""

from __future__ import annotations

from typing import Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, right_align_numbers: bool = True) -> str:
    cells = [[str(header) for header in headers], *[[str(cell) for cell in row] for row in rows]]
    widths = [max(len(row[column]) for row in cells) for column in range(len(headers))]

    def render(row: list[str], source: Sequence[object] | None) -> str:
        parts = []
        for column, text in enumerate(row):
            numeric = source is not None and isinstance(source[column], (int, float))
            parts.append(text.rjust(widths[column]) if numeric and right_align_numbers else text.ljust(widths[column]))
        return "  ".join(parts).rstrip()

    lines = [render(cells[0], None), "  ".join("-" * width for width in widths)]
    lines.extend(render(cells[index + 1], rows[index]) for index in range(len(rows)))
    return "\n".join(lines)
