"""Text fit for a person: Python object reprs and bytes literals taken out of messages that
came from exceptions (``ssl:<ssl.SSLContext object at 0x7f…>``, ``b'model not found'``)."""

from __future__ import annotations

import ast
import re

# ``<ssl.SSLContext object at 0x7fed1df7e330>``, with a ``ssl:`` style label before it.
_OBJECT_REPR = re.compile(r"\s?(?:\w+[:=])?<[\w.]+(?: [\w.]+)* (?:object )?at 0x[0-9a-fA-F]+>")
_BYTES_LITERAL = re.compile(r"""\bb(?P<literal>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")


def _decoded(match: re.Match[str]) -> str:
    try:
        raw = ast.literal_eval("b" + match.group("literal"))
    except (ValueError, SyntaxError):
        return match.group("literal")
    assert isinstance(raw, bytes)
    return '"' + raw.decode("utf-8", errors="replace") + '"'


def display_text(text: str) -> str:
    """``text`` without object reprs, with bytes literals shown as their decoded text."""
    text = _OBJECT_REPR.sub("", text)
    return _BYTES_LITERAL.sub(_decoded, text)
