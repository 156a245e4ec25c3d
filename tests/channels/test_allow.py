"""AllowList: the one owner of "who may talk to the bot", for every channel."""

from __future__ import annotations

from channels.access.allow import AllowList


def test_ids_and_usernames_match_any_identity_of_a_sender() -> None:
    allow = AllowList([42, "@Alice"])
    assert allow.allows("42")
    assert allow.allows("7|alice")
    assert allow.allows("7|@ALICE")
    assert not allow.allows("7|mallory")


def test_a_domain_pattern_allows_that_domain_but_not_its_subdomains() -> None:
    allow = AllowList(["alice@example.org", "*@Friends.Example"])
    assert allow.allows("ALICE@example.org")
    assert allow.allows("bob@friends.example")
    assert not allow.allows("bob@sub.friends.example")
    assert not allow.allows("friends.example")
    assert not allow.allows("@friends.example")
    assert not allow.is_empty


def test_star_allows_everyone_and_nothing_allows_nobody() -> None:
    assert AllowList(["*"]).allows("anyone")
    nobody = AllowList([])
    assert nobody.is_empty
    assert not nobody.allows("anyone")


def test_senders_approved_by_pairing_are_consulted_last() -> None:
    approved = {"mallory@evil.example"}
    allow = AllowList(["*@friends.example"], extra=approved.__contains__)
    assert allow.allows("mallory@evil.example")
    assert not allow.allows("eve@evil.example")
