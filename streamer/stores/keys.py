"""The store's key layout: every key streamer writes, named in one place.

Under ``kv.prefix`` (``P``):

- ``P:current``: the id of the complete run that readers use (one string, switched atomically
  when a run completes);
- ``P:run:<run id>:<entity id>``: one precomputed prediction, a hash of the prediction fields
  (stores/values.py says how each is written);
- ``P:run:<run id>``: the run's record, a hash: each shard's plan and progress, the prediction
  fields' kinds, and ``finished_at`` once complete;
- ``P:rejects:<run id>``: a stream of the run's rejects (reason, original bytes);
- ``P:runs``: a sorted set of run ids by start time.

A reader resolves ``P:current`` and then reads the entity's hash under that run; a run's keys are
removed ``kv.keep_previous_s`` after a newer run replaced it, so a reader that resolved the
previous run a moment before the switch still finds its hash.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KeySpace:
    """The keys under one prefix."""

    prefix: str

    @property
    def current(self) -> str:
        return f"{self.prefix}:current"

    @property
    def runs(self) -> str:
        return f"{self.prefix}:runs"

    def run(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}"

    def entity(self, run_id: str, entity_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:{entity_id}"

    def entities(self, run_id: str) -> str:
        """A SCAN pattern of the run's entity keys."""
        return f"{self.prefix}:run:{run_id}:*"

    def rejects(self, run_id: str) -> str:
        return f"{self.prefix}:rejects:{run_id}"


def feature_key(prefix: str, entity_id: str) -> str:
    """An entity's features, a hash of event fields (online.features.prefix, kind redis)."""
    return f"{prefix}:{entity_id}"
