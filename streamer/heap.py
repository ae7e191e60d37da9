"""The start-up heap, kept out of the cyclic garbage collector's way while the processor runs.

A processor allocates most of its long-lived objects before the first event: the imported modules,
the model's session, the clients, the codecs (about 70,000 tracked objects for the demo). CPython's
full collection walks every one of them each time the young objects that survived two collections
reach a quarter of them, which the in-flight batches do every few ten thousand events: 45-130 ms of
one core per 100,000 events of the demo (0.5-1.3 us an event, and a pause of that length in the
loop), measured with ``gc.callbacks`` on this project's benchmark. ``gc.freeze()`` moves them to a
generation the collector never walks; a full collection then costs about a millisecond.

Freezing and thawing are constant-time (lists spliced), so a start costs nothing. Frozen objects
are still freed by reference counting; only garbage in reference cycles among them waits: what
start-up left stays until the processor stops (:func:`thaw` gives the heap back, for a process that
runs processors one after another, as the tests do), and the old model after a swap is collected at
once (:func:`settle`).
"""

from __future__ import annotations

import gc

# While a processor runs, the youngest generation is collected after this many net allocations
# of container objects, not CPython's 700. The loop allocates about three an event (the consumed
# message, the produce call's dict, the delivery report's message) and keeps a chunk or two of
# them alive in flight, so at 700 it crossed the threshold every few hundred events and walked
# the young in-flight objects each time: 0.12 us an event of figure (c), measured with
# gc.callbacks. Above a chunk's worth, the allocations and frees of a pass balance out first.
YOUNG_THRESHOLD = 10_000
_saved: list[tuple[int, int, int]] = []  # the thresholds a freeze replaced, for thaw


def freeze() -> None:
    """Take every object alive now out of the collector's walks (a processor starting), and
    collect the young generation less often (YOUNG_THRESHOLD) until :func:`thaw`."""
    gc.freeze()
    if not _saved:
        _saved.append(gc.get_threshold())
        gc.set_threshold(max(YOUNG_THRESHOLD, _saved[0][0]), *_saved[0][1:])


def thaw() -> None:
    """Give the frozen objects back to the collector and its thresholds back (a processor stopping)."""
    gc.unfreeze()
    if _saved:
        gc.set_threshold(*_saved.pop())


def settle() -> None:
    """Collect the garbage among everything, frozen or not, then freeze what lives (a model swap:
    the old model's objects are garbage now)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
