"""A job's spec: what to score (source), where to (target), when (not before, within), and how it is named.

A spec is a small mapping, from YAML, JSON or the HTTP API, checked once here: a bad field
raises ConfigError naming ``job.<field>``, before anything is queued. ``model`` names the model
of the worker config's models (``models.named``, ``models.repository``) the job scores with;
without it, the default model (a replay to a topic of a routed config routes as the stream does).
Submitting checks the name against the config's models (:func:`check_model`), the worker takes
it again when the job runs. The job's id is its run id, so a job retried, resumed on another worker or submitted
twice scores each row once.

Worked example::

    name: nightly-scores
    model: acme
    source: {parquet: s3://events/2026-12-04/}
    target: {table: scores}
    within: 24h
    schedule: "0 2 * * *"
    timezone: Europe/Berlin

A slot of that schedule is the job ``nightly-scores-20261205T0100`` (02:00 in Berlin is 01:00
UTC): every submission of the slot, by a retried CronJob pod or by hand, is that one job.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
import zoneinfo
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from cronsim import CronSim, CronSimError

from streamer.errors import ConfigError
from streamer.kafka.ranges import parse_when

_NAME = re.compile(r"^[A-Za-z0-9._-]{1,60}$")
_ID = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_WITHIN = re.compile(r"^(\d+)\s*(s|m|h|d)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_FIELDS = {"name", "id", "model", "source", "target", "not_before", "within", "priority", "labels", "schedule", "timezone",
           "trigger"}


@dataclass(frozen=True, slots=True)
class JobSource:
    """Where a job's rows come from: Parquet files or a folder, an Iceberg table (or the rows one of
    its snapshots appended), or a range of the config's input topics."""

    parquet: tuple[str, ...] = ()  # a file or folder (local or s3://), or several files
    table: str | None = None
    snapshot: int | None = None  # with table: the rows this snapshot appended
    topic_from: str | None = None  # with topic_to: a range of the input topics, as `streamer replay --from/--to`
    topic_to: str | None = None

    @property
    def kind(self) -> str:
        return "parquet" if self.parquet else "table" if self.table else "topic"

    def to_dict(self) -> dict[str, Any]:
        if self.parquet:
            return {"parquet": self.parquet[0] if len(self.parquet) == 1 else list(self.parquet)}
        if self.table is not None:
            return {"table": self.table, **({} if self.snapshot is None else {"snapshot": self.snapshot})}
        return {"topic": {"from": self.topic_from, "to": self.topic_to}}


@dataclass(frozen=True, slots=True)
class JobTarget:
    """Where a job's predictions go: an Iceberg table, a Parquet dataset, a topic, or the key-value
    store under a key prefix (``kv``; empty: the worker config's ``kv.prefix``)."""

    table: str | None = None
    parquet: str | None = None
    topic: str | None = None
    kv: str | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.kv is not None:
            return {"kv": self.kv}
        return {k: v for k, v in (("table", self.table), ("parquet", self.parquet), ("topic", self.topic)) if v}


