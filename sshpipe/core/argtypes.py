"""Argument types shared by the command lines (sshpipe's and its link emulator's).

Each raises ``argparse.ArgumentTypeError`` with a one-line reason, which the
parsers turn into a usage error (exit 2), never a traceback.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def size_at_least(minimum: int) -> Callable[[str], int]:
    """Bytes with an optional binary suffix: 65536, 64K, 4M, 1G (also 4MiB, 4MB)."""

    def parse(text: str) -> int:
        spelled = text.strip().lower().removesuffix("ib").removesuffix("b")
        factor = _UNITS.get(spelled[-1:], 1)
        digits = spelled[:-1] if spelled[-1:] in _UNITS else spelled
        try:
            value = int(digits) * factor
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"size must be at least {minimum}: {text!r}")
        return value

    return parse


def number_at_least(minimum: float, what: str) -> Callable[[str], float]:
    """A finite decimal number no smaller than ``minimum``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not (value >= minimum and value != float("inf")):
            raise argparse.ArgumentTypeError(
                f"{what} must be a finite number >= {minimum:g}: {text!r}"
            )
        return value

    return parse


def positive_int(text: str) -> int:
    """A whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value
