"""The PIN boxes of the invitee prompt: six one-digit boxes that take typed, pasted or dropped
digits, move the focus along as they fill, and ignore anything else."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFocusEvent, QKeyEvent, QMouseEvent
from PySide6.QtWidgets import QHBoxLayout, QLineEdit, QWidget

from app.controllers.invitee import PIN_LENGTH, pin_digits
from app.window.widgets import SPACE, SPACE_SECTION, fixed_font

# How many boxes a key moves the focus by.
_STEPS = {Qt.Key.Key_Left: -1, Qt.Key.Key_Right: 1, Qt.Key.Key_Home: -PIN_LENGTH}
_STEPS[Qt.Key.Key_End] = PIN_LENGTH


class DigitBox(QLineEdit):
    """One box of the PIN. Typed keys are handled here (a digit is ``digit_typed``, anything
    else ignored); pasted or dropped text arrives as ``textEdited``, and because the box's
    text is kept wholly selected, it replaces the box's digit rather than joining it."""

    digit_typed = Signal(str)
    back_requested = Signal()  # Backspace in an empty box
    step_requested = Signal(int)  # how many boxes to move: the arrow keys, Home and End

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setInputMethodHints(Qt.InputMethodHint.ImhDigitsOnly)
        font = fixed_font()
        font.setPointSizeF(font.pointSizeF() * 1.8)
        self.setFont(font)
        self.setFixedSize(44, 52)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        """Digits fill the box, Backspace and Delete empty it (in an empty box Backspace goes
        back), the arrows, Home and End move; other keys that type text do nothing."""
        key, text, modifier = event.key(), event.text(), Qt.KeyboardModifier
        shortcut = event.modifiers() & (modifier.ControlModifier | modifier.AltModifier)
        if key == Qt.Key.Key_Backspace and not self.text():
            self.back_requested.emit()
        elif key in (Qt.Key.Key_Backspace, Qt.Key.Key_Delete):
            self.selectAll()
            super().keyPressEvent(event)  # deletes the digit: textEdited("")
        elif key in _STEPS:
            self.step_requested.emit(_STEPS[Qt.Key(key)])
        elif len(text) == 1 and text.isprintable() and not shortcut:
            if pin_digits(text):
                self.digit_typed.emit(pin_digits(text))
        else:
            super().keyPressEvent(event)  # paste, copy, Tab, Enter, ...

    def focusInEvent(self, event: QFocusEvent) -> None:
        """Select the digit, whichever way the focus came."""
        super().focusInEvent(event)
        self.selectAll()

    def mousePressEvent(self, event: QMouseEvent) -> None:
        """A click focuses the box with its digit selected (a cursor in one digit is no use)."""
        if event.button() == Qt.MouseButton.LeftButton:
            self.setFocus(Qt.FocusReason.MouseFocusReason)
            self.selectAll()
        else:
            super().mousePressEvent(event)


class PinBoxes(QWidget):
    """Six one-digit boxes: a digit moves on to the next box, Backspace in an empty box goes
    back (and clears it), pasted text fills every box from its digits, anything else is
    ignored. ``changed`` after every change of the digits."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.boxes = [DigitBox(self) for _ in range(PIN_LENGTH)]
        self._digits = [""] * PIN_LENGTH
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(SPACE)
        layout.addStretch(1)
        for index, box in enumerate(self.boxes):
            if index == PIN_LENGTH // 2:
                layout.addSpacing(SPACE_SECTION)  # the PIN is shown and read in threes: 483 920
            layout.addWidget(box)
            box.setAccessibleName(f"PIN digit {index + 1}")
            box.digit_typed.connect(lambda digit, i=index: self._fill(digit, i))
            box.textEdited.connect(lambda text, i=index: self._on_box_edited(i, text))
            box.back_requested.connect(lambda i=index: self._on_box_back_requested(i))
            box.step_requested.connect(lambda step, i=index: self.focus_box(i + step))
        layout.addStretch(1)

    @property
    def pin(self) -> str:
        """The digits typed so far, in order (gaps left out)."""
        return "".join(self._digits)

    @property
    def complete(self) -> bool:
        """Whether every box holds a digit."""
        return all(self._digits)

    def paste(self, text: str) -> None:
        """Put the digits of ``text`` in the boxes: six or more fill them all, fewer go from
        the first empty box on."""
        digits = pin_digits(text)
        if digits:
            first_empty = next((i for i, d in enumerate(self._digits) if not d), 0)
            self._fill(digits, 0 if len(digits) >= PIN_LENGTH else first_empty)

    def clear(self) -> None:
        """Empty every box and focus the first."""
        for index in range(PIN_LENGTH):
            self._set(index, "")
        self.focus_box(0)
        self.changed.emit()

    def focus_box(self, index: int) -> None:
        """Focus box ``index`` (kept within the six), its digit selected."""
        box = self.boxes[max(0, min(index, PIN_LENGTH - 1))]
        box.setFocus(Qt.FocusReason.OtherFocusReason)
        box.selectAll()

    def _set(self, index: int, digit: str) -> None:
        self._digits[index] = digit
        self.boxes[index].setText(digit)

    def _fill(self, digits: str, start: int) -> None:
        placed = digits[: PIN_LENGTH - start]
        for offset, digit in enumerate(placed):
            self._set(start + offset, digit)
        self.focus_box(start + len(placed))
        self.changed.emit()

    def _on_box_edited(self, index: int, text: str) -> None:
        digits = pin_digits(text)
        if not text:
            self._digits[index] = ""
            self.changed.emit()
        elif not digits:
            self._set(index, self._digits[index])  # not a digit: put back what was there
            self.boxes[index].selectAll()
        else:
            # One digit goes here; more were pasted: six or more fill all the boxes.
            self._fill(digits, 0 if len(digits) >= PIN_LENGTH else index)

    def _on_box_back_requested(self, index: int) -> None:
        if index > 0:
            self._set(index - 1, "")
            self.focus_box(index - 1)
            self.changed.emit()
