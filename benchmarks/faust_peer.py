"""The processor's job as an idiomatic faust-streaming agent: the comparison peer for figure (h).

    python benchmarks/faust_peer.py --bootstrap B --input-topic T --output-topic O --events N

One faust app, run in this process by a ``faust.Worker`` (fresh app id and consumer group each run,
reading from the earliest offset, web server off, a temporary datadir): Avro feature events
(``streamer/schemas/feature_event.avsc``, unframed) are decoded by a faust codec built on fastavro's
``schemaless_reader``, batched with ``stream.take_events(512, within=0.02)``, scored with one ONNX
Runtime call per batch (the demo config's model and runner), and each prediction
(``streamer/schemas/prediction.avsc``) is sent to the output topic with the event's key. The topics must exist.
The last stdout line is the rate in events/s: N divided by the time from the first batch the agent
receives to the acknowledgement of the N-th prediction. ``run_faust`` runs this script as a
subprocess and returns that rate.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import faust
import numpy as np
from fastavro import schemaless_reader, schemaless_writer
from faust.serializers import codecs

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from streamer.commands.demo import demo_config  # noqa: E402
from streamer.formats.avro import load_schema  # noqa: E402
from streamer.model.runner import model_runner  # noqa: E402
from streamer.testing import score_matrix  # noqa: E402

BATCH = 512
WITHIN_S = 0.02
TIMEOUT_S = 300.0


class AvroCodec(codecs.Codec):
    """Unframed Avro for one record schema, by fastavro (logical types applied, as fastavro does)."""

    def __init__(self, schema: Mapping[str, Any], children: tuple[codecs.CodecT, ...] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(children=children, schema=schema, **kwargs)
        self.schema = schema

    def _loads(self, s: bytes) -> Any:
        return schemaless_reader(io.BytesIO(s), self.schema)

    def _dumps(self, s: Any) -> bytes:
        out = io.BytesIO()
        schemaless_writer(out, self.schema, s)
        return out.getvalue()


async def serve(bootstrap: str, input_topic: str, output_topic: str, events: int,
                timeout_s: float = TIMEOUT_S) -> float:
    """Run the faust app until ``events`` predictions are acknowledged; returns events/s."""
    cfg = demo_config(bootstrap, uuid.uuid4().hex[:8], BATCH)
    runner = model_runner(cfg)
    runner.warm_up(BATCH)
    model_name, model_version = cfg.model.name, cfg.model.version
    done: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    with tempfile.TemporaryDirectory(prefix="faust-peer-") as datadir:
        app = faust.App(
            f"faust-peer-{uuid.uuid4().hex[:8]}",  # the app id is also the consumer group
            broker=f"kafka://{bootstrap}",
            datadir=datadir,
            web_enabled=False,
            consumer_auto_offset_reset="earliest",
            topic_allow_declare=False,  # the benchmark creates the topics
            topic_disable_leader=True,  # no leader topic: nothing here needs a leader
            producer_acks=-1,  # acks=all, as the processor
            producer_linger=0.002,  # linger.ms 2, as the processor
        )
        source = app.topic(input_topic, key_serializer="raw",
                           value_serializer=AvroCodec(load_schema(REPO / "streamer" / "schemas" / "feature_event.avsc")))
        sink = app.topic(output_topic, key_serializer="raw",
                         value_serializer=AvroCodec(load_schema(REPO / "streamer" / "schemas" / "prediction.avsc")))

        @app.agent(source)
        async def score(stream: faust.StreamT) -> None:
            started: float | None = None
            scored = 0
            sent: list[asyncio.Future[Any]] = []
            try:
                async for batch in stream.take_events(BATCH, within=WITHIN_S):
                    started = started or time.perf_counter()
                    matrix = np.array([e.value["features"] for e in batch], dtype=np.float32)
                    rows = score_matrix(runner, matrix).tolist()
                    scored_at = int(time.time() * 1000)
                    for event, row in zip(batch, rows):
                        value, message = event.value, event.message
                        sent.append(await sink.send(key=event.key, value={
                            "event_id": value["event_id"], "entity_id": value["entity_id"], "scores": row,
                            "model_name": model_name, "model_version": model_version,
                            "source_topic": message.topic, "source_partition": message.partition,
                            "source_offset": message.offset, "event_time": value["event_time"],
                            "scored_at": scored_at, "run_id": None}))
                    scored += len(batch)
                    if scored >= events:
                        await asyncio.gather(*sent)  # every prediction acknowledged (or raises)
                        if not done.done():
                            done.set_result(events / (time.perf_counter() - started))
                    elif len(sent) >= 8 * BATCH:  # let go of acknowledged sends; a failed one raises
                        for f in sent:
                            if f.done():
                                f.result()
                        sent = [f for f in sent if not f.done()]
            except Exception as exc:  # the agent would only log it; the run must fail instead
                if not done.done():
                    done.set_exception(exc)
                raise

        # Logs and the worker's own output go to stderr: stdout is the rate's. No terminal spinner: at
        # level WARNING it sets the root logger to DEBUG and spins on every record, several per event.
        worker = faust.Worker(app, loglevel="WARNING", logfile=sys.stderr, quiet=True, redirect_stdouts=False,
                              daemon=False, stdout=sys.stderr)
        worker.spinner = None
        await worker.start()
        try:
            # Returns early, as stopped, if the worker or anything under it (consumer, producer) crashes.
            outcome = await worker.wait(asyncio.shield(done), timeout=timeout_s)
        finally:
            await worker.stop()
        if not outcome.stopped:
            return float(outcome.result)
        if worker.crash_reason is not None:
            raise RuntimeError(f"faust peer: the worker crashed: {worker.crash_reason!r}")
        raise TimeoutError(f"faust peer: {events} events not scored and acknowledged within "
                           f"{timeout_s:.0f} s (is {input_topic!r} filled, and do both topics exist?)")


def run_faust(bootstrap: str, input_topic: str, output_topic: str, events: int,
              timeout_s: float = TIMEOUT_S) -> float:
    """Run the faust peer in a subprocess of its own; returns its rate in events/s."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--bootstrap", bootstrap, "--input-topic",
           input_topic, "--output-topic", output_topic, "--events", str(events), "--timeout", str(timeout_s)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s + 60)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"faust peer failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return float(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input-topic", required=True)
    ap.add_argument("--output-topic", required=True)
    ap.add_argument("--events", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds before giving up (exit 1)")
    args = ap.parse_args()
    try:
        rate = asyncio.run(serve(args.bootstrap, args.input_topic, args.output_topic, args.events,
                                 args.timeout))
    except (TimeoutError, RuntimeError) as exc:
        sys.exit(str(exc))
    print(rate, flush=True)


if __name__ == "__main__":
    main()
