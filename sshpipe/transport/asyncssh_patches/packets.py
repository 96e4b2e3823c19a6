"""AES-GCM packets in and out without asyncssh's per-packet copies (``aead_packets``).

Profiled on loopback (``benchmarks/results/cpu``), asyncssh spends more on
each 32 KiB SSH packet than the cipher does. A received packet's payload is
copied six times before the session sees it (into the input buffer, sliced
out of it, header and body joined, body and tag joined, the padding cut off,
the channel data cut out of the packet) and a new ``AESGCM`` (its key
schedule) is built for every packet each way; each packet sent is preceded by
an encrypted ``MSG_IGNORE`` of its own (a guard for CBC modes, which GCM does
not need: OpenSSH sends none), so an upload encrypts and sends twice the
packets.

With AES-GCM, the connection authenticated and no compression:

- received: the packet is decrypted straight out of the input buffer (one
  ``AESGCM`` per key), and CHANNEL_DATA for one of our SFTP channels goes to
  its session as a view of the plaintext: no copy between the socket and the
  SFTP reply parser; its WINDOW_ADJUSTs are counted in as asyncssh would.
  Every other packet goes through asyncssh's own ``_recv_packet``, handed the
  plaintext already decrypted;
- sent: one join of the payload (and the padding), one ``AESGCM`` per key,
  header and ciphertext written as they are, no ``MSG_IGNORE``; on our SFTP
  channels a WRITE's header and payload wait for the peer's window as views
  (``ViewWriter``), so that join is the payload's first copy.

Anything else (other ciphers, the key exchange and log-in, a rekey due,
packet-level debug logging) runs asyncssh's code unchanged. What goes on the
wire is what asyncssh would send, less the ``MSG_IGNORE`` packets.
"""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Any

import asyncssh
from asyncssh.constants import MSG_CHANNEL_DATA, MSG_CHANNEL_WINDOW_ADJUST, MSG_USERAUTH_LAST
from asyncssh.crypto.cipher import GCMCipher
from asyncssh.encryption import GCMEncryption
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .inputbuffer import InputBuffer
from .sendbacklog import BACKLOGS, Backlog

_TAG = 16  # AES-GCM's tag, after the ciphertext
_U64 = 0xFFFFFFFFFFFFFFFF  # GCM's invocation counter (RFC 5647 §7.1) wraps at 64 bits
_PAD_POOL = 8192  # random bytes drawn at once for packets' padding
_DATA_HEAD = 10  # padding length, type, recipient channel, data length
# Set on our SFTP channels: their session takes received data as memoryviews.
_VIEWS = "_sshpipe_views"
# What a channel needs for ``ViewWriter`` (asyncssh's send side, as read).
_WRITER_NEEDS = (
    "_send_state", "_send_buf", "_encoding", "_send_chan", "_send_window", "_send_pktsize",
    "_conn", "_send_buf_len", "_flush_send_buf",
)  # fmt: skip


def accept_views(chan: Any) -> ViewWriter | None:
    """One of our SFTP channels: views of received data, and a writer of views if it fits.

    The fast receive may feed its session memoryviews; what is written through
    the ``ViewWriter`` returned goes out as views of the caller's bytes.
    """
    if not hasattr(chan, "__dict__"):
        return None  # a channel of another shape: the stock receive and write
    setattr(chan, _VIEWS, True)
    if not all(hasattr(chan, name) for name in _WRITER_NEEDS):
        return None
    return ViewWriter(chan, BACKLOGS.get(chan._conn))


def _immutable(part: bytes | memoryview) -> bool:
    """Bytes nobody can change while a view of them waits for the peer's window."""
    return type(part) is bytes or (
        type(part) is memoryview and type(part.obj) is bytes and part.format == "B"
    )


