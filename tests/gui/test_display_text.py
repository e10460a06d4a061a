"""Messages a person reads carry no Python object reprs or bytes literals."""

from __future__ import annotations

from app.models.display_text import display_text


def test_an_object_repr_and_its_label_are_taken_out() -> None:
    message = (
        "Cannot connect to host 127.0.0.1:58815 ssl:<ssl.SSLContext object at 0x7fed1df7e330> "
        "[Connect call failed ('127.0.0.1', 58815)]"
    )
    assert display_text(message) == (
        "Cannot connect to host 127.0.0.1:58815 [Connect call failed ('127.0.0.1', 58815)]"
    )
    assert display_text("failed: <function run at 0x10af>") == "failed:"


def test_a_bytes_literal_shows_its_text() -> None:
    assert display_text("Pull failed: b'model not found'") == 'Pull failed: "model not found"'
    assert display_text('said b"caf\\xc3\\xa9"') == 'said "café"'


def test_plain_text_is_left_alone() -> None:
    for text in ("It's the lab's bag", "b is broken", "<b>bold</b> at 0x", "web'site'"):
        assert display_text(text) == text
