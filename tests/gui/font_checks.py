"""Font checks that hold on every machine's fonts.

Whether a font reports itself fixed-pitch depends on the family fontconfig picks (Noto Sans Mono
does not, DejaVu Sans Mono does); what a reader of PINs, keys and logs needs is that the digits
line up, which every monospace family gives.
"""

from __future__ import annotations

from PySide6.QtGui import QFont, QFontMetrics


def digits_line_up(font: QFont) -> bool:
    """Whether every digit 0 to 9 of ``font`` advances as far as every other (tabular digits)."""
    metrics = QFontMetrics(font)
    return len({metrics.horizontalAdvance(digit) for digit in "0123456789"}) == 1