@dataclass(frozen=True, slots=True)
class Trigger:
    """New data that makes jobs: an Iceberg table's new snapshots, or a folder's new Parquet files."""

    table: str | None = None
    folder: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table} if self.table else {"folder": self.folder}


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A checked job spec; ``source`` is None only for a triggered spec (the trigger makes its jobs)."""

    target: JobTarget
    source: JobSource | None = None
    name: str | None = None
    id: str | None = None
    not_before_ms: int | None = None
    within_s: int | None = None
    priority: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    schedule: str | None = None
    timezone: str = "UTC"
    trigger: Trigger | None = None
    model: str | None = None  # a model of the worker config's models; None: the default model

    def to_dict(self) -> dict[str, Any]:
        """The spec as it is parsed (``parse_spec(spec.to_dict()) == spec``)."""
        out: dict[str, Any] = {}
        if self.name:
            out["name"] = self.name
        if self.id:
            out["id"] = self.id
        if self.model:
            out["model"] = self.model
        if self.source is not None:
            out["source"] = self.source.to_dict()
        out["target"] = self.target.to_dict()
        if self.not_before_ms is not None:
            out["not_before"] = dt.datetime.fromtimestamp(self.not_before_ms / 1000, dt.UTC).isoformat()
        if self.within_s is not None:
            out["within"] = f"{self.within_s}s"
        if self.priority:
            out["priority"] = self.priority
        if self.labels:
            out["labels"] = dict(self.labels)
        if self.schedule:
            out["schedule"], out["timezone"] = self.schedule, self.timezone
        if self.trigger is not None:
            out["trigger"] = self.trigger.to_dict()
        return out

    def with_id(self, job_id: str, source: JobSource | None = None) -> JobSpec:
        """The one job this spec is under ``job_id`` (a schedule's slot, a trigger's snapshot): no
        schedule, no trigger, ``source`` when given."""
        return JobSpec(self.target, source or self.source, self.name, job_id, self.not_before_ms, self.within_s,
                       self.priority, self.labels, model=self.model)


def parse_spec(raw: Any) -> JobSpec:
    """A spec mapping checked; ConfigError naming ``job.<field>`` for the first thing wrong."""
    if not isinstance(raw, Mapping):
        raise ConfigError("job", f"a job spec is a mapping of fields, got {type(raw).__name__}")
    unknown = sorted(set(map(str, raw)) - _FIELDS)
    if unknown:
        raise ConfigError(f"job.{unknown[0]}", f"is not a field of a job spec (fields: {', '.join(sorted(_FIELDS))})")
    name = _text(raw, "name", _NAME, "letters, digits, '.', '_' and '-', up to 60")
    job_id = _text(raw, "id", _ID, "letters, digits, '.', '_' and '-', up to 100")
    model = raw.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise ConfigError("job.model", f"must be a model's name, got {model!r}")
    trigger = _trigger(raw.get("trigger"))
    if trigger is not None and "source" in raw:
        raise ConfigError("job.source", "a triggered job's rows are the trigger's: give trigger or source, not both")
    source = None if trigger is not None else _source(raw.get("source"))
    target = _target(raw.get("target"), source)
    schedule, zone = raw.get("schedule"), raw.get("timezone", "UTC")
    if schedule is not None:
        _check_schedule(schedule, zone)
    elif "timezone" in raw:
        raise ConfigError("job.timezone", "is the schedule's time zone: give a schedule too")
    if (schedule is not None or trigger is not None) and name is None:
        raise ConfigError("job.name", f"is required with {'schedule' if schedule is not None else 'trigger'}: "
                                      "the ids of its jobs start with it")
    if schedule is not None and trigger is not None:
        raise ConfigError("job.schedule", "a job is scheduled or triggered, not both")
    if job_id is not None and (schedule is not None or trigger is not None):
        raise ConfigError("job.id", "a scheduled or triggered spec makes many jobs: their ids come from its name")
    priority = raw.get("priority", 0)
    if type(priority) is not int:
        raise ConfigError("job.priority", f"must be a whole number, got {priority!r}")
    labels = raw.get("labels", {})
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str | int | float)
                                                 for k, v in labels.items()):
        raise ConfigError("job.labels", "must be a mapping of names to text")
    return JobSpec(target, source, name, job_id, _not_before(raw.get("not_before")), _within(raw.get("within")),
                   priority, {k: str(v) for k, v in labels.items()}, schedule, str(zone), trigger, model)


def check_model(spec: JobSpec, models: Collection[str]) -> None:
    """Refuse a spec whose ``model`` is not one of ``models`` (the config's), on ``job.model``."""
    if spec.model is not None and spec.model not in models:
        raise ConfigError("job.model", f"no model {spec.model!r}; the models are {', '.join(sorted(models))}")


def new_job_id(spec: JobSpec, now: dt.datetime) -> str:
    """A job's id: the spec's, else ``<name or 'job'>-<UTC time>-<4 hex>``."""
    return spec.id or f"{spec.name or 'job'}-{now.astimezone(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:4]}"


def slot_id(name: str, slot: dt.datetime) -> str:
    """The id of a schedule's slot: ``<name>-<slot in UTC, to the minute>``."""
    return f"{name}-{slot.astimezone(dt.UTC):%Y%m%dT%H%M}"


def latest_slot(spec: JobSpec, now: dt.datetime) -> dt.datetime:
    """The schedule's latest time at or before ``now`` (``--slot latest``: a pod retried within its
    slot submits the same slot)."""
    assert spec.schedule is not None
    zone = zoneinfo.ZoneInfo(spec.timezone)
    here = now.astimezone(zone)
    if _fires_at(spec.schedule, here):
        return here.replace(second=0, microsecond=0)
    return next(iter(CronSim(spec.schedule, here, reverse=True)))


def slots_between(spec: JobSpec, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """The schedule's times in ``(start, end]``, oldest first (at most 1,000)."""
    assert spec.schedule is not None
    out: list[dt.datetime] = []
    for t in CronSim(spec.schedule, start.astimezone(zoneinfo.ZoneInfo(spec.timezone))):
        if t > end or len(out) == 1000:
            break
        out.append(t)
    return out


def parse_slot(text: str, spec: JobSpec, now: dt.datetime) -> dt.datetime:
    """``--slot``: ``latest`` (or ``now``: the schedule's latest time at or before it), or an ISO
    time that must be one of the schedule's."""
    if spec.schedule is None or spec.name is None:
        raise ConfigError("--slot", "is for a spec with a schedule (and a name)")
    if text in ("latest", "now"):
        return latest_slot(spec, now)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError("--slot", f"{text!r} is neither 'latest' nor an ISO time, e.g. 2026-12-05T02:00+01:00") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=zoneinfo.ZoneInfo(spec.timezone))
    if not _fires_at(spec.schedule, when.astimezone(zoneinfo.ZoneInfo(spec.timezone))):
        raise ConfigError("--slot", f"{text} is not a time of the schedule {spec.schedule!r} ({spec.timezone})")
    return when


def _fires_at(schedule: str, when: dt.datetime) -> bool:
    if when.second or when.microsecond:
        return False
    return next(iter(CronSim(schedule, when - dt.timedelta(minutes=1)))) == when


def _text(raw: Mapping[str, Any], key: str, pattern: re.Pattern[str], what: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not pattern.match(value):
        raise ConfigError(f"job.{key}", f"{value!r}: {what}")
    return value


def _one(raw: Any, key: str, kinds: tuple[str, ...]) -> tuple[str, Any]:
    """The one kind ``raw`` (a mapping) gives of ``kinds``."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"job.{key}", f"is required: a mapping with one of {', '.join(kinds)}")
    given = [k for k in kinds if k in raw]
    extra = sorted(set(map(str, raw)) - set(kinds) - ({"snapshot"} if key == "source" else set()))
    if extra:
        raise ConfigError(f"job.{key}.{extra[0]}", f"is not a kind of {key} (one of {', '.join(kinds)})")
    if len(given) != 1:
        raise ConfigError(f"job.{key}", f"give exactly one of {', '.join(kinds)}, got {len(given)}")
    return given[0], raw[given[0]]


def _source(raw: Any) -> JobSource:
    kind, value = _one(raw, "source", ("parquet", "table", "topic"))
    snapshot = raw.get("snapshot")
    if snapshot is not None and (kind != "table" or type(snapshot) is not int or snapshot <= 0):
        raise ConfigError("job.source.snapshot", "is a snapshot id (a whole number) of the source table")
    if kind == "parquet":
        files = [value] if isinstance(value, str) else value
        if not isinstance(files, list) or not files or not all(isinstance(f, str) and f for f in files):
            raise ConfigError("job.source.parquet", "must be a path (a file or folder, local or s3://) or a list of files")
        return JobSource(parquet=tuple(files))
    if kind == "table":
        if not isinstance(value, str) or not value:
            raise ConfigError("job.source.table", f"must be a table's name, got {value!r}")
        return JobSource(table=value, snapshot=snapshot)
    if not isinstance(value, Mapping) or set(value) - {"from", "to"} or "from" not in value:
        raise ConfigError("job.source.topic", "must be {from: WHEN, to: WHEN} (to: optional, the end at submit)")
    start, end = str(value["from"]), value.get("to")
    parse_when(start, "job.source.topic.from")
    if end is not None:
        parse_when(str(end), "job.source.topic.to")
    return JobSource(topic_from=start, topic_to=None if end is None else str(end))


def _target(raw: Any, source: JobSource | None) -> JobTarget:
    kind, value = _one(raw, "target", ("table", "parquet", "topic", "kv"))
    if kind == "kv":  # a key prefix; empty (or none): the worker config's kv.prefix
        if value is not None and (not isinstance(value, str) or any(c in value for c in " *?[]")):
            raise ConfigError("job.target.kv", f"must be a key prefix without spaces or * ? [ ] (empty: the "
                                               f"config's kv.prefix), got {value!r}")
        return JobTarget(kv=value or "")
    if not isinstance(value, str) or not value:
        raise ConfigError(f"job.target.{kind}", f"must be a name or path, got {value!r}")
    if kind == "topic" and source is not None and source.kind != "topic":
        raise ConfigError("job.target.topic", f"a topic target takes a topic source (a replay), not {source.kind}")
    return JobTarget(**{kind: value})


def _trigger(raw: Any) -> Trigger | None:
    if raw is None:
        return None
    kind, value = _one(raw, "trigger", ("table", "folder"))
    if not isinstance(value, str) or not value:
        raise ConfigError(f"job.trigger.{kind}", f"must be a table's name or a folder, got {value!r}")
    return Trigger(**{kind: value})


def _check_schedule(schedule: Any, zone: Any) -> None:
    if not isinstance(schedule, str):
        raise ConfigError("job.schedule", f"must be a cron expression (5 fields), got {schedule!r}")
    try:
        zoneinfo.ZoneInfo(str(zone))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ConfigError("job.timezone", f"{zone!r} is not a time zone (e.g. UTC, Europe/Berlin)") from None
    if len(schedule.split()) != 5:
        raise ConfigError("job.schedule", f"{schedule!r}: a cron expression has 5 fields (minute hour day month weekday)")
    try:
        CronSim(schedule, dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    except CronSimError as exc:
        raise ConfigError("job.schedule", f"{schedule!r}: {exc}") from None


def _not_before(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):  # YAML reads an unquoted time as one
        when = value
    else:
        try:
            when = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError("job.not_before", f"{value!r} is not an ISO time, e.g. 2026-12-05T01:00:00Z") from None
    if when.tzinfo is None:
        raise ConfigError("job.not_before", f"{value!r} has no time zone: add Z or an offset")
    return int(when.timestamp() * 1000)


def _within(value: Any) -> int | None:
    if value is None:
        return None
    m = _WITHIN.match(str(value).strip())
    if m is None or int(m.group(1)) <= 0:
        raise ConfigError("job.within", f"{value!r} is not a window such as 90m, 24h or 7d")
    return int(m.group(1)) * _UNIT_S[m.group(2)]
