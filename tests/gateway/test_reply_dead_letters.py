"""Replies given up on, kept as dead letters: the files, and the running profile's side (the
delivery hook before the journal, the watch that sends a retry once)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from bus import Message, OutboundMessage, new_turn_id
from bus.envelope import SENT_AGAIN_AT
from channels.errors import DeliveryError
from gateway.daemon.reply_dead_letters import (
    DEAD_LETTERS_DIR,
    DeadLetterStore,
    ProfileDeadLetters,
    ReplyDeadLetter,
)
from gateway.metrics import GatewayMetrics
from gateway.turn.journal import Journal, Outcome


def reply(text: str = "the answer", *, chat_id: str = "42") -> OutboundMessage:
    return OutboundMessage(
        channel="telegram",
        chat_id=chat_id,
        content=text,
        reply_to="7",
        metadata={"octos.session": "main:telegram:42"},
        delivery_id=str(new_turn_id()),
    )


def id_of(message: OutboundMessage) -> str:
    delivery_id = message.delivery_id
    assert delivery_id is not None
    return delivery_id


def refused(
    reason: str = "auth", text: str = "Forbidden: bot was blocked by the user"
) -> DeliveryError:
    return DeliveryError(text, reason=reason, channel="telegram", attempts=1)


def letter_of(message: OutboundMessage, reason: str = "auth") -> ReplyDeadLetter:
    return ReplyDeadLetter.of("main", message, refused(reason))


def test_a_kept_letter_reads_back_whole_from_another_store(tmp_path: Path) -> None:
    message = reply()
    DeadLetterStore(tmp_path).add(letter_of(message, "expired"))

    [letter] = DeadLetterStore(tmp_path).letters()
    assert (letter.id, letter.profile, letter.reason, letter.attempts) == (
        message.delivery_id,
        "main",
        "expired",
        1,
    )
    assert "bot was blocked" in letter.error
    assert letter.reply == message
    assert not letter.retrying
    # One readable file per letter in the profile's folder.
    [path] = (tmp_path / DEAD_LETTERS_DIR).glob("*.json")
    assert json.loads(path.read_text())["chat_id"] == "42"


def test_letters_are_listed_oldest_first_and_newest_counts_them_all(tmp_path: Path) -> None:
    store = DeadLetterStore(tmp_path)
    kept = [reply(f"reply {n}") for n in range(4)]
    for message in kept:
        store.add(letter_of(message))
    assert [letter.reply for letter in store.letters()] == kept
    count, newest = store.newest(2)
    assert count == 4
    assert len(newest) == 2


def test_retry_moves_a_letter_until_it_is_sent_and_drop_forgets_either(tmp_path: Path) -> None:
    store = DeadLetterStore(tmp_path)
    first, second = reply("one"), reply("two")
    for message in (first, second):
        store.add(letter_of(message))

    assert store.ask_retry(id_of(first))
    assert store.ask_retry(id_of(first))  # asked already: still asked
    assert {letter.id: letter.retrying for letter in store.letters()} == {
        id_of(first): True,
        id_of(second): False,
    }
    store.sent_again(id_of(first))
    assert [letter.id for letter in store.letters()] == [id_of(second)]

    assert not store.ask_retry("no-such-letter")
    assert store.drop(id_of(second))
    assert not store.drop(id_of(second))
    assert store.letters() == []


def test_a_retried_letter_that_fails_again_is_dead_again_with_its_new_reason(
    tmp_path: Path,
) -> None:
    store = DeadLetterStore(tmp_path)
    message = reply()
    store.add(letter_of(message, "expired"))
    store.ask_retry(id_of(message))

    store.add(letter_of(message, "auth"), was_retried=True)

    [letter] = store.letters()
    assert (letter.reason, letter.retrying) == ("auth", False)


async def journal_with_reply(directory: Path, message: OutboundMessage) -> Journal:
    journal = Journal(directory)
    await journal.open()
    outcome = Outcome(
        turn=id_of(message),
        answers=[],
        session="main:telegram:42",
        messages=[Message.assistant(message.content)],
        reply=message,
    )
    await journal.record_outcome(outcome)
    return journal


class Profile:
    """`ProfileDeadLetters` over a real journal and store, recording what it sends."""

    def __init__(self, root: Path, journal: Journal) -> None:
        self.root = root
        self.journal = journal
        self.sent: list[OutboundMessage] = []
        self.store = DeadLetterStore(root)
        self.registry = CollectorRegistry()
        self.dead_letters = ProfileDeadLetters(
            "main",
            self.store,
            journal,
            GatewayMetrics.create(self.registry).reply_dead_letters,
            self.send,
        )

    async def send(self, message: OutboundMessage) -> None:
        self.sent.append(message)

    async def deliver(self, message: OutboundMessage, error: DeliveryError | None) -> None:
        recorded = self.dead_letters.delivered(message, [], error)
        if recorded is not None:
            await recorded

    def counted(self, reason: str) -> float | None:
        return self.registry.get_sample_value(
            "octos_reply_dead_letters_total",
            {"profile": "main", "channel": "telegram", "reason": reason},
        )


async def test_a_reply_given_up_on_is_kept_before_the_journal_lets_it_go(tmp_path: Path) -> None:
    message = reply()
    journal = await journal_with_reply(tmp_path / "journal", message)
    profile = Profile(tmp_path, journal)

    await profile.deliver(message, refused())

    [letter] = profile.store.letters()
    assert letter.reply == message
    assert profile.counted("auth") == 1
    await journal.close()
    again = Journal(tmp_path / "journal")
    assert (await again.open()).undelivered == []
    await again.close()


async def test_a_letter_that_cannot_be_kept_stays_undelivered_in_the_journal(
    tmp_path: Path,
) -> None:
    message = reply()
    journal = await journal_with_reply(tmp_path / "journal", message)
    (tmp_path / DEAD_LETTERS_DIR).write_text("a file where the folder belongs")
    profile = Profile(tmp_path, journal)

    await profile.deliver(message, refused())

    assert profile.counted("auth") is None
    await journal.close()
    again = Journal(tmp_path / "journal")
    [undelivered] = (await again.open()).undelivered
    assert undelivered.reply == message
    await again.close()


async def test_a_retry_is_sent_once_with_a_fresh_deadline_and_forgotten_once_delivered(
    tmp_path: Path,
) -> None:
    message = reply()
    journal = await journal_with_reply(tmp_path / "journal", message)
    profile = Profile(tmp_path, journal)
    await profile.deliver(message, refused("expired"))
    await profile.dead_letters.look()
    assert profile.sent == []

    DeadLetterStore(tmp_path).ask_retry(id_of(message))  # the command line
    await profile.dead_letters.look()
    await profile.dead_letters.look()

    [sent] = profile.sent
    assert sent.delivery_id == message.delivery_id
    assert sent.content == message.content
    assert isinstance(sent.metadata[SENT_AGAIN_AT], float)
    await profile.deliver(sent, None)
    assert profile.store.letters() == []
    await profile.dead_letters.look()
    assert len(profile.sent) == 1
    await journal.close()


async def test_a_retry_that_fails_again_is_a_dead_letter_again(tmp_path: Path) -> None:
    message = reply()
    journal = await journal_with_reply(tmp_path / "journal", message)
    profile = Profile(tmp_path, journal)
    await profile.deliver(message, refused("expired"))
    profile.store.ask_retry(id_of(message))
    await profile.dead_letters.look()
    [sent] = profile.sent

    await profile.deliver(sent, refused("auth"))

    [letter] = profile.store.letters()
    assert (letter.reason, letter.retrying) == ("auth", False)
    assert profile.counted("auth") == 1
    # Asked again, it is sent again.
    profile.store.ask_retry(id_of(message))
    await profile.dead_letters.look()
    assert len(profile.sent) == 2
    await journal.close()


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden"])
def test_an_id_never_names_a_file_outside_the_folder(tmp_path: Path, name: str) -> None:
    message = reply().model_copy(update={"delivery_id": name})
    store = DeadLetterStore(tmp_path / "profile")
    store.add(letter_of(message))
    assert [letter.id for letter in store.letters()] == [name]
    assert [path.parent for path in (tmp_path / "profile").rglob("*.json")] == [store.directory]
