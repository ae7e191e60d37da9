"""The start-up heap is frozen out of the collector's way, and settled again after a model swap."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

from streamer import heap
from streamer.observe.stats import Stats
from tests.pipeline.test_serving import config as serving_config
from tests.pipeline.test_serving import next_reload, reloading, write_model
from tests.support.fakes import event
from tests.test_processor import P0, Harness, config


class Node:
    """A container that can sit in a reference cycle and be watched by a weak reference."""

    me: object = None


def cycle() -> tuple[Node, weakref.ref[Node]]:
    node = Node()
    node.me = node
    return node, weakref.ref(node)


@pytest.fixture(autouse=True)
def thawed() -> None:
    yield
    gc.unfreeze()  # the rest of the session collects as usual


def test_settle_collects_the_garbage_before_it_freezes_the_rest() -> None:
    node, ref = cycle()
    del node  # cyclic garbage: only the collector frees it
    heap.settle()
    assert ref() is None, "garbage was frozen instead of collected: it would never be freed"


def test_what_lives_through_settle_is_no_longer_walked_by_collections() -> None:
    kept = [[1.0]]
    heap.settle()
    assert gc.get_freeze_count() > 0
    assert not any(o is kept for o in gc.get_objects()), "a live start-up object is still in a generation"


def test_a_cycle_that_dies_among_frozen_objects_is_freed_by_the_next_settle() -> None:
    node, ref = cycle()
    heap.settle()  # frozen alive
    del node
    gc.collect()
    assert ref() is not None  # a plain collection does not look at frozen objects: why reloads settle
    heap.settle()
    assert ref() is None


def test_a_processor_freezes_the_heap_once_started_and_thaws_it_when_it_stops() -> None:
    h = Harness(config(max_wait_ms=0))
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(3)])
    gc.unfreeze()
    frozen: list[int] = []

    def running(s: Stats) -> bool:
        frozen.append(gc.get_freeze_count())
        return s.predictions == 3

    before = gc.get_threshold()
    young: list[int] = []

    def watched(s: Stats) -> bool:
        young.append(gc.get_threshold()[0])
        return running(s)

    h.run(watched)
    assert min(frozen) > 0, "the start-up heap was not frozen while the loop ran"
    assert gc.get_freeze_count() == 0, "the heap stays frozen after the processor stopped"
    assert min(young) >= heap.YOUNG_THRESHOLD, "the young generation was collected as often as ever"
    assert gc.get_threshold() == before, "the collector's thresholds were not given back"


def test_a_model_swap_settles_the_heap_and_a_refused_one_does_not(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    model = write_model(tmp_path / "model.onnx", version="1")
    serving, clock = reloading(serving_config(model, reload_check_ms=0))
    settled: list[str] = []
    monkeypatch.setattr(heap, "settle", lambda: settled.append(serving.model.version))
    write_model(model, seed=10, version="2")
    serving.ask_reload()
    assert next_reload(serving, clock).runner is not None
    assert settled == ["2"], "the swap did not settle the heap after the new model went in"
    model.write_bytes(b"truncated")  # a load that fails: refused, the serving model stays
    serving.ask_reload()
    assert next_reload(serving, clock).runner is None
    assert settled == ["2"]
