"""bench_loopback.py --ciphers: one sshpipe and one OpenSSH sftp client per cipher, and their table.

The figure a cipher changes is the client's CPU, not the loopback wall time
(two cores shared with sshd and whatever else runs): **CPU-s/GiB** is the
client's user + system seconds for the file, net of its 1-byte set-up (the
interpreter, the imports, the handshake), per GiB moved. Whole-command time
and MB/s stay as a second column.

Imported by bench_loopback.py (run as a file, so this directory is on sys.path).
"""

from __future__ import annotations

import os
import statistics
import time

from _bench_common import Client, size_label
from _whole import SETUP_SIZE, Matrix
from _whole_report import cell, markdown_table
from asyncssh.encryption import encryption_needs_mac, get_encryption, get_encryption_params

GIB = 1 << 30
# What a stock sshd (OpenSSH 9.x) accepts of asyncssh's default list; the
# CBC, 3DES, Blowfish, CAST, SEED and RC4 ciphers asyncssh can also do are
# off in stock sshd, so no default of ours could reach them.
STOCK_CIPHERS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes128-ctr",
    "aes192-ctr",
    "aes256-ctr",
)
# What a stock sshd puts in one packet (its channels' 32 KiB maximum), and
# the MAC asyncssh and sshd agree on for the CTR modes (their first choice).
PACKET = 32 * 1024
CTR_MAC = "umac-64-etm@openssh.com"
ALONE_BYTES = 128 * 1024 * 1024


def cipher_list(text: str) -> tuple[str, ...]:
    """``--ciphers`` value: names separated by commas, or "all" for ``STOCK_CIPHERS``."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    return STOCK_CIPHERS if names == ("all",) else names


def short(cipher: str) -> str:
    return cipher.removesuffix("@openssh.com").replace("chacha20-poly1305", "chacha20")


def cipher_clients(ciphers: tuple[str, ...], sshpipe_common: tuple[str, ...]) -> list[Client]:
    """Per cipher, sshpipe and sftp (its defaults otherwise) with ``-c CIPHER``."""
    clients = []
    for cipher in ciphers:
        clients.append(
            Client(f"sshpipe:{short(cipher)}", "sshpipe", (*sshpipe_common, "-c", cipher, "--json"))
        )
        clients.append(Client(f"sftp:{short(cipher)}", "sftp", ("-c", cipher)))
    return clients


def cipher_alone(cipher: str) -> tuple[float, float]:
    """asyncssh's own packet encryption, in this process: (encrypt, decrypt) CPU-s/GiB.

    The part of a transfer's CPU the cipher (and MAC) account for, without
    sockets, SFTP or the event loop: put encrypts, get decrypts.
    """
    alg = cipher.encode()
    mac = CTR_MAC.encode() if encryption_needs_mac(alg) else b""
    key_size, iv_size, block, mac_key_size, _mac_size, etm = get_encryption_params(alg, mac)
    key, iv, mac_key = os.urandom(key_size), os.urandom(iv_size), os.urandom(mac_key_size)
    sender = get_encryption(alg, key, iv, mac, mac_key, etm)
    receiver = get_encryption(alg, key, iv, mac, mac_key, etm)
    # As asyncssh's connection frames one: the 4-byte length, then the rest.
    payload = os.urandom(PACKET)
    header = len(payload).to_bytes(4, "big")
    first_len = max(8, block)  # asyncssh's reader takes the first block first
    encrypt_s = decrypt_s = 0.0
    # One packet at a time, decrypted as soon as sealed: no 128 MiB held, and
    # the sequence numbers (nonces, GCM's counter) stay in step.
    for seq in range(ALONE_BYTES // PACKET):
        start = time.process_time()
        data, tag = sender.encrypt_packet(seq, header, payload)
        middle = time.process_time()
        first, _ = receiver.decrypt_header(seq, data[:first_len], 4)
        plain = receiver.decrypt_packet(seq, first, data[first_len:], 4, tag)
        end = time.process_time()
        if plain != payload:
            raise RuntimeError(f"{cipher}: a packet failed its check")
        encrypt_s += middle - start
        decrypt_s += end - middle
    scale = GIB / ALONE_BYTES
    return encrypt_s * scale, decrypt_s * scale


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def cpu_table(matrix: Matrix, alone: dict[str, tuple[float, float]]) -> str:
    """One row per size, direction and client: CPU-s/GiB first, then the whole command.

    ``alone`` is ``cipher_alone``'s answer per cipher, shown on sshpipe's rows
    (decrypt for get, encrypt for put).
    """
    header = ["size", "dir", "client", "CPU-s/GiB", "cipher alone", "CPU s", "set-up CPU s",
              "whole s", "MB/s", "ok/runs"]  # fmt: skip
    lines = []
    sizes = sorted({size for s in matrix.settings for size in s.sizes})
    for size in sizes:
        for direction in matrix.directions:
            for client in matrix.clients:
                mine = [
                    s for s in matrix.samples
                    if s.client == client.name and s.direction == direction
                ]  # fmt: skip
                runs = [s for s in mine if s.kind == "transfer" and s.size_bytes == size]
                good = [s for s in runs if s.ok]
                cpu = _median([s.cpu_s for s in good])
                setup = _median([s.cpu_s for s in mine if s.kind == "setup" and s.ok])
                whole = _median([s.wall_s for s in good])
                per_gib = None if cpu is None or setup is None else (cpu - setup) * GIB / size
                name = f"**{client.name}**" if client.kind == "sshpipe" else client.name
                cipher = next((c for c in alone if client.name == f"sshpipe:{short(c)}"), None)
                own = None if cipher is None else alone[cipher][direction == "get"]
                lines.append([
                    size_label(size), direction, name, cell(per_gib, ".2f"), cell(own, ".2f"),
                    cell(cpu, ".2f"),
                    cell(setup, ".2f"), cell(whole, ".2f"),
                    cell(None if whole is None else size / 1e6 / whole, ".1f"),
                    f"{len(good)}/{len(runs)}",
                ])  # fmt: skip
    heading = (
        "### Client CPU per cipher: CPU-s/GiB = (CPU s − set-up CPU s) / size, "
        f"user + system, medians; set-up = a {SETUP_SIZE}-byte file; **cipher alone** = "
        f"asyncssh encrypting (put) or decrypting (get) {PACKET // 1024} KiB packets in one "
        f"process, CPU-s/GiB (CTR modes with {CTR_MAC}, as negotiated with sshd)"
    )
    return "\n".join([heading, "", *markdown_table(header, lines)])
