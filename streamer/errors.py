"""The one error tree of streamer: config errors, record errors and infrastructure errors.

Every error that concerns a single input record carries the record's coordinates (topic,
partition, offset) and its raw bytes, so the record can be dead-lettered exactly as it came.
"""

from __future__ import annotations

import math
import os
import traceback
from typing import TypeVar

# Exit codes: a contract for whatever supervises the process (systemd, Kubernetes, `--workers`).
EXIT_OK = 0  # stopped cleanly (a signal; a replay or the demo finished)
EXIT_UNEXPECTED = 1  # an exception streamer does not expect: a bug (Python's own code for it)
EXIT_CONFIG = 2  # usage or config error: restarting cannot help until the config is fixed
EXIT_FATAL = 3  # a runtime error that ends the process (fenced, fatal client error, broker away
#                 past the start-up wait): restart it; nothing past the last commit is lost
EXIT_WORKERS = 4  # `run --workers N`: workers kept dying and the supervisor gave up
EXIT_GATE = 5  # `evaluate --require`: a condition failed or could not be computed; the report is written
EXIT_STOPPED = 6  # a batch command (replay, score, evaluate, dlq redrive, produce) stopped by SIGTERM or
#                   Ctrl+C before its end: what was done is committed; the same --run-id resumes it
EXIT_WATCHDOG = 70  # a Kafka call blocked past its deadline (kafka/watchdog.py): restart it


class StreamerError(Exception):
    """Base class of every error streamer raises on purpose."""


_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".jsonl", ".csv", ".parquet", ".onnx", ".avsc", ".proto", ".npz")


def named(key: str) -> str:
    """What an error tells the user to change, in words: ``flag --require`` (a key that starts
    with ``-``), ``file 'models/m.onnx'`` (a path), else ``config key 'batching.max_size'``."""
    if key.startswith("-"):
        return f"flag {key}"
    if key.startswith(("/", "./", "../", "~")) or key.lower().endswith(_FILE_SUFFIXES):
        return f"file '{key}'"
    return f"config key '{key}'"