class ViewWriter:
    """Writes to one SFTP channel without copying the caller's bytes into asyncssh.

    asyncssh copies what is written into its send buffer (a bytearray), copies
    each packet's share out of it and then into the packet; an upload
    is mostly written past the peer's window (sshd grants 2 MiB and tops it up
    every 96 KiB), so most of it took that path. Here a request's header and its
    payload wait in asyncssh's send buffer as views, and each packet is cut
    across them and joined once, by the connection's ``send_packet``: no copy
    of the payload before that join, and no packet of a header alone. asyncssh's
    own flush then does the rest (the writer resumed, a pending EOF or close).

    ``backlog``: the connection's packets waiting for the kernel (``batched_send``);
    past its mark, data waits here and is flushed again as it drains, but only
    between two requests: ProFTPD's mod_sftp reassembles a request split
    across packets in one buffer for all channels, so a request left half-sent
    while another channel's data went made it write shifted bytes into files
    it acknowledged, then crash (signal 11, in 2-5 of 20 tree puts of 12 MiB).
    """

    def __init__(self, chan: Any, backlog: Backlog | None = None) -> None:
        self._chan = chan
        self._backlog = backlog
        # Where each request queued ends, counted in the channel's bytes, and the
        # bytes cut into packets so far (each end forgotten once passed): a writer
        # parks only where one ended.
        self._ends: deque[int] = deque()
        self._queued = 0
        self._taken = 0
        self._sent_end = 0  # where the last request wholly cut into packets ended
        self._stock_write = chan.write
        self._stock_flush = chan._flush_send_buf
        # asyncssh flushes through this name when window comes (and we do, on
        # a WINDOW_ADJUST read by the fast receive).
        chan._flush_send_buf = self.flush

    def write(self, data: bytes, payload: bytes | memoryview = b"") -> None:
        """Send ``data`` then ``payload`` as one stream, as the window allows."""
        chan = self._chan
        if (
            chan._send_state != "open"
            or chan._encoding
            or chan._send_chan is None
            or not (_immutable(data) and _immutable(payload))
        ):
            whole = bytes(data) + bytes(payload)
            self._queue(len(whole))  # before: asyncssh's write flushes through ours
            self._stock_write(whole)  # and asyncssh raises what it raises
            return
        pending = chan._send_buf
        size = len(data)
        if not size and not payload:
            return  # as asyncssh's write: nothing, not an empty packet
        if not payload and not pending and size <= chan._send_window and size <= chan._send_pktsize:
            # A request with no payload (a READ, a STAT...) that fits: its own packet, now.
            chan._send_window -= size
            self._queue(size)
            self._cut(size)
            chan._conn.send_packet(
                MSG_CHANNEL_DATA, chan._send_chan.to_bytes(4, "big"), size.to_bytes(4, "big"),
                data, handler=chan,
            )  # fmt: skip
            return
        for part in (data, payload):
            if part:
                pending.append((memoryview(part), None))
                chan._send_buf_len += len(part)
        self._queue(size + len(payload))
        self.flush()

    def _queue(self, size: int) -> None:
        self._queued += size
        self._ends.append(self._queued)

    def _cut(self, size: int) -> None:
        """``size`` more bytes cut into a packet; the requests they finished forgotten."""
        self._taken += size
        ends = self._ends
        while ends and ends[0] <= self._taken:
            self._sent_end = ends.popleft()

    def flush(self) -> None:
        """Send what the window takes, each packet cut across the waiting pieces."""
        chan = self._chan
        if chan._send_chan is None:
            # Closed for sending: asyncssh dropped what was unsent, and a writer
            # parked by the backlog may be flushed after that. asyncssh's own
            # flush would then fail its assertion on the closed channel's
            # session, inside the transport's resume_writing.
            return
        pending = chan._send_buf
        backlog = self._backlog
        head = chan._send_chan.to_bytes(4, "big")
        send = chan._conn.send_packet
        while pending and chan._send_window and pending[0][1] is None:
            room = min(chan._send_window, chan._send_pktsize)
            if backlog is not None and backlog.full:
                if self._sent_end == self._taken:  # between two requests
                    # Waits as views of the payload (charged until acknowledged),
                    # not as packets encrypted ahead; asyncssh's flush below would
                    # send the views its own way.
                    backlog.park(self)
                    return
                room = min(room, self._ends[0] - self._taken)  # the request's rest first
            pieces: list[bytes | bytearray | memoryview] = []
            size = 0
            while pending and size < room and pending[0][1] is None:
                buf = pending[0][0]
                take = room - size
                if take >= len(buf):
                    pieces.append(buf)
                    del pending[0]
                    size += len(buf)
                elif type(buf) is memoryview:
                    pieces.append(buf[:take])
                    pending[0] = (buf[take:], None)
                    size += take
                else:  # asyncssh's own bytearray (written the stock way)
                    pieces.append(bytes(buf[:take]))
                    del buf[:take]  # O(1) off a bytearray's front
                    size += take
            chan._send_buf_len -= size
            chan._send_window -= size
            self._cut(size)
            send(MSG_CHANNEL_DATA, head, size.to_bytes(4, "big"), *pieces, handler=chan)
        self._stock_flush()


