"""engine/backends/llama/slots.py: which free slot a prompt goes to, and the common-prefix measure.
Pure Python (no model): slots are plain records of the tokens each sequence's cache holds."""

from __future__ import annotations

from engine.backends.llama.slots import Slot, common_prefix, pick_slot


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 3, 4]) == 3
    assert common_prefix([1, 2, 3, 4], [1, 2]) == 2
    assert common_prefix([1, 9, 3], [1, 2, 3]) == 1
    assert common_prefix([], [1]) == 0


def test_an_extended_conversation_returns_to_its_own_slot() -> None:
    agent = Slot(0, kv=list(range(100)), used_at=5.0)
    title = Slot(1, kv=[0, 1, 2, 50, 51], used_at=1.0)
    empty = Slot(2, used_at=0.0)
    slot, n = pick_slot([title, empty, agent], [*range(100), 7, 8])
    assert slot is agent and n == 100


def test_a_shared_system_prompt_does_not_evict_a_long_conversation() -> None:
    long_chat = Slot(0, kv=list(range(40)), used_at=2.0)  # 10 tokens of system prompt + chat
    empty = Slot(1, used_at=3.0)
    new_chat = [*range(10), 99, 98]
    slot, n = pick_slot([long_chat, empty], new_chat)
    assert slot is empty and n == 0
    # ...but a prompt that reuses most of a slot's cache takes it over.
    subagent = [*range(30), 99]
    slot, n = pick_slot([long_chat, empty], subagent)
    assert slot is long_chat and n == 30


def test_without_a_useful_cache_the_empty_then_the_least_recently_used_slot() -> None:
    old = Slot(0, kv=[5, 6, 7], used_at=1.0)
    newer = Slot(1, kv=[8, 9], used_at=2.0)
    assert pick_slot([newer, old], [1, 2])[0] is old
    empty = Slot(2, used_at=9.0)
    assert pick_slot([newer, old, empty], [1, 2])[0] is empty


def test_with_split_caches_the_empty_slot_nearest_the_busy_ones() -> None:
    # llama.cpp attends over the span of busy sequences: 2 and 3 are busy, so a new job
    # without a useful cache takes the empty slot beside them before an older empty one far
    # away, and never a cached one while an empty slot is free.
    slots = [Slot(0, kv=[1], used_at=1.0), Slot(1, used_at=4.0), Slot(7, used_at=0.0)]
    assert pick_slot(slots, [9, 9], busy=(2, 3))[0].seq == 1
    assert pick_slot(slots, [9, 9], busy=(5, 6))[0].seq == 7
    # Without busy sequences (or with the unified pool): an empty slot, in LRU order.
    assert pick_slot(slots, [9, 9])[0].seq == 7


def test_a_cache_outranks_a_compact_span() -> None:
    # No empty slot: the least recently used cache goes, even far from the busy ones, so a
    # conversation that just ended beside them keeps its cache for its next turn.
    recent = Slot(1, kv=[5, 6, 7], used_at=9.0)
    old = Slot(7, kv=[8, 9], used_at=1.0)
    assert pick_slot([recent, old], [1, 2], busy=(2, 3))[0] is old
    # A useful cache still wins wherever it is.
    assert pick_slot([recent, old], [5, 6, 7, 1], busy=(2, 3))[0] is recent
