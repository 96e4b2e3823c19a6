"""The cipher order from the CPU's flags: /proc/cpuinfo texts in, an order out."""

from __future__ import annotations

import pytest

from sshpipe.core.cipherorder import AES_FIRST, CHACHA_FIRST, choose_ciphers, cpu_flags

FALLBACK = ("aes256-ctr",)  # distinct from both orders, so a fallback is seen as one

EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sse2 ssse3 pclmulqdq sse4_1 aes avx

processor\t: 1
flags\t\t: fpu
"""
# QEMU's default "qemu64" model: no AES-NI, no carry-less multiply.
QEMU64 = (
    "processor\t: 0\nmodel name\t: QEMU Virtual CPU version 2.5+\nflags\t\t: fpu de pse sse sse2\n"
)
# AES-NI passed through but PCLMULQDQ masked (seen in some hypervisor CPU models).
AES_NO_CLMUL = "flags\t\t: fpu sse2 aes avx\n"
GRAVITON = (
    "processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\n"
)
# Raspberry Pi 4 (Cortex-A72 without the crypto extension).
PI4 = "processor\t: 0\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\n"
# POWER and s390x list no flags or Features field: nothing to decide from.
POWER9 = "processor\t: 0\ncpu\t\t: POWER9 (architected), altivec supported\n"


@pytest.mark.parametrize(
    ("cpuinfo", "order", "reason"),
    [
        (EPYC, AES_FIRST, "AES-GCM first: the CPU has aes and pclmulqdq (flags)"),
        (QEMU64, CHACHA_FIRST, "chacha20-poly1305 first: the CPU lacks aes and pclmulqdq (flags)"),
        (AES_NO_CLMUL, CHACHA_FIRST, "chacha20-poly1305 first: the CPU lacks pclmulqdq (flags)"),
        (GRAVITON, AES_FIRST, "AES-GCM first: the CPU has aes and pmull (features)"),
        (PI4, CHACHA_FIRST, "chacha20-poly1305 first: the CPU lacks aes and pmull (features)"),
        (POWER9, FALLBACK, "CPU flags unreadable: the default order kept"),
        ("", FALLBACK, "CPU flags unreadable: the default order kept"),
    ],
)
def test_the_cpu_flags_choose_the_order(cpuinfo: str, order: tuple[str, ...], reason: str) -> None:
    choice = choose_ciphers(cpu_flags(cpuinfo), FALLBACK)
    assert choice.order == order
    assert choice.reason == reason


def test_only_the_first_processors_flags_are_read() -> None:
    assert cpu_flags(EPYC) == ("flags", frozenset(EPYC.splitlines()[3].split(":")[1].split()))
    # A later processor's line never decides: the second one of EPYC has no aes.
    assert cpu_flags("flags : fpu\nflags : aes pclmulqdq\n") == ("flags", frozenset({"fpu"}))


def test_flag_names_are_matched_as_whole_words_in_any_case() -> None:
    # "vaes" or "aes_ni" are not "aes"; the kernel writes lower case, but a field name may vary.
    assert choose_ciphers(cpu_flags("flags : vaes pclmulqdq\n"), FALLBACK).order == CHACHA_FIRST
    assert choose_ciphers(cpu_flags("FLAGS : AES PCLMULQDQ\n"), FALLBACK).order == AES_FIRST


def test_both_orders_offer_the_same_ciphers_and_never_none() -> None:
    """Only the order depends on the CPU: a server that takes one list takes the other."""
    assert sorted(AES_FIRST) == sorted(CHACHA_FIRST)
    assert "none" not in AES_FIRST
    assert AES_FIRST[0].startswith("aes") and CHACHA_FIRST[0].startswith("chacha20")
