"""The start-up heap, taken out of the cyclic garbage collector's way once the process is ready.

A processor allocates most of its long-lived objects before the first event: the imported modules,
the model's session, the clients, the codecs (about 70,000 tracked objects for the demo). CPython's
full collection walks every one of them each time the young objects that survived two collections
reach a quarter of them, which the in-flight batches do every few ten thousand events: 45-130 ms of
one core per 100,000 events of the demo (0.5-1.3 us an event, and a pause of that length in the
loop), measured with ``gc.callbacks`` on this project's benchmark. ``gc.freeze()`` moves them to a
generation the collector never walks; a full collection then costs about a millisecond.

Frozen objects are still freed by reference counting; only garbage in reference cycles among them
would stay. So the heap is settled again (unfrozen, collected, frozen) after a model swap, which
is when start-up objects (the old model's) become garbage.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect what is garbage now, then freeze the rest: the next full collections walk only what
    is allocated from here on. Cheap to call again (a reload): it unfreezes first."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
