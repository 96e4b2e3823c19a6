"""The book of temporary files: what each answer says was made, and what is left to count."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sshpipe.core.tempbook import TempBook

T = "/d/.a.sshpipe-0a1b2c.partial"


class Lines:
    """A record that keeps its lines, as the ledger appends them."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self.closed = 0

    def add(self, path: str) -> None:
        self.lines.append(("+", path))

    def drop(self, path: str) -> None:
        self.lines.append(("-", path))

    def close(self) -> None:
        self.closed += 1


def _made(book: TempBook) -> None:
    book.create_sent(T)
    book.create_answered(T, created=True)


def _refused(book: TempBook) -> None:
    book.create_sent(T)
    book.create_answered(T, created=False)


def _lost(book: TempBook) -> None:
    book.create_sent(T)
    book.create_lost(T)


def _made_then_lost_remove(book: TempBook) -> None:
    _made(book)
    book.doubt(T)


def _lost_then_reopened(book: TempBook) -> None:
    _lost(book)  # the first OPEN went with the connection; the reconnect's OPEN made it
    _made(book)


def _made_then_refused_reopen(book: TempBook) -> None:
    _made(book)
    _refused(book)  # a refusal after a handle does not unmake the file


def _lost_then_refused(book: TempBook) -> None:
    _lost(book)
    _refused(book)


def _sent_never_answered(book: TempBook) -> None:
    book.create_sent(T)


def _never_sent(book: TempBook) -> None:
    pass


@pytest.mark.parametrize(
    ("story", "left"),
    [
        (_made, "there"),
        (_refused, "nothing"),  # a read-only directory: nothing to report or remove
        (_lost, "maybe"),
        (_made_then_lost_remove, "maybe"),
        (_lost_then_reopened, "there"),
        (_made_then_refused_reopen, "there"),
        (_lost_then_refused, "maybe"),
        (_sent_never_answered, "maybe"),
        (_never_sent, "nothing"),
    ],
)
def test_what_the_answers_say_decides_what_is_left(
    story: Callable[[TempBook], None], left: str
) -> None:
    record = Lines()
    book = TempBook(record)
    book.add(T)
    story(book)
    there, maybe = book.left()
    assert (there, maybe) == {
        "there": ([T], []),
        "maybe": ([], [T]),
        "nothing": ([], []),
    }[left]
    # Entered before its create went out; out of the record only if nothing was made.
    assert record.lines[0] == ("+", T)
    assert (("-", T) in record.lines) == (left == "nothing")


def test_settle_closes_what_was_never_made_and_says_what_may_be_there() -> None:
    record = Lines()
    book = TempBook(record)
    book.add(T)
    _refused(book)
    assert book.settle(T) is False and not book.tracks(T)
    assert record.lines == [("+", T), ("-", T)]
    book.add(T)
    _made(book)
    assert book.settle(T) is True and book.tracks(T)


def test_gone_closes_it_unless_a_create_may_still_make_it_again() -> None:
    book = TempBook()
    book.add(T)
    book.create_sent(T)
    book.gone(T)  # a REMOVE answered before the OPEN it raced (another channel)
    assert book.tracks(T) and book.state(T) == "absent"
    book.create_answered(T, created=True)
    assert book.left() == ([T], [])
    book.gone(T)
    assert not book.tracks(T) and book.left() == ([], [])


def test_untracked_paths_are_ignored_and_an_entry_is_added_once() -> None:
    record = Lines()
    book = TempBook(record)
    for told in (book.create_sent, book.gone, book.doubt, book.create_lost):
        told("/elsewhere")
    book.create_answered("/elsewhere", created=True)
    assert len(book) == 0 and record.lines == []
    book.add(T)
    book.add(T)
    assert record.lines == [("+", T)]


def test_adopt_enters_a_file_that_is_there_already() -> None:
    book = TempBook()
    book.adopt(T)
    assert book.state(T) == "there" and book.settle(T)


def test_close_if_empty_closes_the_record_only_when_nothing_is_pending() -> None:
    record = Lines()
    book = TempBook(record)
    book.add(T)
    _made(book)
    book.close_if_empty()
    assert record.closed == 0
    book.gone(T)
    book.close_if_empty()
    assert record.closed == 1