def next_iv(iv: bytes) -> bytes:
    """The nonce after ``iv``: asyncssh's ``GCMCipher._update_iv``, without a method call."""
    return iv[:4] + ((int.from_bytes(iv[4:], "big") + 1) & _U64).to_bytes(8, "big")


def _aead(enc: object) -> AESGCM | None:
    """An ``AESGCM`` for asyncssh's GCM encryption object; None for any other cipher."""
    if type(enc) is not GCMEncryption:
        return None
    cipher = getattr(enc, "_cipher", None)
    if type(cipher) is not GCMCipher or not callable(getattr(cipher, "_update_iv", None)):
        return None
    key = getattr(cipher, "_key", None)
    if not isinstance(key, bytes) or not isinstance(getattr(cipher, "_iv", None), bytes):
        return None
    return AESGCM(key)


class _Decrypted:
    """Stands in for the receive cipher for one packet decrypted already.

    asyncssh's ``_recv_pkthdr``/``_recv_packet`` then slice and dispatch it
    as ever; the real cipher is put back as soon as the packet is handed over.
    """

    def __init__(self, conn: Any, real: object, plain: bytes) -> None:
        self._conn = conn
        self._real = real
        self._plain = plain

    def decrypt_header(self, seq: int, first_block: bytes, header_len: int) -> tuple[bytes, bytes]:
        return first_block, first_block[:header_len]

    def decrypt_packet(self, *args: object) -> bytes:
        if self._conn._recv_encryption is self:
            self._conn._recv_encryption = self._real
        return self._plain


