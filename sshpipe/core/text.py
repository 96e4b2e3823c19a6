"""Text from a server as it may reach a terminal or a log.

Pure and dependency-free: ``sshpipe._errors`` escapes every message with it,
so it must import nothing of sshpipe's.
"""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` safe for a terminal or a log: every non-printable character escaped.

    Control characters (C0 such as ESC, CR and LF; DEL; C1 such as the one-byte
    CSI U+009B), format characters (bidirectional overrides), line separators,
    and bytes that were not UTF-8 (kept as surrogates by surrogateescape)
    become ``\\xHH``, ``\\uHHHH`` or ``\\UHHHHHHHH``. Printable text, non-ASCII
    letters included, is left alone, and escaping twice changes nothing more.
    """
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def _escape(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the byte that was not UTF-8
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
