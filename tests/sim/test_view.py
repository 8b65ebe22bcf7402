"""The engine as schedulers see it: seats, KV, and what a dispatch released."""

from __future__ import annotations

import pytest

from slopolicy.errors import UsageError
from slopolicy.sim import Engine, EngineSpec, EngineView, profile

SMALL = EngineSpec(profile("llama3-8b/h100"), max_num_seqs=3, num_blocks=40, block_size=16)


def test_the_view_shows_the_engines_seats_and_kv() -> None:
    view = EngineView(Engine(SMALL))
    assert (view.max_num_seqs, view.num_blocks, view.block_size) == (3, 40, 16)
    assert (view.running, view.waiting, view.free_seats, view.free_blocks) == (0, 0, 3, 40)
    assert (view.kv_usage(), view.decode_tokens(), view.waiting_tokens) == (0.0, 0, 0)


def test_releases_take_seats_and_kv_until_settled() -> None:
    engine = Engine(SMALL)
    view = EngineView(engine)
    assert view.claim(100)  # 7 blocks with its first token
    assert (view.waiting, view.free_seats, view.spare_blocks(), view.waiting_tokens) == (
        1,
        2,
        33,
        100,
    )
    view.release(500)  # released without checking: 32 blocks
    assert view.spare_blocks() == 1
    assert not view.admissible(100)  # KV for its prompt is gone
    assert view.claim(15)  # one block
    assert not view.claim(1)  # no seat left
    view.settle()
    assert (view.waiting, view.free_seats, view.spare_blocks()) == (0, 3, 40)


def test_what_the_engine_queues_counts_as_the_releases_did() -> None:
    engine = Engine(SMALL)
    view = EngineView(engine)
    view.release(100)
    released = (view.waiting, view.spare_blocks(), view.waiting_tokens)
    view.settle()
    assert engine.add("r", 100, 10)  # what the simulator does with a release
    assert (view.waiting, view.spare_blocks(), view.waiting_tokens) == released
    end = engine.start(0.0)
    assert end is not None
    assert (view.running, view.waiting, view.waiting_tokens) == (1, 0, 0)
    assert view.kv_usage() > 0


def test_bad_prompt_lengths_raise() -> None:
    view = EngineView(Engine(SMALL))
    for call in (view.admissible, view.release, view.claim):
        with pytest.raises(UsageError, match="prompt_tokens"):
            call(0)