class AeadPackets:
    """The fast receive (``recv_pkthdr``) and send (``send_packet``) of one connection."""

    def __init__(self, conn: Any, buffer: InputBuffer, batched: bool) -> None:
        self._conn = conn
        self._buf = buffer
        self._batched = batched
        self._stock_pkthdr = conn._recv_pkthdr
        # asyncssh's debug level is its logger class's: read per packet (level 2
        # and up log every data packet, which only the stock path does).
        level = getattr(conn._logger, "_debug_level", None)
        self._logger: Any = conn._logger if isinstance(level, int) else None
        self._stock_send = conn.send_packet
        self._recv_enc: object = None
        self._recv_aead: AESGCM | None = None
        self._send_enc: object = None
        self._send_aead: AESGCM | None = None
        # Padding is drawn from a pool, never reused: one getrandom per ~400
        # packets, not one each (an upload sends ~33,000 per GiB).
        self._pad = b""
        self._pad_at = 0

    @classmethod
    def fits(cls, conn: Any) -> bool:
        names = (
            "_recv_pkthdr", "_recv_encryption", "_recv_seq", "_max_recv_pktlen", "_channels",
            "_finish_recv_packet", "_decompressor", "_auth_complete", "_logger", "send_packet",
            "_send_encryption", "_send_seq", "_send_blocksize", "_send_enchdrlen", "_compressor",
            "_kex_complete", "_rekey_bytes", "_rekey_bytes_sent", "_rekey_seconds", "_send",
        )  # fmt: skip
        return all(hasattr(conn, name) for name in names)

    def install(self) -> None:
        # asyncssh sets ``_recv_handler = self._recv_pkthdr`` after each
        # packet: an instance attribute of that name is the one it picks.
        self._conn._recv_pkthdr = self.recv_pkthdr
        self._conn.send_packet = self.send_packet

    def _quiet(self) -> bool:
        logger = self._logger
        return logger is not None and logger._debug_level < 2

    # -- receive ------------------------------------------------------------

    def recv_pkthdr(self) -> bool:
        conn = self._conn
        enc = conn._recv_encryption
        if enc is not self._recv_enc:
            self._recv_enc, self._recv_aead = enc, _aead(enc)
        aead = self._recv_aead
        if aead is None or conn._decompressor is not None or not conn._auth_complete:
            return bool(self._stock_pkthdr())
        buf = self._buf
        if len(buf) < 4:
            return False
        pktlen = int.from_bytes(buf.front(4), "big")
        if pktlen > conn._max_recv_pktlen:
            raise asyncssh.ProtocolError("Max packet size exceeded")
        end = 4 + pktlen + _TAG
        if len(buf) < end:
            return False
        cipher = enc._cipher
        view = buf.front(end)  # where the socket's read put it, unless it spans two
        try:
            plain = aead.decrypt(cipher._iv, view[4:], view[:4])
        except InvalidTag:
            raise asyncssh.MACError("MAC verification failed") from None
        cipher._iv = next_iv(cipher._iv)
        chan = self._ours(plain)
        if chan is None:
            # Not for one of our channels: asyncssh's own path, on the plaintext.
            conn._recv_encryption = _Decrypted(conn, enc, plain)
            return bool(self._stock_pkthdr())
        # As asyncssh: consumed before it is acted on (which may close the connection).
        buf.consume(end)
        seq = conn._recv_seq
        if plain[1] == MSG_CHANNEL_DATA:
            datalen = len(plain) - plain[0] - _DATA_HEAD
            chan._recv_window -= datalen
            chan._deliver_data(memoryview(plain)[_DATA_HEAD : _DATA_HEAD + datalen], None)
        else:  # the server's window grew: what waited for it goes
            chan._send_window += int.from_bytes(plain[6:10], "big")
            chan._flush_send_buf()
        conn._finish_recv_packet(plain[1], seq)
        return True

    def _ours(self, plain: bytes) -> Any:
        """The open channel of ours a CHANNEL_DATA or WINDOW_ADJUST is for; None if not that.

        Anything asyncssh would refuse (past the window, a closed channel, a
        malformed packet) is left to it, to raise what it raises.
        """
        end = len(plain) - plain[0]
        if end < _DATA_HEAD or not self._quiet():
            return None
        pkttype = plain[1]
        if pkttype != MSG_CHANNEL_DATA and pkttype != MSG_CHANNEL_WINDOW_ADJUST:
            return None
        chan = self._conn._channels.get(int.from_bytes(plain[2:6], "big"))
        if chan is None or not getattr(chan, _VIEWS, False) or chan._recv_state != "open":
            return None
        if pkttype == MSG_CHANNEL_WINDOW_ADJUST:
            return chan if end == _DATA_HEAD else None
        datalen = int.from_bytes(plain[6:10], "big")
        if (
            _DATA_HEAD + datalen != end
            or not 0 < datalen <= chan._recv_window
            or chan._send_state in ("close_pending", "closed")
            or chan._recv_paused
        ):
            return None
        return chan

    # -- send ---------------------------------------------------------------

    def send_packet(self, pkttype: int, *args: bytes, handler: Any = None) -> None:
        conn = self._conn
        enc = conn._send_encryption
        if enc is not self._send_enc:
            self._send_enc, self._send_aead = enc, _aead(enc)
        aead = self._send_aead
        if (
            aead is None
            or pkttype <= MSG_USERAUTH_LAST
            or not (conn._auth_complete and conn._kex_complete)
            or conn._compressor is not None
            or conn._rekey_bytes_sent >= conn._rekey_bytes
            or (conn._rekey_seconds and time.monotonic() >= conn._rekey_time)
            or not self._quiet()
        ):
            self._stock_send(pkttype, *args, handler=handler)
            return
        size = 1 + sum(map(len, args))
        blocksize = conn._send_blocksize
        padlen = -(conn._send_enchdrlen + size) % blocksize
        if padlen < 4:
            padlen += blocksize
        plain = b"".join((bytes((padlen, pkttype)), *args, self._padding(padlen)))
        header = len(plain).to_bytes(4, "big")
        cipher = enc._cipher
        iv = cipher._iv
        sealed = aead.encrypt(iv, plain, header)
        cipher._iv = next_iv(iv)
        if self._batched:  # the batch is one writelines: no need to join them
            conn._send(header)
            conn._send(sealed)
        else:
            conn._send(header + sealed)
        conn._send_seq = (conn._send_seq + 1) & 0xFFFFFFFF
        conn._rekey_bytes_sent += len(plain)

    def _padding(self, size: int) -> bytes:
        """``size`` fresh random bytes (at most 4 + a block: well under the pool)."""
        at = self._pad_at
        if at + size > len(self._pad):
            self._pad, at = os.urandom(_PAD_POOL), 0
        self._pad_at = at + size
        return self._pad[at : at + size]
