"""Which cipher to offer first, from what the CPU can do: flags in, an order out.

The cipher costs the client CPU on every byte, and which one is cheap depends
on the machine: AES-GCM runs on the AES and carry-less-multiply instructions
(x86 ``aes`` + ``pclmulqdq``, arm64 ``aes`` + ``pmull``) where they exist, the
cheapest there, and costs about twice chacha20-poly1305's CPU where they do
not. The flags decide: no micro-benchmark, nothing timed. Unreadable flags
keep ``DEFAULT_CIPHERS``.

Only the order differs: both lists hold the same ciphers, so a server that
takes one of them takes it either way; "none" is in neither.

The reading of ``/proc/cpuinfo`` is the caller's (``transport/cpuflags``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AES_FIRST", "CHACHA_FIRST", "CipherChoice", "choose_ciphers", "cpu_flags"]

# AES-GCM first where the CPU has the instructions for it. Measured on an
# AMD EPYC with AES-NI (README, "Ciphers: the client's CPU per GiB"): AES-GCM
# costs sshpipe's client 4.4-5.7 CPU-s/GiB (get-put), chacha20-poly1305
# 6.5-9.6 (asyncssh's chacha20 alone is 2.5x GCM's); aes128-ctr with
# umac-64-etm ties GCM on get and costs ~15 % more on put: CTR stays last.
AES_FIRST = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes128-ctr",
    "aes256-ctr",
)
# Without those instructions (emulated, masked from OpenSSL by OPENSSL_ia32cap):
# AES-GCM's software GHASH makes it the dearest (4.7-7.0 CPU-s/GiB for the
# cipher alone), chacha20-poly1305 and aes128-ctr + umac near each other
# (2.6-3.3; whole command, a tie on get, CTR 20 % cheaper on put). chacha20
# stays first: constant-time without AES hardware, where table-based AES is
# not, and OpenSSH's own first choice; then CTR, GCM last.
CHACHA_FIRST = (
    "chacha20-poly1305@openssh.com",
    "aes128-ctr",
    "aes256-ctr",
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
)
# The flags AES-GCM needs, per the field /proc/cpuinfo lists them in: the
# block cipher and the carry-less multiply GHASH runs on.
_NEEDED = {
    "flags": ("aes", "pclmulqdq"),  # x86
    "features": ("aes", "pmull"),  # arm64
}


@dataclass(frozen=True, kw_only=True, slots=True)
class CipherChoice:
    """The order to offer and why (``-vv`` prints ``reason``)."""

    order: tuple[str, ...]
    reason: str


def cpu_flags(cpuinfo: str) -> tuple[str, frozenset[str]] | None:
    """The first processor's flag field of a ``/proc/cpuinfo`` text: (field, flags).

    ``field`` is "flags" (x86) or "features" (arm64), lower case; None when
    neither is there (another architecture, or a kernel that hides them).
    """
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip().lower()
        if sep and key in _NEEDED:
            return key, frozenset(value.lower().split())
    return None


def choose_ciphers(
    flags: tuple[str, frozenset[str]] | None, fallback: tuple[str, ...]
) -> CipherChoice:
    """The cipher order for a CPU whose flag field is ``flags`` (``cpu_flags``'s answer).

    Args:
        flags: (field, flags), or None when they could not be read.
        fallback: the order kept when the flags say nothing (``DEFAULT_CIPHERS``).

    Returns:
        ``AES_FIRST`` with both instructions, ``CHACHA_FIRST`` when one is
        missing (AES without carry-less multiply still has a slow GHASH),
        ``fallback`` when unknown.
    """
    if flags is None:
        return CipherChoice(order=fallback, reason="CPU flags unreadable: the default order kept")
    field, have = flags
    needed = _NEEDED[field]
    missing = [flag for flag in needed if flag not in have]
    if not missing:
        return CipherChoice(
            order=AES_FIRST,
            reason=f"AES-GCM first: the CPU has {' and '.join(needed)} ({field})",
        )
    return CipherChoice(
        order=CHACHA_FIRST,
        reason=f"chacha20-poly1305 first: the CPU lacks {' and '.join(missing)} ({field})",
    )
