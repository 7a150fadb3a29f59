"""The server-side assignors of KIP-848: every subscribed partition to exactly one subscribed
member, balanced, and (uniform) sticky."""

import uuid

from exactly.groups.assignors import range_assignor, uniform_assignor

A, B = uuid.UUID(int=1), uuid.UUID(int=2)


def _owners(result):
    owners = {}
    for member, assignment in result.items():
        for topic, partitions in assignment.items():
            for p in partitions:
                assert (topic, p) not in owners, f"{topic}/{p} given twice"
                owners[(topic, p)] = member
    return owners


def _counts(result):
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def test_uniform_balances_and_covers_every_partition():
    subs = {m: frozenset({A, B}) for m in ("m1", "m2", "m3", "m4")}
    result = uniform_assignor(subs, {A: 6, B: 5}, {})
    assert len(_owners(result)) == 11
    assert sorted(_counts(result).values()) == [2, 3, 3, 3]


def test_uniform_is_sticky_when_a_member_joins():
    subs = {"m1": frozenset({A}), "m2": frozenset({A})}
    before = uniform_assignor(subs, {A: 6}, {})
    after = uniform_assignor({**subs, "m3": frozenset({A})}, {A: 6}, before)
    assert _counts(after) == {"m1": 2, "m2": 2, "m3": 2}
    for member in ("m1", "m2"):  # the old members only gave partitions up
        assert after[member][A] <= before[member][A]


def test_uniform_respects_heterogeneous_subscriptions():
    subs = {"m1": frozenset({A}), "m2": frozenset({A, B}), "m3": frozenset({B})}
    result = uniform_assignor(subs, {A: 4, B: 4}, {})
    owners = _owners(result)
    assert len(owners) == 8
    for (topic, _), member in owners.items():
        assert topic in subs[member]
    assert max(_counts(result).values()) - min(_counts(result).values()) <= 1


def test_range_gives_consecutive_ranges_in_member_order_co_partitioned():
    subs = {"m2": frozenset({A, B}), "m1": frozenset({A, B})}
    result = range_assignor(subs, {A: 5, B: 5}, {})
    assert result["m1"] == {A: frozenset({0, 1, 2}), B: frozenset({0, 1, 2})}
    assert result["m2"] == {A: frozenset({3, 4}), B: frozenset({3, 4})}


def test_unsubscribed_topics_and_members_without_topics_get_nothing():
    result = uniform_assignor({"m1": frozenset({A}), "m2": frozenset()}, {A: 2, B: 3}, {})
    assert result == {"m1": {A: frozenset({0, 1})}, "m2": {}}
