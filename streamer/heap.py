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


def freeze() -> None:
    """Take every object alive now out of the collector's walks (a processor starting)."""
    gc.freeze()


def thaw() -> None:
    """Give the frozen objects back to the collector (a processor stopping)."""
    gc.unfreeze()


def settle() -> None:
    """Collect the garbage among everything, frozen or not, then freeze what lives (a model swap:
    the old model's objects are garbage now)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
