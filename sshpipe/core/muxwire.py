"""The mux socket's framing, pure: one JSON header line each way, then raw bytes.

A client of the master (``transport.muxclient``) opens one UNIX connection
per SFTP channel (or command, or check) and writes a header line::

    {"op": "sftp", "slot": 0, "window": 15728640, "max_packet_size": 261120}

The master (``transport.muxmaster``) answers with one line (``{"ok": true,
...}`` or ``{"ok": false, "error": "..."}``); after an "sftp" answer, the
connection carries the channel's bytes both ways, spliced. JSON, not a
binary format: a header is sent once per channel, and both ends are ours.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_HEADER", "MuxWireError", "encode_header", "split_header"]

# A header carries a command line at most (--verify's sha256sum of one path):
# 64 KiB bounds what a confused peer can make us hold.
MAX_HEADER = 64 * 1024


class MuxWireError(ValueError):
    """A header that is not one JSON object line, or is too long."""


def encode_header(header: dict[str, Any]) -> bytes:
    """``header`` as one line (JSON never writes a raw newline inside)."""
    return json.dumps(header, separators=(",", ":")).encode() + b"\n"


def split_header(buffer: bytes) -> tuple[dict[str, Any], bytes] | None:
    """(the header, the bytes after it) once the line is whole, else None.

    Raises:
        MuxWireError: no line within MAX_HEADER bytes, or not a JSON object.
    """
    end = buffer.find(b"\n", 0, MAX_HEADER + 1)
    if end < 0:
        if len(buffer) > MAX_HEADER:
            raise MuxWireError(f"mux header longer than {MAX_HEADER} bytes")
        return None
    try:
        header = json.loads(buffer[:end])
    except ValueError as exc:
        raise MuxWireError(f"mux header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise MuxWireError("mux header is not a JSON object")
    return header, buffer[end + 1 :]
