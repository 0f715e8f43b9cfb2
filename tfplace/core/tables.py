"""Plain-text tables for terminals and logs: a header, a rule under it, columns aligned."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["format_table"]


def format_table(rows: Sequence[Sequence[str]], *, left: int = 1) -> str:
    """``rows`` (the header first) as aligned lines, two spaces between columns.

    The first ``left`` columns are aligned left (names), the others right (numbers).

    Examples
    --------
    >>> print(format_table([("device", "ops"), ("/device:GPU:0", "12")]))
    device         ops
    -------------  ---
    /device:GPU:0   12
    """
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            cell.ljust(w) if i < left else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))
        )
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)
