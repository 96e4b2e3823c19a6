"""The words before argparse sees them: options on either side of the verb, and typos named.

``sshpipe -P 2222 get host:x .`` and ``sshpipe get -P 2222 host:x .`` are the
same command: the options before the verb are moved after it, in their order, so
one parser (the verb's) reads every option once, with its one set of defaults.
(argparse alone would let a subcommand's defaults overwrite what the top level
parsed, and split a repeated ``-i`` between the two.)

Every option word is checked against the verb's own before parsing, so a typo is
reported as itself, with the nearest real option (``difflib``), instead of as a
missing argument further on. Which words are an option's value is decided the way
argparse decides it: a value-taking option takes the next word unless the value
is attached (``-P2222``, ``--channels=4``); flags may be bundled (``-rp``); a long
option may be abbreviated while unambiguous.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator, Mapping, Sequence

from ..core.errors import UsageError

__all__ = ["OptionTable", "arrange", "unknown_option", "wants_control_command"]

# Option string -> its action, for one parser (every option string it accepts).
OptionTable = Mapping[str, argparse.Action]

# Words the top level answers itself, before any verb: they print and exit.
TOP_LEVEL = ("-h", "--help", "--version")

# A word argparse takes as a value although it starts with '-' (its own
# _negative_number_matcher; no option of ours looks like a number).
_NEGATIVE_NUMBER = re.compile(r"-\d+$|-\d*\.\d+$")

_POSITIONAL, _OPTION, _UNKNOWN = "positional", "option", "unknown"


def arrange(words: Sequence[str], verbs: Mapping[str, OptionTable], *, prog: str) -> list[str]:
    """``words`` with the verb first, the options given before it right after it.

    A ``-h``, ``--help`` or ``--version`` before the verb leaves the words as they
    are: the top-level parser answers it.

    Raises:
        UsageError: no verb, an unknown verb, or an option the verb does not have,
            each with the nearest real one where there is one.
    """
    everyone = {name: action for table in verbs.values() for name, action in table.items()}
    verb_at: int | None = None
    for index, kind in _scan(words, everyone):
        if words[index] in TOP_LEVEL:
            return list(words)
        if kind == _UNKNOWN:
            raise UsageError(unknown_option(words[index], [*everyone, *TOP_LEVEL], prog=prog))
        if kind == _POSITIONAL:
            verb_at = index
            break
    if verb_at is None:
        raise UsageError(f"no command: {_listed(verbs)} (see: {prog} --help)")
    verb = words[verb_at]
    if verb not in verbs:
        near = _nearest(verb, list(verbs))
        hint = f"did you mean {near[0]}?" if near else f"commands: {_listed(verbs)}"
        raise UsageError(f"unknown command {verb!r} ({hint})")
    arranged = [verb, *words[:verb_at], *words[verb_at + 1 :]]
    for index, kind in _scan(arranged[1:], verbs[verb]):
        if kind == _UNKNOWN:
            raise UsageError(
                unknown_option(arranged[1 + index], list(verbs[verb]), prog=f"{prog} {verb}")
            )
    return arranged


def unknown_option(word: str, known: Sequence[str], *, prog: str) -> str:
    """The line for an option nobody has: ``unknown option --verfy (did you mean --verify?)``."""
    name = word.partition("=")[0] if word.startswith("--") else word
    near = _nearest(name, known)
    hint = f"did you mean {near[0]}?" if near else f"see: {prog} --help"
    return f"unknown option {name} ({hint})"


def _nearest(word: str, known: Sequence[str]) -> list[str]:
    import difflib  # only for a word that is wrong: a command that is right never loads it

    return difflib.get_close_matches(word, known, n=1)


def _listed(verbs: Mapping[str, OptionTable]) -> str:
    names = list(verbs)
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)


def _scan(words: Sequence[str], options: OptionTable) -> Iterator[tuple[int, str]]:
    """Each word that is not an option's value: (its index, positional/option/unknown)."""
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":  # the rest are positional whatever they look like
            yield from ((rest, _POSITIONAL) for rest in range(index + 1, len(words)))
            return
        if not word.startswith("-") or word == "-" or _NEGATIVE_NUMBER.match(word):
            yield index, _POSITIONAL
            index += 1
            continue
        following = words[index + 1] if index + 1 < len(words) else None
        length = _option_length(word, following, options)
        yield index, (_UNKNOWN if length is None else _OPTION)
        index += length or 1


def _option_length(word: str, following: str | None, options: OptionTable) -> int | None:
    """How many words the option ``word`` spans (1, or 2 with its value); None: unknown."""
    if word.startswith("--"):
        name, attached, _ = word.partition("=")
        matches = [option for option in options if option.startswith(name)]
        if name in options:
            matches = [name]
        if not matches:
            return None
        if attached or len(matches) > 1:  # ambiguous: argparse says so in its own words
            return 1
        return 2 if _takes_value(options[matches[0]], following) else 1
    for position in range(1, len(word)):  # -x, -xVALUE, bundled flags -rp
        action = options.get(f"-{word[position]}")
        if action is None:
            return None
        if action.nargs != 0:
            if position + 1 < len(word):
                return 1  # the value is attached
            return 2 if _takes_value(action, following) else 1
    return 1


def _takes_value(action: argparse.Action, following: str | None) -> bool:
    if action.nargs == 0 or following is None:
        return False
    if action.nargs == "?":  # an optional value: only one of its choices (see --verify)
        return action.choices is not None and following in action.choices
    return True


def wants_control_command(argv: Sequence[str]) -> bool:
    """``-O`` among the words (ssh's spelling: ``-O check``, ``-Ocheck``)."""
    return any(word == "-O" or (word.startswith("-O") and len(word) > 2) for word in argv)