class ConfigError(StreamerError):
    """A configuration value is missing or wrong; ``key`` is its dotted path (``batching.max_size``),
    the flag (``--run-id``) or the file it is about, and the message names it so (:func:`named`)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{named(key)}: {reason}")
        self.key = key
        self.reason = reason


class FileError(ConfigError):
    """A file named on the command line or in the config cannot be read, or a row of it is wrong.

    Says where as ``file 'events.jsonl', line 3, field 'items[1].price': <reason>``; the line and
    the field (a dotted path, ``[n]`` for an array's item) appear when known. A ConfigError, so the
    exit code is 2: the file must be fixed.
    """

    def __init__(self, path: str | os.PathLike[str], reason: str, line: int | None = None,
                 field: str | None = None) -> None:
        where = f"file '{os.fspath(path)}'"
        if line is not None:
            where += f", line {line}"
        if field is not None:
            where += f", field '{field}'"
        StreamerError.__init__(self, f"{where}: {reason}")
        self.key = os.fspath(path)
        self.reason = reason
        self.path = os.fspath(path)
        self.line = line
        self.field = field


class MissingExtra(ConfigError):
    """A command or flag needs an optional extra that is not installed; the message says how to
    install it where streamer runs (``extras.install_line``). Exit 2: install it, then run again."""

    def __init__(self, what: str, extra: str, missing: list[str], install: str) -> None:
        StreamerError.__init__(self, f"{what} needs the {extra} extra ({', '.join(missing)} not installed): {install}")
        self.key = what
        self.reason = f"needs the {extra} extra"
        self.extra = extra


class ReplayFinishedError(ConfigError):
    """The run id has already covered its whole range (a replay) or its rows (a score): running it
    again cannot help (exit 2) unless it is forced or another run id is given. A lake run's says
    where it went, where its rejects are and what its commits hold: ``sink``, ``rejects_at`` and
    ``committed`` (predictions, rejects, rows)."""

    def __init__(self, reason: str, sink: str = "", committed: tuple[int, int, int] = (0, 0, 0),
                 rejects_at: str = "") -> None:
        super().__init__("--run-id", reason)
        self.sink, self.committed, self.rejects_at = sink, committed, rejects_at


class JobStateError(StreamerError):
    """A job asked to move where its state does not go (jobs/states.py's table): cancelling a
    completed job, starting an expired one."""

    def __init__(self, job_id: str, state: str, to: str) -> None:
        super().__init__(f"job {job_id!r} is {state}: it cannot move to {to}")
        self.job_id, self.state, self.to = job_id, state, to


class NoSuchJob(ConfigError):
    """A job id the status topic does not hold: the id given is wrong (exit 2)."""

    def __init__(self, job_id: str, topic: str) -> None:
        reason = f"no job {job_id!r} in {topic} (streamer jobs list shows the jobs there)"
        StreamerError.__init__(self, reason)
        self.key, self.reason, self.job_id = "ID", reason, job_id


class StaleCommitError(StreamerError):
    """A lake run's commit is refused: the shard's latest commit in the table or dataset is not
    the one this writer continued from. Another writer of the same run and shard committed since
    (or started the run again with ``--force``, or the table was rolled back). Nothing of the
    refused commit is visible. A shard takes one writer at a time; running the shard again
    resumes it from what the table holds (exit 3).

    ``resumed`` and ``found`` are commit numbers (``streamer.seq``), None for no commit.
    """

    def __init__(self, run_id: str, shard: str, resumed: int | None, found: int | None, where: str) -> None:
        def commit(seq: int | None) -> str:
            return "no commit" if seq is None else f"commit {seq}"

        super().__init__(
            f"run {run_id!r} (shard {shard}): this writer continued from {commit(resumed)} of the shard, "
            f"and {where} holds {commit(found)} as the shard's latest: another writer of the shard committed "
            "since (or ran it again with --force, or the table was rolled back). This commit is refused and "
            f"none of its rows are visible. Run one writer per shard; run the shard again to resume from what "
            f"{where} holds")
        self.run_id, self.shard, self.resumed, self.found = run_id, shard, resumed, found


class RecordError(StreamerError):
    """A single input record could not be processed at one stage of the pipeline.

    ``stage`` is one of :data:`STAGES`.
    The coordinates are filled in by whoever knows them (the codec does not; the processor does),
    through :meth:`at`.
    """

    stage = "unknown"

    def __init__(
        self,
        message: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        raw: bytes | None = None,
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.raw = raw

    def at(self, topic: str, partition: int, offset: int, raw: bytes | None) -> RecordError:
        """Attach the source record's coordinates and bytes; returns self for chaining."""
        self.topic, self.partition, self.offset, self.raw = topic, partition, offset, raw
        return self

    def coordinates(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


class DeserializeError(RecordError):
    """The bytes are not valid for the configured codec (truncated Avro, bad framing, bad JSON)."""

    stage = "deserialize"


class ValidationError(RecordError):
    """A decoded event cannot be scored (missing field, wrong feature count, NaN or infinity)."""

    stage = "validate"


class RouteError(RecordError):
    """The event's route field names no model of ``route.map`` (or is missing), and
    ``route.unknown`` is ``dead_letter``."""

    stage = "route"


class SerializeError(RecordError):
    """A prediction could not be encoded with the output schema."""

    stage = "serialize"


class PoisonRowError(RecordError):
    """The model fails on this row alone (found by bisecting a failing batch)."""

    stage = "infer"


class ProduceError(RecordError):
    """The broker refuses this one output for good (too large, invalid): retrying cannot help."""

    stage = "produce"


# Every stage a record can fail at, in pipeline order: the dead letters' stage header values, the
# dead-letter metric's labels and the choices of `dlq redrive --stage`. One RecordError subclass
# per stage (tests/test_errors.py checks that none is left out).
STAGES: tuple[str, ...] = tuple(error.stage for error in (
    DeserializeError, RouteError, ValidationError, PoisonRowError, SerializeError, ProduceError))


class InferenceError(StreamerError):
    """The model runtime failed on a batch, or returned the wrong number of output rows."""


class TransientInferenceError(InferenceError):
    """A failure that says nothing about the rows (out of device memory, a timeout): retry it."""


class CandidateFailedError(StreamerError):
    """``streamer evaluate``: the candidate failed most of a batch, or whole batches; the report
    covers what was compared before it, and the gate fails with this reason (exit 5)."""


class ModelBrokenError(InferenceError):
    """Most of a batch, or a run of whole batches, failed: the model is at fault, not the rows.

    Nothing is dead-lettered for it: the processor pauses its input, retries with back-off and
    reports itself unhealthy until the model answers again.
    """


class BrokerError(StreamerError):
    """The Kafka cluster refused or failed an operation we cannot continue without."""


class NoSuchTopic(BrokerError):
    """A topic the cluster does not have. Exit 3 where the config's own topics are waited for at
    start; a command that reads a topic the user named refuses it as a ConfigError (exit 2)."""


class ProducerFatalError(BrokerError):
    """The producer instance is unusable (librdkafka's fatal error state): a fresh producer
    recovers, the checkpoint makes one and rereads everything uncommitted. ``fenced``: its epoch is
    stale (a transaction the coordinator timed out, or a newer instance with the transactional.id);
    replaced once, and a second fence soon after ends the process (checkpoint.py)."""

    def __init__(self, message: str, fenced: bool) -> None:
        super().__init__(message)
        self.fenced = fenced


class CommitError(BrokerError):
    """An offset commit failed for at least one partition; ``failures`` maps 'topic[p]' to the error."""

    def __init__(self, failures: dict[str, str]) -> None:
        detail = ", ".join(f"{tp}: {err}" for tp, err in sorted(failures.items()))
        super().__init__(f"offset commit failed for {len(failures)} partition(s): {detail}")
        self.failures = failures


class TransactionAbortedError(BrokerError):
    """The open transaction must be aborted; the caller rewinds to the last commit and redoes."""


class StopRequested(StreamerError):
    """SIGTERM or SIGINT came while start-up waited for the cluster: nothing ran, exit 0."""


class LocalBrokerError(StreamerError):
    """The project's own local Kafka broker could not be resolved, started or reached."""


class StoreError(StreamerError):
    """The key-value store (kv:) or the feature store failed or did not answer within its timeout;
    the message names the store by its address, never its password."""


class OnlineError(StreamerError):
    """An online request that is not answered with scores (streamer/online/)."""


class BadRequest(OnlineError, ValueError):
    """A request the protocol or the model's inputs refuse (HTTP 400, gRPC INVALID_ARGUMENT)."""


class Shed(OnlineError):
    """Refused at admission: the queue is full, or the deadline cannot be met; retry after
    ``retry_after_s``. ``why``: queue, deadline or stopping (the metrics' label)."""

    def __init__(self, reason: str, retry_after_s: float, why: str = "queue") -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s
        self.why = why


class Expired(OnlineError):
    """The request's deadline passed while it waited for its batch: it was not scored."""


class Refused(OnlineError):
    """An online request not answered, as the transports answer it (online/plane.py): ``status``
    400 (the protocol or the model's inputs refuse it), 404 (another model), 413 (more rows than
    the queue holds, or a body past its limit), 422 (an event that cannot be scored), 409 (an
    answer from the precomputed predictions on a server without a store), 503 (not ready, shed,
    expired, or the store failing: retry after ``retry_after_s``) or 500 (the model failed). The jobs
    API (online/jobs_http.py) answers with it too: 400 (a body that cannot be read), 404 (an
    unknown job), 409 (a job's results before it completed, an id used already), 413 (a file past
    ``jobs.max_upload_bytes``), 415 (another content type). ``why``: a 503's cause where the
    answer may degrade on it (admission's ``deadline``, ``queue``, ``stopping``, or ``expired``)."""

    def __init__(self, status: int, reason: str, retry_after_s: float | None = None, *,
                 why: str | None = None) -> None:
        super().__init__(reason)
        self.status, self.retry_after_s, self.why = status, retry_after_s, why

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.retry_after_s is None else {"retry-after": str(math.ceil(self.retry_after_s))}


Frame = tuple[str, int, str]  # file, line, function
_FRAMES = "_streamer_frames"  # where detach() keeps an exception's frames
E = TypeVar("E", bound=BaseException)


def detach(exc: E) -> E:
    """``exc`` with its tracebacks (its own, its causes' and its contexts', shown or hidden)
    replaced by their frames' file, line and function (:func:`frames`), for an exception kept
    after it was caught; returns ``exc``.

    A traceback holds the frames it passed through, each of those its caller (``f_back``), and every
    frame its locals: code that keeps failures in its locals (the poison search's ``whole``,
    ``failure``, ``result``) or in a list its frame holds (a decode's ``rejects``) makes each a
    reference cycle, the batch caught in it, which only the garbage collector frees. A dead
    letter's trace needs no more than where (deadletter.py). A context Python does not print
    (``raise ... from None``: ``json`` raises its decode error so, over a StopIteration) holds
    frames all the same, so every link is walked.
    """
    todo: list[BaseException] = [exc]
    seen: set[int] = set()
    while todo:
        link = todo.pop()
        if id(link) in seen:
            continue
        seen.add(id(link))
        if link.__traceback__ is not None:
            setattr(link, _FRAMES, frames(link))  # read off the traceback, before it goes
            link.__traceback__ = None
        todo.extend(e for e in (link.__cause__, link.__context__) if e is not None)
    return exc


def frames(exc: BaseException) -> list[Frame]:
    """Where ``exc`` passed, outermost first: from its traceback, or as :func:`detach` kept it."""
    if exc.__traceback__ is None:
        return list(getattr(exc, _FRAMES, ()))
    return [(frame.f_code.co_filename, line, frame.f_code.co_name)
            for frame, line in traceback.walk_tb(exc.__traceback__)]
