"""Text from a server as it may reach a terminal or a log: escaped, and bounded.

Pure and dependency-free: ``sshpipe.core.errors`` escapes and bounds every message
with it, so it must import nothing of sshpipe's.
"""

from __future__ import annotations

# Characters of one text a server sent (a STATUS message, a disconnect reason,
# a name, link or REALPATH text) that a message shows: a reason is a line or
# two, and a server's 200 KB one was printed as a 294 KB line.
SHOWN = 1024
# Characters of a whole message: the backstop for text no one clipped; a
# PATH_MAX path (4,096 bytes) and a clipped server text fit.
MESSAGE_SHOWN = 8192


def clip(text: str, limit: int = SHOWN) -> str:
    """``text`` cut after its first ``limit`` characters, the rest counted, not shown.

    "... (N bytes more)": N counts the bytes the server sent (a byte that was
    not UTF-8, kept by surrogateescape, is one). Escaping (``printable``) comes
    after, so a clipped text may show up to four times ``limit`` characters.
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({_bytes(text[limit:])} bytes more)"


def _bytes(text: str) -> int:
    try:
        return len(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:  # a lone surrogate not from surrogateescape
        return len(text.encode("utf-8", "surrogatepass"))


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
