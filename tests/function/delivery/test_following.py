"""The core's registry of followers: a kind of downstream work is followed through whatever
registered for it, and only that; the core itself knows no kind."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from exactly_once.delivery import following
from exactly_once.ledger.downstream import Downstream, DownstreamState


@pytest.fixture
def kind() -> Iterator[str]:
    """A kind no other test registers, forgotten afterwards."""
    name = f"test-kind-{uuid.uuid4().hex[:8]}"
    yield name
    following._followers.pop(name, None)


def ended(known: Downstream, timeout: float) -> Downstream:
    return Downstream(known.kind, known.name, DownstreamState.SUCCEEDED)


def test_a_registered_follower_is_the_one_asked(kind: str) -> None:
    following.register_follower(kind, ended)
    following.register_follower(kind, ended)  # a module imported twice registers again: the same one
    asked = following.follower(kind)(Downstream(kind, "work-1", DownstreamState.RUNNING), 1.0)
    assert asked == Downstream(kind, "work-1", DownstreamState.SUCCEEDED)


def test_a_second_follower_for_one_kind_is_refused_naming_the_kind(kind: str) -> None:
    following.register_follower(kind, ended)
    with pytest.raises(ValueError, match=f"downstream kind '{kind}' already has a follower"):
        following.register_follower(kind, lambda known, timeout: known)
    assert following.follower(kind) is ended


def test_a_kind_nobody_registered_is_refused_naming_it(kind: str) -> None:
    with pytest.raises(following.UnknownKind, match=f"no follower registered for downstream kind '{kind}'"):
        following.follower(kind)


def test_work_still_running_is_what_the_record_says() -> None:
    record = Downstream("any", "work-1", DownstreamState.RUNNING).fields()
    known = Downstream.from_record(record)
    assert known is not None and known.running
    assert not Downstream("any", "work-1", DownstreamState.FAILED).running
