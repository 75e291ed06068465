"""Reading CEL string and bytes literals: quotes, the raw prefix and escape sequences."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

__all__ = ["decode_string"]

_ESCAPES: Final = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "`": "`",
    "?": "?",
}


def decode_string(text: str, *, error: Callable[[str], Exception], as_bytes: bool = False) -> str:
    """The value of a CEL string literal (quotes, raw prefix and escapes handled).

    For bytes literals the result holds one character per byte (latin-1).
    """
    raw = text[0] in "rR"
    if raw:
        text = text[1:]
    quote = text[:3] if text[:3] in ('"""', "'''") else text[0]
    body = text[len(quote) : -len(quote)]
    if raw:
        return body.encode("utf-8").decode("latin-1") if as_bytes else body
    out: list[str] = []
    i = 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out.append(char.encode("utf-8").decode("latin-1") if as_bytes else char)
            i += 1
            continue
        escape = body[i + 1 : i + 2]
        if escape in _ESCAPES:
            out.append(_ESCAPES[escape])
            i += 2
        elif escape in ("x", "X"):
            out.append(chr(int(body[i + 2 : i + 4], 16)))
            i += 4
        elif escape in ("u", "U") and not as_bytes:
            width = 4 if escape == "u" else 8
            code = int(body[i + 2 : i + 2 + width], 16)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise error(f"invalid unicode escape in {text}")
            out.append(chr(code))
            i += 2 + width
        elif escape.isdigit():
            out.append(chr(int(body[i + 1 : i + 4], 8)))
            i += 4
        else:
            raise error(f"invalid escape sequence in {text}")
    return "".join(out)
