"""The jobs API over HTTP, ``/v1/jobs``: a spec or a file of requests submitted, jobs read and cancelled, a file job's results streamed.

Served by the online server when ``jobs.api_token`` is set (without it the routes do not exist:
404). Every route takes ``Authorization: Bearer <token>``, compared in constant time; without
it the answer is 401 and nothing is read or queued. Routes:

- ``POST /v1/jobs``: a spec (``application/json`` or ``application/yaml``), queued as ``streamer
  jobs submit`` queues it; or a file of requests (``application/x-ndjson``: JSON Lines;
  ``application/vnd.apache.parquet``), one event per row, stored as
  ``<jobs.files>/<id>/requests.parquet`` (jobs/files: online/jobs_files.py) and queued as the job
  ``{source: {parquet: that file}, target: {parquet: <id>/results}}``; the query may give ``id``,
  ``name``, ``within``, ``priority``, ``not_before``. 202 with ``{"id", "state", "location"}`` and
  ``Location: /v1/jobs/<id>``; 200 for a spec whose id is a job already (it is left as it is).
- ``GET /v1/jobs/<id>``: the job's status record; ``GET /v1/jobs?status=S``: ``{"jobs": [...]}``.
- ``POST /v1/jobs/<id>/cancel``: a queued job is cancelled, a running one stops at its next commit.
- ``GET /v1/jobs/<id>/results`` and ``.../errors``: a completed job's predictions and rejects (a
  Parquet target's), as JSON Lines, a batch at a time; 409 with the state before it completed.

Refusals are ``{"error": ...}`` (with ``"field"`` where one is at fault): 400 a body that cannot
be read, 401, 404, 409, 413 past ``jobs.max_upload_bytes`` (a spec past ``online.max_body_bytes``),
415 another content type, 422 a spec's field (``job.<field>``) or a file without a column the
model needs, 503 the broker cannot be reached.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import re
import threading
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import orjson
import yaml
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from streamer.config import Config, model_entries
from streamer.errors import BrokerError, ConfigError, NoSuchJob, Refused
from streamer.jobs.board import Board, ensure_topics
from streamer.jobs.queue import cancel, submit
from streamer.jobs.spec import JobSource, JobSpec, JobTarget, check_model, new_job_id, parse_spec
from streamer.jobs.states import JobStatus, State
from streamer.lake.table import TableSource
from streamer.model.contract import Contract
from streamer.online.http import json_error, read_body
from streamer.online.jobs_files import BATCH_ROWS, JSONL, PARQUET, Upload, read_lines
from streamer.pipeline.validate import EventValidator

SPEC_JSON = frozenset({"application/json"})
SPEC_YAML = frozenset({"application/yaml", "application/x-yaml", "text/yaml"})
QUERY = ("id", "name", "within", "priority", "not_before")  # a file job's fields, from the query
_INT = re.compile(r"^[+-]?\d+$")
T = TypeVar("T")
Handler = Callable[[Request], Awaitable[Response]]


class JobsApi:
    """The ``/v1/jobs`` routes for ``cfg`` (its ``jobs`` and ``lake`` sections); ``contract``: the
    served model's, which a file's columns are checked against before its job is queued."""

    def __init__(self, cfg: Config, contract: Contract) -> None:
        assert cfg.jobs.api_token is not None
        self.cfg, self.contract = cfg, contract
        self._token = cfg.jobs.api_token.value.encode()
        self._board: Board | None = None
        self._opening = threading.Lock()
        self._uploading: set[str] = set()  # ids whose files are being written (a second upload: 409)
        root = cfg.jobs.files or f"{cfg.lake.warehouse.rstrip('/')}/jobs"
        self.files = root if "://" in root and not root.startswith("file://") else str(Path(root).resolve())

    def routes(self) -> list[Route]:
        g = self._guarded
        return [Route("/v1/jobs", g(self.post), methods=["POST"]), Route("/v1/jobs", g(self.list), methods=["GET"]),
                Route("/v1/jobs/{id}", g(self.get), methods=["GET"]),
                Route("/v1/jobs/{id}/cancel", g(self.cancel), methods=["POST"]),
                Route("/v1/jobs/{id}/results", g(partial(self.rows, rejects=False)), methods=["GET"]),
                Route("/v1/jobs/{id}/errors", g(partial(self.rows, rejects=True)), methods=["GET"])]

    def close(self) -> None:
        if self._board is not None:
            self._board.close()

    # ---- the guard: the token, and refusals as answers --------------------------------------

    def _guarded(self, handler: Handler) -> Handler:
        async def guarded(request: Request) -> Response:
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if not (scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self._token)):
                return json_error(401, "the jobs API takes Authorization: Bearer <jobs.api_token>",
                                  {"www-authenticate": 'Bearer realm="streamer jobs"'})
            try:
                return await handler(request)
            except Refused as exc:
                return json_error(exc.status, str(exc), exc.headers)
            except NoSuchJob as exc:  # gone from the board meanwhile (forgotten)
                return json_error(404, str(exc))
            except ConfigError as exc:  # a spec's field, or a file's column the model needs
                return _json({"error": str(exc), "field": exc.key}, 422)
            except BrokerError as exc:
                return json_error(503, f"the jobs' topics cannot be reached: {exc}", {"retry-after": "5"})
        return guarded

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(None, partial(fn, *args))

    async def board(self) -> Board:
        """The status topic, followed from the first request on."""
        if self._board is None:
            await self._run(self._open_board)
        assert self._board is not None
        return self._board

    def _open_board(self) -> None:
        with self._opening:
            if self._board is None:
                ensure_topics(self.cfg)
                self._board = Board(self.cfg).follow()

    async def _known(self, request: Request) -> JobStatus:
        job_id = request.path_params["id"]
        status = (await self.board()).get(job_id)
        if status is None:
            raise Refused(404, f"no job {job_id!r}")
        return status

    # ---- the routes ----------------------------------------------------------------------

    async def post(self, request: Request) -> Response:
        kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        declared = request.headers.get("content-length", "")
        if kind in JSONL or kind in PARQUET:
            if declared.isdigit() and int(declared) > self.cfg.jobs.max_upload_bytes:  # refused unread
                raise Refused(413, f"the file is {declared} bytes, over the {self.cfg.jobs.max_upload_bytes}-byte "
                                   "limit (jobs.max_upload_bytes)")
            try:
                return await self._file(request, kind)
            except (Refused, ConfigError):
                await _drain(request, self.cfg.jobs.max_upload_bytes)
                raise
        if kind in SPEC_JSON or kind in SPEC_YAML:
            return await self._spec(request, kind)
        raise Refused(415, f"content-type {kind or 'none'!r}: a spec is application/json or application/yaml, a "
                           "file of requests application/x-ndjson or application/vnd.apache.parquet")

    async def _spec(self, request: Request, kind: str) -> Response:
        limit = self.cfg.online.max_body_bytes
        body, size = await read_body(request.stream(), limit)
        if body is None:
            raise Refused(413, f"the spec is {size} bytes, over the {limit}-byte limit (online.max_body_bytes)")
        try:
            raw = orjson.loads(body) if kind in SPEC_JSON else yaml.safe_load(body)
        except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
            raise Refused(400, f"the body is not {'JSON' if kind in SPEC_JSON else 'YAML'}: {exc}") from None
        spec = parse_spec(raw)
        if spec.schedule is not None:
            raise ConfigError("job.schedule", "a scheduled spec is submitted per slot (its CronJob, or "
                                              "`streamer jobs submit --slot`): give a spec without a schedule")
        if spec.trigger is not None:
            raise ConfigError("job.trigger", "a triggered spec runs under `streamer jobs watch`, not submitted")
        check_model(spec, model_entries(self.cfg))
        return await self._submit(spec)

    async def _file(self, request: Request, kind: str) -> Response:
        spec = self._query_spec(request)
        job_id = new_job_id(spec, dt.datetime.now(dt.UTC))
        board = await self.board()
        existing = board.get(job_id)
        if existing is not None or job_id in self._uploading:
            raise Refused(409, f"job {job_id!r} exists ({existing.state if existing else 'being uploaded'}): "
                               "a file job's id is used once")
        self._uploading.add(job_id)  # before the next await: a second upload of the id meanwhile is 409
        try:
            folder = f"{self.files}/{job_id}"
            upload = Upload(self.cfg.lake, folder, self.cfg.jobs.max_upload_bytes)
            if await self._run(upload.exists):  # a job's files the status topic no longer names: kept
                raise Refused(409, f"{folder} exists: a file job's id is used once")
            await upload.write(kind, request.stream())
            try:
                await self._run(self._check, upload.location)
            except ConfigError:
                await self._run(upload.delete)
                raise
            return await self._submit(replace(spec, id=job_id, source=JobSource(parquet=(upload.location,)),
                                              target=JobTarget(parquet=f"{folder}/results")))
        finally:
            self._uploading.discard(job_id)

    def _query_spec(self, request: Request) -> JobSpec:
        """A file job's fields from the query (ConfigError naming ``job.<field>``), with the
        file's source and target yet to come."""
        raw: dict[str, Any] = {}
        for key, value in request.query_params.items():
            if key not in QUERY:
                raise ConfigError(f"job.{key}", f"is not a field of a file job's query (fields: {', '.join(QUERY)})")
            raw[key] = int(value) if key == "priority" and _INT.match(value) else value
        spec = parse_spec({**raw, "source": {"parquet": self.files}, "target": {"parquet": self.files}})
        if spec.id is not None and spec.id.startswith("."):
            raise ConfigError("job.id", f"{spec.id!r}: a file job's id names its folder: it cannot start with '.'")
        return spec

    def _check(self, location: str) -> None:
        """Refuse a file whose columns the model's inputs cannot read, as ``streamer score`` would."""
        validator = EventValidator(self.cfg.input, self.contract, self.cfg.output.include)
        TableSource(self.cfg.lake, location, validator, self.contract.stack, BATCH_ROWS).check(self.contract)

    async def _submit(self, spec: JobSpec) -> Response:
        status, queued = await self._run(submit, self.cfg, spec, await self.board())
        where = f"/v1/jobs/{status.id}"
        return _json({"id": status.id, "state": str(status.state), "location": where}, 202 if queued else 200,
                     {"location": where})

    async def get(self, request: Request) -> Response:
        return _json((await self._known(request)).to_dict())

    async def list(self, request: Request) -> Response:
        wanted = request.query_params.get("status")
        if wanted is not None and wanted not in set(State):
            raise Refused(400, f"status {wanted!r} is not one of {', '.join(State)}")
        jobs = [s.to_dict() for s in (await self.board()).all() if wanted is None or s.state == wanted]
        return _json({"jobs": jobs})

    async def cancel(self, request: Request) -> Response:
        status = await self._known(request)
        if status.final and status.state != State.CANCELLED:
            raise Refused(409, f"job {status.id!r} is {status.state}: there is nothing to cancel")
        return _json((await self._run(cancel, await self.board(), status.id)).to_dict())

    async def rows(self, request: Request, rejects: bool) -> Response:
        status = await self._known(request)
        if status.state != State.COMPLETED:
            return _json({"error": f"job {status.id!r} is {status.state}: its "
                                   f"{'rejects are' if rejects else 'results are'} served once it is completed",
                          "state": str(status.state)}, 409)
        target = status.job.target
        if target.parquet is None:
            raise Refused(404, f"job {status.id!r} wrote to {status.output}: results are served for a Parquet "
                               "target (a file job's)")
        location = f"{target.parquet.rstrip('/')}_rejects" if rejects else target.parquet
        return StreamingResponse(read_lines(self.cfg.lake, location), media_type="application/x-ndjson")


async def _drain(request: Request, limit: int) -> None:
    """Read and drop what is left of a refused body (up to ``limit`` bytes more), so that the
    client reads the answer: a connection closed on unread bytes is reset, answer and all."""
    size = 0
    try:
        async for chunk in request.stream():  # from where the refusal left it
            size += len(chunk)
            if size > limit:
                return
    except (RuntimeError, ClientDisconnect):  # read to its end already; the client has gone
        return


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers, media_type="application/json")
