"""Text that can always be stored, sent and shown: the one rule for lone surrogates.

A Python string may hold lone surrogates (U+D800..U+DFFF), which no UTF-8 text can: a model's
JSON escape such as ``"\\udc80"`` decodes to one, and Python carries each byte of a file name
that is not UTF-8 as one (``surrogateescape``: ``b"caf\\xe9.txt"`` is ``"caf\\udce9.txt"``).
SQLite, the provider request bodies, the tokenizer and the terminal all refuse them.

The rule, applied once where text enters a run (the model's stream, each tool's output, the
user's message, an error's text), so everything after it holds UTF-8-clean text:

- a surrogate U+DC80..U+DCFF stands for the byte 0x80..0xFF that was not UTF-8, and is written
  as the four characters ``\\xNN`` (that byte in lower-case hex): ``caf\\udce9.txt`` is shown,
  stored and sent as ``caf\\xe9.txt``, as Python's ``repr`` of the bytes and bash's ``$'…'``
  quoting write it (bytes carried so that together are UTF-8 are the character they make);
- any other lone surrogate stands for nothing (a broken escape, half of a pair) and becomes the
  replacement character U+FFFD, as the provider adapters already make it in a model's stream;
- a high surrogate followed by a low one is the character they encode together.

The way back is for paths only (`escaped_bytes_path`): a path argument that names no file as
written, but whose ``\\x80``..``\\xff`` escapes name one as bytes, is that file. So a model that
lists ``caf\\xe9.txt`` can read, edit or write it back under that name.
"""

from __future__ import annotations

import re

_SURROGATES = re.compile("[\ud800-\udbff][\udc00-\udfff]|[\udc80-\udcff]+|[\ud800-\udfff]")
_BYTE_ESCAPE = re.compile(r"\\x([89a-fA-F][0-9a-fA-F])")


def _written(match: re.Match[str]) -> str:
    found = match.group()
    if "\ud800" <= found[0] <= "\udbff" and len(found) == 2:  # a pair: its character
        return found.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    if "\udc80" <= found[0] <= "\udcff":  # bytes (surrogateescape): escaped where not UTF-8
        return found.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "\ufffd"


def safe_text(text: str) -> str:
    """`text` with every lone surrogate written out by the rule above; the same object when
    it holds none (an ASCII text is known to at once)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return text
    try:  # only bytes carried by surrogateescape (a file name's): their escapes, in C
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return _SURROGATES.sub(_written, text)


_JSON_TOKENS = re.compile(
    r"\\\\"  # an escaped backslash (consumed first, so what follows it is not an escape)
    r"|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"  # an escaped pair
    r"|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"  # an escaped lone surrogate
    "|[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]"  # a pair, a lone one
)


def _json_token(match: re.Match[str], lone: list[str]) -> str:
    found = match.group()
    if found == "\\\\":
        return found
    if found.startswith("\\u"):
        if len(found) == 12:
            return found
        code = int(found[2:], 16)
    elif len(found) == 2:
        return found.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    else:
        code = ord(found)
    lone.append(f"U+{code:04X}")
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\\\x{code - 0xDC00:02x}"  # a JSON string's backslash is written twice
    return "\ufffd"


def safe_json_text(text: str) -> tuple[str, list[str]]:
    """JSON text (a tool call's arguments) whose strings hold no lone surrogate, neither as a
    character nor as a JSON escape (``"\\udc80"``): each is written out by the rule above as
    visible text (``"\\\\xe9"`` in the JSON, ``\\xe9`` once parsed); and the lone
    surrogates found (``U+DCE9``). `text` itself when there is nothing to change."""
    if text.isascii() and "\\u" not in text:
        return text, []
    lone: list[str] = []
    fixed = _JSON_TOKENS.sub(lambda m: _json_token(m, lone), text)
    return (text if fixed == text else fixed), lone


def has_surrogate(text: str) -> bool:
    """Whether `text` holds a surrogate code point (which no UTF-8 text can)."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def first_surrogate(text: str) -> str | None:
    """The first surrogate code point of `text` as ``U+XXXX``, or None."""
    if not has_surrogate(text):
        return None
    match = _SURROGATES.search(text)
    assert match is not None
    return f"U+{ord(match.group()[0]):04X}"


def escaped_bytes_path(path: str) -> str | None:
    """`path` with each ``\\xNN`` escape (NN 80..ff) made the byte it names, as Python carries
    it (surrogateescape): the name `safe_text` showed for a file name that is not UTF-8. None
    when `path` holds no such escape."""
    if "\\x" not in path:
        return None
    decoded = _BYTE_ESCAPE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), path)
    return decoded if decoded != path else None
