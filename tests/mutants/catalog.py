"""The deliberate bugs of `make mutants`: each one breaks a core promise, and named tests must fail.

Every edit is anchored by the function it lives in and the text it replaces there (see
``tests/mutants/apply.py``), never by a line number: code moving around a function leaves its
mutants in place. When a refactor changes the text itself, ``python tests/mutants/run.py --check``
names the mutant, file and function to rewrite; keep the bug the same.

A Python module rather than a data file: an edit can hold a compiled regular expression, and the
records are the applier's own typed dataclasses.
"""

from __future__ import annotations

from tests.mutants.apply import Edit, Mutant

P = "tests/test_processor.py::"
PROCESSOR = "streamer/processor.py"
CHECKPOINT = "streamer/kafka/checkpoint.py"
OFFSETS = "streamer/kafka/offsets.py"
PENDING = "streamer/kafka/pending.py"
REPLAY = "streamer/commands/replay.py"
EOS_REPLAY = ("tests/integration/test_replay_eos_kafka.py::"
              "test_a_replay_stopped_and_resumed_every_way_writes_each_prediction_once")

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "01-commit-before-acks",
        "predictions marked done when sent, not when the broker acknowledges them",
        (P + "test_unacknowledged_outputs_are_never_committed",
         P + "test_a_failed_delivery_blocks_input_and_the_redo_unblocks_it",
         "tests/integration/test_faults_kafka.py::test_unacknowledged_predictions_are_never_committed"),
        (Edit(PROCESSOR, "Processor._infer_and_produce",
              "    return\n"
              "self.kafka.send(outputs)\n",
              "    return\n"
              "self.kafka.send(outputs)\n"
              "for tp, offsets in outputs.rows.source.by_partition().items():\n"
              "    self._tracker.done(tp, offsets)\n"),),
    ),
    Mutant(
        "02-revoke-without-drain",
        "on revoke, the revoked partitions' work is dropped without the drain and the commit",
        (P + "test_revoke_drains_the_open_batch_and_commits_it_before_returning",
         "tests/integration/test_faults_kafka.py::test_group_grows_and_shrinks_while_busy"),
        (Edit(PROCESSOR, "Processor._on_revoke",
              'self._drain("revoke")\n'
              "self._commit(revoked)\n"
              "self._forget(revoked)\n",
              "self._forget(revoked)\n"),),
    ),
    Mutant(
        "03-eos-offsets-outside-transaction",
        "exactly-once: input offsets committed by the consumer, outside the transaction",
        (P + "test_exactly_once_puts_the_offsets_in_the_transaction_never_through_the_consumer",
         ("tests/integration/test_faults_kafka.py::"
          "test_exactly_once_crash_inside_a_commit_resumes_from_the_last_transaction")),
        (Edit(CHECKPOINT, "Transactional.commit",
              "self._txn.commit([self._position(tp, off) for tp, off in positions.items()])\n",
              "if positions:\n"
              "    self._consumer.commit(offsets=[self._position(tp, off) for tp, off in positions.items()],\n"
              "                          asynchronous=False)\n"
              "self._txn.commit([])\n"),),
    ),
    Mutant(
        "04-replay-resume-from-start",
        "a resumed replay re-resolves its bounds and starts again from --from",
        ("tests/integration/test_replay_kafka.py::test_killed_replay_resumes_with_the_same_bounds",),
        (Edit("streamer/commands/replay.py", "_plan",
              "return saved, True\n",
              "return resolve(consumer, tps, start, end), True\n"),),
    ),
    Mutant(
        "05-max-wait-times-50",
        "the processor's batches wait 50 times max_wait_ms",
        ("tests/integration/test_processor_kafka.py::test_a_trickle_is_flushed_within_max_wait",),
        (Edit(PROCESSOR, "Processor.__init__",
              "MicroBatcher(cfg.batching.max_size, cfg.batching.max_wait_ms, clock,",
              "MicroBatcher(cfg.batching.max_size, cfg.batching.max_wait_ms * 50, clock,"),),
    ),
    Mutant(
        "06-latency-zero",
        "end-to-end latency always recorded as 0",
        ("tests/integration/test_processor_kafka.py::test_20k_events_scored_exactly_and_committed",
         "tests/integration/test_observability_kafka.py::test_every_dashboard_panel_and_alert_returns_data"),
        (Edit("streamer/observe/accounting.py", "Accounting.final",
              "latencies = now_ms - np.concatenate(times)\n",
              "latencies = 0.0 * np.concatenate(times)\n"),),
    ),
    Mutant(
        "07-drop-row-unmarked",
        "the last row of each batch is dropped: no prediction, its offset never done",
        (P + "test_scores_reach_the_output_in_partition_order",
         "tests/integration/test_processor_kafka.py::test_20k_events_scored_exactly_and_committed"),
        (Edit(PROCESSOR, "Processor._predictions",
              "return Predictions(self.cfg.output.topic, values, rows)\n",
              "return Predictions(self.cfg.output.topic, values[:-1], rows[:-1])\n"),),
    ),
    Mutant(
        "08-drop-row-marked-done",
        "the last row of each batch is dropped and its offset marked done",
        (P + "test_scores_reach_the_output_in_partition_order",
         "tests/integration/test_processor_kafka.py::test_20k_events_scored_exactly_and_committed"),
        (Edit(PROCESSOR, "Processor._predictions",
              "return Predictions(self.cfg.output.topic, values, rows)\n",
              "if len(rows):\n"
              "    dropped = rows[-1:].source\n"
              "    self._tracker.done((dropped.topics[0], int(dropped.partitions[0])), dropped.offsets)\n"
              "return Predictions(self.cfg.output.topic, values[:-1], rows[:-1])\n"),),
    ),
    Mutant(
        "09-commit-prefix-plus-one",
        "the committed position is the done prefix + 1 (skips one offset per commit)",
        ("tests/kafka/test_offsets.py",
         "tests/integration/test_processor_kafka.py::test_20k_events_scored_exactly_and_committed"),
        (Edit(OFFSETS, "OffsetTracker.committable",
              "out[tp] = state.position\n",
              "out[tp] = state.position + 1\n"),),
    ),
    Mutant(
        "10-deadline-from-last-row",
        "the batch deadline runs from the last row, not the first",
        ("tests/pipeline/test_batcher.py",),
        (Edit("streamer/pipeline/batcher.py", "MicroBatcher.add",
              "if not self._pieces:\n"
              "    self._first_at = self._clock()\n",
              "self._first_at = self._clock()\n"),),
    ),
    Mutant(
        "11-dead-letter-short",
        "a dead letter loses the last byte of the original value",
        (("tests/integration/test_deadletter_kafka.py::"
          "test_1pct_each_kind_of_bad_row_goes_to_the_dead_letter_topic"),),
        (Edit("streamer/kafka/deadletter.py", "dead_letter",
              "return DeadLetter(topic=dlq_topic, key=key, value=error.raw, headers=headers,\n",
              "return DeadLetter(topic=dlq_topic, key=key, value=error.raw[:-1] if error.raw else error.raw,\n"
              "                  headers=headers,\n"),),
    ),
    Mutant(
        "12-no-bisection",
        "a failing batch is not searched: every row of it is dead-lettered",
        ("tests/pipeline/test_isolate.py",
         ("tests/integration/test_deadletter_kafka.py::"
          "test_1pct_each_kind_of_bad_row_goes_to_the_dead_letter_topic")),
        (Edit("streamer/pipeline/isolate.py", "_Search.run",
              "else:\n"
              "    self.search(whole)\n",
              "else:\n"
              "    for i in range(n):\n"
              "        self.poisoned[i] = whole\n"),),
    ),
    Mutant(
        "13-eos-committed-before-commit",
        "exactly-once: positions marked committed before the commit call, so an aborted commit rewinds "
        "past its own input",
        (P + "test_exactly_once_an_aborted_commit_reads_again_from_the_last_committed_transaction",),
        (Edit(CHECKPOINT, "Transactional.commit",
              "positions = self.tracker.committable()\n"
              "try:\n",
              "positions = self.tracker.committable()\n"
              "self.tracker.mark_committed(positions)\n"
              "try:\n"),),
    ),
    Mutant(
        "14-consume-wait-uncapped",
        "the consume wait is not cut to what is left of the open batch's max_wait_ms",
        (P + "test_an_open_batch_is_flushed_within_max_wait_when_the_consume_timeout_is_longer",),
        (Edit(PROCESSOR, "Processor._consume",
              "if (remaining := self._batcher.remaining_s()) is not None and not self._holds.blocked:\n"
              "    wait = min(wait, remaining)\n",
              ""),),
    ),
    Mutant(
        "15-reload-any-output-width",
        "hot reload accepts a model that answers with another number of score columns",
        ("tests/pipeline/test_serving.py::test_a_model_of_another_output_width_is_refused_by_hot_reload",),
        (Edit("streamer/pipeline/reload.py", "check_candidate",
              "if width and scores is not None and scores.shape[1:] != (width,):\n",
              "if False:\n"),),
    ),
    Mutant(
        "16-renew-fatal-producer-forever",
        "a producer still fatal after MAX_RENEWALS replacements is replaced again, for ever",
        (P + "test_a_producer_that_stays_fatal_is_replaced_five_times_then_the_loop_ends",),
        (Edit(CHECKPOINT, "_Base._renew",
              "if self._fenced_again(broken) or self._renewals > MAX_RENEWALS:\n",
              "if self._fenced_again(broken):\n"),),
    ),
    Mutant(
        "17-quiet-commit-in-flight",
        "a quiet input commits while outputs still wait for their acks",
        (P + "test_exactly_once_a_quiet_input_waits_for_the_acks_before_it_commits",),
        (Edit(CHECKPOINT, "_Base.commit_due",
              "settled = self._quiet.passed(heard=read) and not self.tracker.in_flight() and self._uncommitted()\n",
              "settled = self._quiet.passed(heard=read) and self._uncommitted()\n"),),
    ),
    Mutant(
        "18-unanswered-commit-never-resent",
        "a background commit whose answer never comes is never sent again",
        (("tests/kafka/test_checkpoint.py::"
          "test_an_unanswered_background_commit_is_sent_again_after_its_deadline_not_before"),),
        (Edit(PENDING, "OnItsWay._held",
              "return sent is not None and now - sent[1] < self.deadline_s\n",
              "return sent is not None\n"),),
    ),
    Mutant(
        "19-auto-pipelines-on-search",
        "auto pipelining times batches searched for poison rows (their Python moves scoring to a thread)",
        ("tests/pipeline/test_inference.py::test_auto_does_not_time_batches_searched_for_poison_rows",),
        (Edit("streamer/pipeline/inference.py", "Inference._timed",
              "if done.out is None or done.out.calls != 1 or len(done.batch.rows) * 2 < self._rows:\n",
              "if done.out is None or len(done.batch.rows) * 2 < self._rows:\n"),),
    ),
    Mutant(
        "20-heap-never-thawed",
        "a stopped processor leaves the heap frozen (what it left is never collected)",
        ("tests/test_heap.py::test_a_processor_freezes_the_heap_once_started_and_thaws_it_when_it_stops",),
        (Edit(PROCESSOR, "Processor._close",
              "heap.thaw()  # first: whatever closing raises, the heap is the collector's again\n",
              ""),),
    ),
    Mutant(
        "21-newer-commit-overtakes",
        "a partition's newer position is sent while an older commit of it is on its way",
        ("tests/kafka/test_checkpoint.py::test_a_newer_position_waits_for_the_answer_to_the_one_on_its_way",),
        (Edit(PENDING, "OnItsWay.sendable",
              "if self._held(tp, now):\n",
              "if self._held(tp, now) and self._sent[tp][0] == off:\n"),),
    ),
    Mutant(
        "22-highest-answer-kept",
        "the committed position is the highest answered, not the last (a late older commit is missed)",
        (("tests/kafka/test_checkpoint.py::"
          "test_an_older_position_answered_after_a_newer_one_sends_the_newer_again"),),
        (Edit(OFFSETS, "OffsetTracker.mark_committed",
              "state.committed = pos\n",
              "state.committed = pos if state.committed is None else max(state.committed, pos)\n"),),
    ),
    Mutant(
        "23-grpc-refusal-without-retry-after",
        "a gRPC refusal (UNAVAILABLE) ends without its retry-after trailer",
        ("tests/online/test_grpc.py::test_a_refusal_tells_the_caller_when_to_come_back",),
        (Edit("streamer/online/grpc_service.py", "_abort",
              "await context.abort(_status(refused), str(refused), tuple(refused.headers.items()))\n",
              "await context.abort(_status(refused), str(refused))\n"),),
    ),
    Mutant(
        "24-score-503-without-retry-after",
        "a refused /v1/score answer (503) carries no Retry-After",
        ("tests/online/test_score_route.py::test_a_bad_event_is_422_naming_the_field_and_a_bad_body_400",),
        (Edit("streamer/online/events.py", "score_route",
              "response = json_error(exc.status, str(exc), exc.headers)\n",
              "response = json_error(exc.status, str(exc))\n"),),
    ),
    Mutant(
        "25-infer-503-without-retry-after",
        "a refused infer request (503) carries no Retry-After",
        ("tests/online/test_http_tritonclient.py::test_a_503_tells_the_caller_when_to_come_back",),
        (Edit("streamer/online/http.py", "HttpTransport.answer",
              "{**JSON, **exc.headers}",
              "dict(JSON)"),),
    ),
    Mutant(
        "26-registry-5xx-as-404",
        "a Schema Registry's 5xx is taken for its 404 (the schema missing: rows dead-lettered)",
        ("tests/formats/test_formats.py::test_a_registry_5xx_is_never_a_missing_schema_however_long_it_lasts",),
        (Edit("streamer/formats/confluent.py", "_not_found",
              "exc.http_status_code == 404",
              "exc.http_status_code in (404, 500, 502, 503)"),),
    ),
    Mutant(
        "27-replay-at-least-once-by-default",
        "a topic replay writes without transactions unless asked: a resumed run writes again what the stopped one wrote",
        (EOS_REPLAY,
         ("tests/commands/test_replay.py::"
          "test_replay_writes_exactly_once_unless_asked_with_its_run_group_as_transactional_id")),
        (Edit(REPLAY, "run_replay",
              'guarantee="exactly_once" if exactly_once else "at_least_once"',
              'guarantee="at_least_once"'),),
    ),
    Mutant(
        "28-transaction-offsets-without-metadata",
        "exactly-once: the offsets sent in a transaction lose their metadata (a replay's bounds): a resumed "
        "replay plans again from --from",
        (EOS_REPLAY,),
        (Edit(CHECKPOINT, "Transactional.commit",
              "self._txn.commit([self._position(tp, off) for tp, off in positions.items()])\n",
              "self._txn.commit([KafkaTopicPartition(tp[0], tp[1], off) for tp, off in positions.items()])\n"),),
    ),
    Mutant(
        "29-replay-stop-ignored",
        "a topic replay goes on to its end after SIGTERM or Ctrl+C",
        (EOS_REPLAY,),
        (Edit(REPLAY, "run_replay.until", "return asked.is_set()\n", "return False\n"),),
    ),
    Mutant(
        "30-redrive-offset-alone",
        "dlq redrive --offset P:O matches a letter's offset in any partition of the dead-letter topic",
        ("tests/integration/test_deadletter_kafka.py::test_redrive_by_offset_sends_only_the_named_partitions_letter",),
        (Edit("streamer/commands/dlq.py", "redrive",
              "if (partition, offset) not in offsets and eid not in event_ids:\n",
              "if offset not in {o for _, o in offsets} and eid not in event_ids:\n"),),
    ),
)
