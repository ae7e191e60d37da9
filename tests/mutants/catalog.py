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
APPENDS = "tests/lake/test_appends.py::"
WORKERS = "tests/jobs/test_workers_kafka.py::"
JOBS_HTTP = "streamer/online/jobs_http.py"
JOBS_HTTP_TEST = "tests/online/test_jobs_http_kafka.py::"
STORE_ANSWERS = "tests/online/test_store_answers_redis.py::"
DEGRADE = "tests/online/test_degrade_redis.py::"
KV_SINK = "streamer/stores/sink.py"
KV_TESTS = "tests/stores/test_sink.py::"
KV_KILLED = "tests/stores/test_precompute.py::test_a_precompute_killed_mid_way_resumes_and_readers_only_ever_see_a_complete_run"
MODELS_BATCH = "tests/commands/test_models_batch.py::"
EOS_REPLAY = ("tests/integration/test_replay_eos_kafka.py::"
              "test_a_replay_stopped_and_resumed_every_way_writes_each_prediction_once")

MANY_MODELS = "tests/online/test_many_models.py::"
LANES = "streamer/online/lanes.py"

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
        (Edit("streamer/pipeline/lanes.py", "Lane.of",
              "MicroBatcher(b.max_size, b.max_wait_ms, clock,",
              "MicroBatcher(b.max_size, b.max_wait_ms * 50, clock,"),),
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
              "return Predictions(lane.topic, values, rows)\n",
              "return Predictions(lane.topic, values[:-1], rows[:-1])\n"),),
    ),
    Mutant(
        "08-drop-row-marked-done",
        "the last row of each batch is dropped and its offset marked done",
        (P + "test_scores_reach_the_output_in_partition_order",
         "tests/integration/test_processor_kafka.py::test_20k_events_scored_exactly_and_committed"),
        (Edit(PROCESSOR, "Processor._predictions",
              "return Predictions(lane.topic, values, rows)\n",
              "if len(rows):\n"
              "    dropped = rows[-1:].source\n"
              "    self._tracker.done((dropped.topics[0], int(dropped.partitions[0])), dropped.offsets)\n"
              "return Predictions(lane.topic, values[:-1], rows[:-1])\n"),),
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
              "if (remaining := self._lanes.remaining_s()) is not None and not self._holds.blocked:\n"
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
        (Edit("streamer/online/events.py", "ScoreRoute.score",
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
        "27-parquet-resume-keeps-crash-files",
        "a resumed Parquet run keeps the files of a crashed commit that no log entry names",
        ("tests/lake/test_lake_commit_log.py::"
         "test_a_resumed_parquet_run_that_writes_fewer_files_than_its_crashed_commit_leaves_none_unnamed",),
        (Edit("streamer/lake/parquet.py", "ParquetSink.resume",
              "self._delete([f for f in self._run_files() if f not in committed], None)  # a crash's files\n",
              ""),),
    ),
    Mutant(
        "28-success-by-the-first-shard",
        "_SUCCESS written by the first shard to finish, before the other shards' commits are in",
        ("tests/lake/test_lake_commit_log.py::test_success_appears_only_once_every_shards_last_commit_is_in",),
        (Edit("streamer/lake/parquet.py", "ParquetSink.finish",
              "    return  # another shard is still writing: it writes _SUCCESS when it ends\n",
              "    continue\n"),),
    ),
    Mutant(
        "29-success-before-a-shard-starts",
        "_SUCCESS written by a shard that finishes before another shard of its run has started",
        ("tests/lake/test_lake_commit_log.py::test_success_appears_only_once_every_shards_last_commit_is_in",),
        (Edit("streamer/lake/parquet.py", "ParquetSink.finish",
              "    return  # a shard that has not started yet: the last to finish writes _SUCCESS\n",
              "    pass\n"),),
    ),
    Mutant(
        "30-commit-range-from-the-start",
        "each commit records its range from the run's start, not from the previous commit",
        ("tests/lake/test_lake_commit_log.py::"
         "test_the_ranges_of_a_runs_commits_cover_the_source_once_each_from_where_the_last_ended",),
        (Edit("streamer/lake/run.py", "LakeRun._commit",
              "since.update({pos: to for pos, (_, to) in covered.items()})\n",
              "pass\n"),),
    ),
    Mutant(
        "31-labels-joined-on-event-ids",
        "--labels-from on entity_id joins each event's id instead of its entity's",
        ("tests/evaluate/test_evaluate_kafka.py::"
         "test_labels_from_joined_on_entity_id_label_each_entitys_events_up_to_its_outcome",),
        (Edit("streamer/evaluate/pair.py", "PairScorer._observe",
              'ids = list(rows.event_ids if self.keep_ids == "event_id" else rows.entity_ids)\n',
              "ids = list(rows.event_ids)\n"),),
    ),
    Mutant(
        "32-min-events-off-by-one",
        "exactly --min-events labeled events are refused as too few",
        ("tests/evaluate/test_metrics.py::test_exactly_min_events_labeled_events_pass_the_minimum_and_one_fewer_refuses",),
        (Edit("streamer/evaluate/outcomes.py", "_unmeasurable", "if labeled < min_events:\n",
              "if labeled <= min_events:\n"),),
    ),
    Mutant(
        "33-score-reads-rows-before-the-schema",
        "streamer score finds a column it cannot read row by row (every row a reject), not at start",
        ("tests/lake/test_table_check.py::test_a_column_the_inputs_cannot_read_is_refused_before_anything_is_written",),
        (Edit("streamer/wiring/lake.py", "score_job",
              "source.check(contract)  # before the sink is opened: a refused source writes nothing\n", ""),),
    ),
    Mutant(
        "34-to-table-namespace-not-made",
        "--to-table NS.NAME in a namespace the embedded catalog lacks fails instead of creating it",
        ("tests/lake/test_table_check.py::test_to_table_in_a_namespace_the_embedded_catalog_lacks_creates_it",),
        (Edit("streamer/lake/iceberg.py", "ensure_table", "_ensure_namespace(catalog, ident)\n", ""),),
    ),
    Mutant(
        "35-check-silent-on-nullable-fields",
        "streamer check passes a nullable Avro field mapped without fill silently (each null a dead letter)",
        ("tests/commands/test_check.py::test_a_nullable_field_mapped_without_fill_is_a_warning_that_names_its_dead_letters",),
        (Edit("streamer/commands/check.py", "_model",
              "*(Finding(under(k, key), True, f\"{which}{words}\", warn=True)\n"
              "  for k, words in runner.contract.nullable_fields(schema_in))]\n",
              "]\n"),),
    ),
    Mutant(
        "36-labels-columns-types-unchecked",
        "--labels-from takes a key or outcome column of any type (a key of doubles joins nothing)",
        ("tests/evaluate/test_labels.py::test_labels_columns_are_checked_on_the_schema_before_anything_is_scored",),
        (Edit("streamer/evaluate/labels.py", "check_columns",
              "if not fits(kind.value_type if pa.types.is_dictionary(kind) else kind):\n",
              "if False:\n"),),
    ),
    Mutant(
        "37-grpc-port-reused",
        "the gRPC listener binds with port reuse: a second server shares a taken port and steals calls",
        ("tests/online/test_ports.py::test_a_port_taken_after_the_check_ends_the_start_in_one_line",),
        (Edit("streamer/online/server.py", "OnlineServer._serve", '("grpc.so_reuseport", 0)])', "])"),),
    ),
    Mutant(
        "38-online-ports-not-checked",
        "serve loads the model before it finds its port taken: log lines, then the error",
        ("tests/online/test_ports.py::test_a_port_held_by_a_plain_socket_exits_2_in_one_line",),
        (Edit("streamer/wiring/online.py", "online_server",
              "check_ports(cfg.online)  # a taken port is refused before the model loads\n", ""),),
    ),
    Mutant(
        "39-grpc-server-left-to-del",
        "a start-up error leaves the gRPC server to its __del__: 'Event loop is closed' after the error",
        ("tests/online/test_ports.py::test_a_port_taken_after_the_check_ends_the_start_in_one_line",),
        (Edit("streamer/online/server.py", "OnlineServer._serve",
              "if rpc is not None:\n    await rpc.stop(None)\n", ""),),
    ),
    Mutant(
        "40-flag-called-config-key",
        "a bad flag reads config key '--workers' (a user looks for it in the config file)",
        ("tests/test_errors.py::test_a_bad_flag_is_called_a_flag_on_the_command_line",),
        (Edit("streamer/errors.py", "named", 'if key.startswith("-"):\n    return f"flag {key}"\n', ""),),
    ),
    Mutant(
        "41-unscored-commands-need-the-model",
        "topics create, produce and dlq read the whole config: a missing model file refuses them",
        ("tests/commands/test_unscored_kafka.py::test_the_commands_that_do_not_score_start_without_the_model_file",),
        (Edit("streamer/config_file.py", "load_unscored",
              "cfg = _places(load_part(path, UnscoredConfig, env), Path(path).parent)\n",
              "cfg = load_config(path, env)  # type: ignore[assignment]\n"),),
    ),
    Mutant(
        "42-redrive-not-found-exits-0",
        "dlq redrive of an event id or offset that no letter has exits 0, as if it were done",
        ("tests/commands/test_unscored_kafka.py::test_a_dead_letter_asked_for_that_is_not_there_exits_2",),
        (Edit("streamer/cli_batch.py", "dlq", "return EXIT_CONFIG\n", "return 0\n"),),
    ),
    Mutant(
        "43-serve-without-online-extra",
        "serve without the online extra ends in a ModuleNotFoundError traceback (exit 1)",
        ("tests/test_extras.py::test_a_command_without_its_extra_exits_2_in_one_line_with_the_clone_install_line",),
        (Edit("streamer/cli.py", "main", 'need("online", "serve")\n', ""),),
    ),
    Mutant(
        "44-lake-without-lake-extra",
        "replay --to-table and score without the lake extra end in a ModuleNotFoundError traceback",
        ("tests/test_extras.py::test_a_command_without_its_extra_exits_2_in_one_line_with_the_clone_install_line",),
        (Edit("streamer/cli_batch.py", "lake", 'need("lake", ', 'None and need("lake", '),),
    ),
    Mutant(
        "45-evaluate-without-eval-extra",
        "evaluate without the eval extra ends in a ModuleNotFoundError traceback",
        ("tests/test_extras.py::test_a_command_without_its_extra_exits_2_in_one_line_with_the_clone_install_line",),
        (Edit("streamer/cli_batch.py", "evaluate", 'need("eval", "evaluate")\n', ""),),
    ),
    Mutant(
        "46-optimize-without-optimize-extra",
        "model optimize without the optimize extra ends in a ModuleNotFoundError traceback",
        ("tests/test_extras.py::test_a_command_without_its_extra_exits_2_in_one_line_with_the_clone_install_line",),
        (Edit("streamer/cli.py", "_optimize", 'need("optimize", "model optimize")\n', ""),),
    ),
    Mutant(
        "47-wheel-install-line-in-a-clone",
        "a clone is told pip install 'streamer[lake]', which fetches another package from the index",
        ("tests/test_extras.py::test_a_command_without_its_extra_exits_2_in_one_line_with_the_clone_install_line",
         "tests/test_extras.py::test_the_install_line_is_the_clones_in_a_checkout_and_the_wheels_elsewhere"),
        (Edit("streamer/extras.py", "from_source", "return project.is_file() and ", "return False and "),),
    ),
    Mutant(
        "48-tail-missing-topic-exits-3",
        "tail --topic of a topic that is not there exits 3 (restart it) instead of 2 (fix the name)",
        ("tests/commands/test_unscored_kafka.py::test_tail_of_a_topic_that_is_not_there_exits_2_naming_the_flag",),
        (Edit("streamer/commands/produce.py", "tail", "except NoSuchTopic as exc:", "except ValueError as exc:"),),
    ),
    Mutant(
        "49-model-file-called-config-key",
        "model inspect PATH of a file that does not load names config key 'model.path', not the file",
        ("tests/test_errors.py::test_a_model_file_that_does_not_load_is_called_a_file",),
        (Edit("streamer/commands/model.py", "signature_of", "raise FileError(path, ", 'raise ConfigError("model.path", '),),
    ),
    Mutant(
        "50-labels-table-without-lake-extra",
        "evaluate --labels-from a table without the lake extra ends in a ModuleNotFoundError traceback",
        ("tests/test_extras.py::test_evaluate_asks_for_the_lake_extra_only_for_a_table",),
        (Edit("streamer/cli_batch.py", "evaluate", "if args.labels_from and not _a_file(args.labels_from):",
              "if False:"),),
    ),
    Mutant(
        "51-replay-at-least-once-by-default",
        "a topic replay writes without transactions unless asked: a resumed run writes again what the stopped one wrote",
        (EOS_REPLAY,
         ("tests/commands/test_replay.py::"
          "test_replay_writes_exactly_once_unless_asked_with_its_run_group_as_transactional_id")),
        (Edit(REPLAY, "run_replay",
              'guarantee="exactly_once" if exactly_once else "at_least_once"',
              'guarantee="at_least_once"'),),
    ),
    Mutant(
        "52-transaction-offsets-without-metadata",
        "exactly-once: the offsets sent in a transaction lose their metadata (a replay's bounds): a resumed "
        "replay plans again from --from",
        (EOS_REPLAY,),
        (Edit(CHECKPOINT, "Transactional.commit",
              "self._txn.commit([self._position(tp, off) for tp, off in positions.items()])\n",
              "self._txn.commit([KafkaTopicPartition(tp[0], tp[1], off) for tp, off in positions.items()])\n"),),
    ),
    Mutant(
        "53-replay-stop-ignored",
        "a topic replay goes on to its end after SIGTERM or Ctrl+C",
        (EOS_REPLAY,),
        (Edit(REPLAY, "run_replay.until", "return asked.is_set()\n", "return False\n"),),
    ),
    Mutant(
        "54-redrive-offset-alone",
        "dlq redrive --offset P:O matches a letter's offset in any partition of the dead-letter topic",
        ("tests/integration/test_deadletter_kafka.py::test_redrive_by_offset_sends_only_the_named_partitions_letter",),
        (Edit("streamer/commands/dlq.py", "redrive",
              "if (partition, offset) not in offsets and eid not in event_ids:\n",
              "if offset not in {o for _, o in offsets} and eid not in event_ids:\n"),),
    ),
    Mutant(
        "55-lake-stop-drops-open-batch",
        "a lake run stopped by a signal drops its open batch and commits nothing of what it read",
        ("tests/lake/test_run_stop.py::test_a_stopped_score_commits_what_it_read_and_the_same_run_id_finishes_it",),
        (Edit("streamer/lake/run.py", "LakeRun.run",
              "if stop is not None and stop.is_set():\n"
              "    break\n",
              "if stop is not None and stop.is_set():\n"
              "    self._batcher.flush(\"shutdown\")\n"
              "    covered = {}\n"
              "    break\n"),),
    ),
    Mutant(
        "56-lake-stop-after-the-end-is-a-stop",
        "a stop that comes after a lake run's last row is reported stopped (exit 6) instead of finished",
        ("tests/lake/test_run_stop.py::test_a_stop_that_comes_after_the_last_row_is_a_finish",),
        (Edit("streamer/lake/run.py", "LakeRun.run",
              "self.counts.stopped = stop is not None and stop.is_set() and not Resume(resume.bounds, since, 0).done",
              "self.counts.stopped = stop is not None and stop.is_set()"),),
    ),
    Mutant(
        "57-workers-stop-hides-a-failure",
        "a --workers run with one worker stopped and another failed exits 6 (resumable) instead of the failure",
        ("tests/lake/test_run_stop.py::test_a_workers_run_exits_with_a_failure_first_then_a_stop",),
        (Edit("streamer/commands/lake.py", "worst_exit",
              "return max(codes, key=lambda c: (c != 0, c != EXIT_STOPPED, abs(c)))",
              "return max(codes, key=lambda c: (c != 0, c == EXIT_STOPPED, abs(c)))"),),
    ),
    Mutant(
        "58-stopped-evaluation-passes-the-gate",
        "an evaluation stopped by a signal judges the gate on the part it read, and can pass it (exit 0)",
        ("tests/commands/test_stops_kafka.py::"
         "test_a_signal_stops_the_command_cleanly_and_the_same_run_resumes_it[evaluate-SIGTERM]",),
        (Edit("streamer/commands/evaluate.py", "evaluate",
              "if counts.stopped:\n",
              "if False:\n"),
         Edit("streamer/commands/evaluate.py", "evaluate",
              "EXIT_STOPPED if counts.stopped else EXIT_GATE",
              "EXIT_GATE"),),
    ),
    Mutant(
        "59-stopped-redrive-commits-nothing",
        "a redrive stopped by a signal sends letters without committing its progress: the next run sends them again",
        ("tests/commands/test_stops_kafka.py::"
         "test_a_signal_stops_the_command_cleanly_and_the_same_run_resumes_it[dlq-redrive-SIGTERM]",),
        (Edit("streamer/commands/dlq.py", "redrive",
              "stopped = True  # this letter is neither sent nor passed: the next run starts at it\n",
              "stopped = True\n"
              "positions.clear()\n"),),
    ),
    Mutant(
        "60-stopped-produce-miscounts",
        "a produce stopped by a signal sends one event more than it counts: --skip N sends it again",
        ("tests/commands/test_stops_kafka.py::"
         "test_a_signal_stops_the_command_cleanly_and_the_same_run_resumes_it[produce-SIGTERM]",),
        (Edit("streamer/commands/produce.py", "produce_file",
              "if stop is not None and stop.is_set():\n"
              "    break\n"
              "key, value = message(line, row)\n",
              "key, value = message(line, row)\n"
              "if stop is not None and stop.is_set():\n"
              "    produce(producer, lambda: producer.poll(0.5), topic, value, key, on_delivery=report)\n"
              "    break\n"),),
    ),
    Mutant(
        "70-snapshot-source-reads-every-append",
        "a job of one snapshot's appended rows scores every append up to it: earlier snapshots' rows again",
        (APPENDS + "test_three_appends_scored_one_snapshot_each_give_exactly_the_appended_rows",
         APPENDS + "test_a_snapshot_source_stopped_and_resumed_scores_each_row_once"),
        (Edit("streamer/lake/appends.py", "AppendedRows.__init__",
              "from_snapshot_id_exclusive=snap.parent_snapshot_id,", "from_snapshot_id_exclusive=None,"),),
    ),
    Mutant(
        "71-non-append-snapshot-scored",
        "a snapshot that overwrote or deleted rows is taken as a job's source (its rows silently not an increment)",
        (APPENDS + "test_an_overwrite_or_a_delete_is_reported_and_refused",),
        (Edit("streamer/lake/appends.py", "AppendedRows.__init__", "if operation != APPEND:\n", "if False:\n"),),
    ),
    Mutant(
        "72-trigger-takes-non-appends",
        "a table trigger makes a job of an overwrite or a delete instead of reporting it",
        (APPENDS + "test_an_overwrite_or_a_delete_is_reported_and_refused",),
        (Edit("streamer/jobs/trigger.py", "table_increments", "if snap.operation == APPEND:\n", "if True:\n"),),
    ),
    Mutant(
        "73-resumed-snapshot-renumbered",
        "a snapshot's run resumed past its first file numbers the next file's rows from 0: rows twice, rows missing",
        (APPENDS + "test_a_snapshot_source_stopped_and_resumed_scores_each_row_once",),
        (Edit("streamer/lake/appends.py", "AppendedRows.batches",
              "first += int(tasks.pop(0).file.record_count)\n", "tasks.pop(0)\n"),),
    ),
    Mutant(
        "74-source-snapshot-not-recorded",
        "the target's snapshots do not say which source snapshot they scored: a trigger scores it again",
        (APPENDS + "test_three_appends_scored_one_snapshot_each_give_exactly_the_appended_rows",),
        (Edit("streamer/lake/iceberg.py", "IcebergSink.commit", "props = {**self.summary, RUN:", "props = {RUN:"),),
    ),
    Mutant(
        "75-half-written-file-taken",
        "a folder trigger takes a Parquet file with both magic bytes but no footer that parses (still being written)",
        ("tests/jobs/test_trigger.py::test_a_half_written_file_waits_until_it_is_whole_or_its_folder_has_success",),
        (Edit("streamer/jobs/trigger.py", "whole", "pq.ParquetFile(f)  # the footer: its length and its metadata\n",
              "pass\n"),),
    ),
    Mutant(
        "76-unfinished-run-counts-as-scored",
        "a snapshot whose run stopped midway counts as scored: a table trigger never submits the rest of it",
        (APPENDS + "test_a_snapshot_counts_as_scored_once_its_run_covered_all_its_rows",),
        (Edit("streamer/lake/ancestry.py", "scored_sources",
              "if Resume(ranges_of(json.loads(saved)[\"bounds\"]), reached, 0).done:\n", "if True:\n"),),
    ),
    Mutant(
        "80-idle-worker-keeps-the-jobs-eta",
        "a worker gone idle keeps its last job's rate, eta and window end: an ended job looks late and alerts",
        ("tests/observe/test_jobs.py::test_idle_clears_the_running_jobs_gauges_so_an_ended_job_never_looks_late",
         "tests/deploy/test_dashboard_jobs_online.py"),
        (Edit("streamer/observe/jobs.py", "JobMetrics.idle",
              "self._set_or_clear(gauge, None)\n",
              "pass\n"),),
    ),
    Mutant(
        "81-job-states-keep-a-stale-count",
        "a state no job is in any longer keeps its last count (jobs failed yesterday still read as failed)",
        ("tests/observe/test_jobs.py::test_states_follow_the_status_topic_and_a_state_left_empty_reads_zero",),
        (Edit("streamer/observe/jobs.py", "JobMetrics.states",
              "for state in self._states - set(counts):\n"
              "    self.jobs.labels(self.group, state).set(0)\n",
              ""),),
    ),
    Mutant(
        "82-unknown-eta-keeps-the-last-one",
        "a job with no total keeps the previous job's eta: a job on time can look late",
        ("tests/observe/test_jobs.py::test_an_unknown_total_or_no_window_leaves_no_eta_or_deadline_series",),
        (Edit("streamer/observe/jobs.py", "JobMetrics.progress",
              "self._set_or_clear(self.eta, eta_s)\n",
              "if eta_s is not None:\n"
              "    self.eta.labels(self.group).set(eta_s)\n"),),
    ),
    Mutant(
        "83-job-tail-rows-uncounted",
        "the rows a job scored after its worker's last progress report are never counted in streamer_job_rows_total",
        ("tests/jobs/test_worker_metrics.py::test_a_job_ended_between_two_reports_has_all_its_rows_counted",),
        (Edit("streamer/jobs/worker.py", "Worker._execute",
              "self._progress(run)  # the rows since the last report: counted once, before the end is written\n",
              ""),),
    ),
    Mutant(
        "84-job-rows-read-after-the-status-write",
        "the rows a job scored while its status was written are counted twice (read again after the write)",
        ("tests/jobs/test_worker_metrics.py::test_rows_scored_while_the_status_is_written_are_counted_once",),
        (Edit("streamer/jobs/worker.py", "Worker._progress",
              "self.meters.progress(max(rows - done_before, 0), rate, eta, deadline)",
              "self.meters.progress(max(run.rows - done_before, 0), rate, eta, deadline)"),),
    ),
    Mutant(
        "85-lost-job-keeps-its-eta",
        "a worker whose job went to another worker keeps that job's eta and window: it alerts on a job it does not run",
        ("tests/jobs/test_worker_metrics.py::test_a_job_gone_to_another_worker_leaves_no_running_job_on_this_one",),
        (Edit("streamer/jobs/worker.py", "Worker._execute",
              "self.meters.idle()  # however it ended: final, stopped with the worker, or gone to another worker\n",
              ""),
         Edit("streamer/jobs/worker.py", "Worker._end",
              "self.meters.finished(str(final.state), (now - (status.started_at_ms or now)) / 1000)\n",
              "self.meters.finished(str(final.state), (now - (status.started_at_ms or now)) / 1000)\n"
              "self.meters.idle()\n"),),
    ),
    Mutant(
        "86-busy-worker-counts-no-states",
        "a worker counts the jobs per state only while idle: its own running job never shows as running",
        ("tests/jobs/test_worker_metrics.py::test_a_busy_worker_counts_its_own_job_running_while_it_runs",
         "tests/integration/test_jobs_metrics_kafka.py"),
        (Edit("streamer/jobs/worker.py", "Worker._execute",
              "self._count()  # the board's states, this job's running among them, while it runs\n",
              ""),),
    ),
    Mutant(
        "90-job-committed-when-taken",
        "a worker commits a job's message when it starts it: a worker killed mid-job loses the job",
        (WORKERS + "test_a_worker_killed_mid_job_leaves_it_to_another_which_resumes_it_with_exactly_its_rows",),
        (Edit("streamer/jobs/worker.py", "Worker._execute", "run = self._run = _Run(where, status)\n",
              "run = self._run = _Run(where, status); self._commit(consumer, where)\n"),),
    ),
    Mutant(
        "91-slot-queued-twice",
        "a schedule's slot submitted twice (a retried CronJob pod) is queued twice",
        (WORKERS + "test_a_slot_submitted_twice_is_one_job_a_past_window_expires_and_a_cancel_stops_at_the_next_commit",),
        (Edit("streamer/jobs/queue.py", "submit",
              "if previous is not None and previous.state not in (State.FAILED, State.CANCELLED):\n",
              "if False:\n"),),
    ),
    Mutant(
        "92-cancel-ignored",
        "a running job's cancel is never seen by its worker: it runs to the end",
        (WORKERS + "test_a_slot_submitted_twice_is_one_job_a_past_window_expires_and_a_cancel_stops_at_the_next_commit",),
        (Edit("streamer/jobs/worker.py", "Worker._watch",
              "elif asked is not None:\n", "elif False:\n"),),
    ),
    Mutant(
        "93-window-ignored",
        "a job taken after its window ended is run, not expired",
        (WORKERS + "test_a_slot_submitted_twice_is_one_job_a_past_window_expires_and_a_cancel_stops_at_the_next_commit",),
        (Edit("streamer/jobs/worker.py", "Worker._decide",
              "if status.deadline_ms is not None and now >= status.deadline_ms:\n", "if False:\n"),),
    ),
    Mutant(
        "94-resumed-counts-restart",
        "a resumed run forgets what its earlier commits hold: a job resumed on another worker reports only its last part",
        (WORKERS + "test_a_worker_killed_mid_job_leaves_it_to_another_which_resumes_it_with_exactly_its_rows",),
        (Edit("streamer/lake/iceberg.py", "IcebergSink.resume", "self.committed_rows = _written(head)\n",
              "self.committed_rows = (0, 0)\n"),),
    ),
    Mutant(
        "95-unknown-spec-field-taken",
        "a spec field that is not a job's is taken silently (a typo such as 'withn: 1h' means no window)",
        ("tests/jobs/test_spec.py::test_a_bad_field_is_refused_naming_it",),
        (Edit("streamer/jobs/spec.py", "parse_spec", "unknown = sorted(set(map(str, raw)) - _FIELDS)\n",
              "unknown: list[str] = []\n"),),
    ),
    Mutant(
        "100-jobs-api-without-its-token",
        "the HTTP jobs API takes requests without the bearer token: anyone can queue jobs and read results",
        (JOBS_HTTP_TEST + "test_without_the_token_401_and_nothing_is_queued",),
        (Edit(JOBS_HTTP, "JobsApi._guarded.guarded",
              "if not (scheme.lower() == \"bearer\" and hmac.compare_digest(given.strip().encode(), self._token)):\n",
              "if not (scheme.lower() == \"bearer\" or hmac.compare_digest(given.strip().encode(), self._token)):\n"),),
    ),
    Mutant(
        "101-jobs-upload-without-a-limit",
        "a file submitted over HTTP in chunks is stored whatever its size (jobs.max_upload_bytes ignored)",
        (JOBS_HTTP_TEST + "test_a_file_past_the_limit_is_413_and_nothing_is_kept",),
        (Edit("streamer/online/jobs_files.py", "Upload._limited",
              "if self.size > self.limit:\n",
              "if self.size > self.limit * 1000:\n"),),
    ),
    Mutant(
        "102-jobs-file-queued-unchecked",
        "a file whose rows lack a column the model needs is queued (every row a reject) instead of refused with 422",
        (JOBS_HTTP_TEST + "test_422_names_the_field_and_nothing_is_queued",),
        (Edit(JOBS_HTTP, "JobsApi._file",
              "await self._run(self._check, upload.location)\n",
              "pass\n"),),
    ),
    Mutant(
        "103-jobs-results-before-completion",
        "a job's results are served before it completed: a client reads a part of them, or none, as if whole",
        (JOBS_HTTP_TEST + "test_a_job_not_due_yet_has_no_results_409_and_is_cancelled",),
        (Edit(JOBS_HTTP, "JobsApi.rows",
              "if status.state != State.COMPLETED:\n",
              "if status.state == State.FAILED:\n"),),
    ),
    Mutant(
        "104-completed-job-without-its-total",
        "a job that ends before its first progress write completes with no rows in all: jobs status says 'rows 7 of ?'",
        ("tests/jobs/test_completed_status.py::test_a_job_done_before_its_first_progress_write_shows_its_rows_of_all",),
        (Edit("streamer/jobs/states.py", "JobStatus.finished", "**_counts(done), rows_total=done.rows,",
              "**_counts(done),"),),
    ),
    Mutant(
        "96-lost-job-message-skipped",
        "a worker whose run of a job is refused as stale moves past the job's message: nobody runs the job again",
        ("tests/jobs/test_worker_metrics.py::"
         "test_a_run_refused_as_stale_on_a_partition_still_held_reads_its_job_again_and_writes_nothing",),
        (Edit("streamer/jobs/worker.py", "Worker._end", "consumer.seek(TopicPartition(self.cfg.jobs.topic, *run.message))\n",
              "pass\n"),),
    ),
    Mutant(
        "97-finished-job-reports-nothing",
        "a job whose run had finished before its worker died is completed with 0 rows and 0 predictions",
        ("tests/jobs/test_runner.py::test_a_job_run_again_after_its_last_commit_reports_what_its_commits_hold",),
        (Edit("streamer/cli_jobs.py", "JobRunner.run", "predictions, rejects, rows = done.committed\n",
              "predictions, rejects, rows = 0, 0, 0\n"),),
    ),
    Mutant(
        "98-cancel-over-a-completed-job",
        "a cancel built from a stale copy lands over the job's completed status and stays: the job reads cancelling for good",
        ("tests/jobs/test_worker_decisions.py::test_a_cancel_that_lands_over_a_job_just_completed_puts_the_completed_status_back",),
        (Edit("streamer/jobs/queue.py", "cancel", "return board.write(before)", "return now"),),
    ),
    Mutant(
        "99-job-not-due-holds-its-partition",
        "a job waiting for its not_before holds its partition: the jobs queued behind it wait as long",
        (WORKERS + "test_a_slot_submitted_twice_is_one_job_a_past_window_expires_and_a_cancel_stops_at_the_next_commit",),
        (Edit("streamer/jobs/worker.py", "Worker._decide", 'return "park", status', 'return "hold", status'),),
    ),
    Mutant(
        "106-abandoned-run-commits",
        "a run whose job went to another worker commits what it read: two writers of one shard",
        ("tests/lake/test_run_stop.py::test_an_abandoned_run_ends_without_another_commit_and_the_same_run_id_reads_the_rest",),
        (Edit("streamer/lake/run.py", "LakeRun.run",
              "if abandon is not None and abandon.is_set():  # what was read after the last commit is never visible\n",
              "if False:\n"),),
    ),
    Mutant(
        "107-resumed-rate-counts-earlier-rows",
        "a resumed job's rate counts the rows earlier runs scored: its ETA is near zero and the late-job alert stays quiet",
        ("tests/jobs/test_worker_metrics.py::test_a_resumed_job_s_rate_counts_the_rows_of_this_run_alone",),
        (Edit("streamer/jobs/worker.py", "Worker._progress", "(rows - base[0])", "rows"),),
    ),
    Mutant(
        "108-store-client-retries",
        "the store's client retries a timed-out command with back-off: a stalled Redis holds an answer for seconds, not kv.timeout_ms",
        ("tests/stores/test_client.py::test_a_stalled_server_is_an_error_within_the_timeout_and_the_error_hides_the_password",
         "tests/stores/test_reads.py::test_a_stalled_store_is_a_store_error_within_the_timeout"),
        (Edit("streamer/stores/client.py", "_options", ', "retry": retry}', "}"),),
    ),
    Mutant(
        "160-feast-status-ignored",
        "a Feast feature whose status is not PRESENT (OUTSIDE_MAX_AGE, NOT_FOUND) is read as a value: a stale feature scores",
        ("tests/stores/test_feast.py::test_a_feature_of_any_status_but_present_is_absent_even_with_a_value",),
        (Edit("streamer/stores/feast.py", "read_answer", 'if status == "PRESENT" and value is not None:',
              "if value is not None:"),),
    ),
    Mutant(
        "161-feature-kinds-not-written",
        "features load writes no kinds hash: a reader decodes a string of digits (\"07\") as a number",
        ("tests/stores/test_loader.py::"
         "test_a_folder_loaded_reads_back_as_its_rows_strings_kept_strings_and_skipped_rows_named",),
        (Edit("streamer/stores/loader.py", "FeatureLoader.write", "pipe.hset(self.prefix, mapping=dict(new))",
              "pass"),),
    ),
    Mutant(
        "130-auto-ignores-max-age",
        "mode auto answers a precomputed prediction however old: online.cache.max_age_s is never read",
        (STORE_ANSWERS + "test_cached_auto_and_fresh_say_their_source",),
        (Edit("streamer/online/events.py", "ScoreRoute._cached",
              'if mode == "auto" and found.age_s(int(time.time() * 1000)) > self.cfg.online.cache.max_age_s:',
              "if False:"),),
    ),
    Mutant(
        "131-degraded-answer-without-the-flag",
        "a precomputed prediction standing in for a fresh score answers degraded: false (the reason alone set)",
        (DEGRADE + "test_an_open_breaker_answers_the_precomputed_prediction_flagged_breaker",
         DEGRADE + "test_a_feature_fetch_past_its_timeout_answers_degraded_features_within_the_deadline"),
        (Edit("streamer/online/cache.py", "Cache.answer",
              'fields["degraded"], fields["degraded_reason"] = True, degraded',
              'fields["degraded_reason"] = degraded'),),
    ),
    Mutant(
        "132-feature-fetch-without-timeout",
        "the feature fetch waits for the source however long it takes: online.features.timeout_ms is never applied",
        (DEGRADE + "test_a_feature_fetch_past_its_timeout_answers_degraded_features_within_the_deadline",
         "tests/online/test_entity.py::test_a_fetch_past_its_timeout_is_a_store_error_naming_the_timeout"),
        (Edit("streamer/online/entity.py", "EntityFeatures.complete",
              "fetched = await self.guard.within(lambda: self.source.fetch(entity_id), budget,",
              "fetched = await self.guard.within(lambda: self.source.fetch(entity_id), 3600.0,"),),
    ),
    Mutant(
        "471-kv-switch-before-the-last-shard",
        "a precompute switches the readers to its run when one shard finishes: they read a partial run",
        (KV_TESTS + "test_readers_switch_when_the_last_shard_finishes_and_the_replaced_run_expires",),
        (Edit(KV_SINK, "KvSink.finish", "if FINISHED in record or not _complete(record):", "if FINISHED in record:"),),
    ),
    Mutant(
        "472-kv-replaced-run-kept",
        "after the switch the replaced run's keys never expire: every run stays in the store for good",
        (KV_TESTS + "test_readers_switch_when_the_last_shard_finishes_and_the_replaced_run_expires", KV_KILLED),
        (Edit(KV_SINK, "KvSink.finish", "self._expire_replaced()\n", "\n"),),
    ),
    Mutant(
        "473-kv-resume-from-the-start",
        "a resumed precompute ignores its recorded progress and scores its whole plan again",
        (KV_TESTS + "test_a_resumed_shard_starts_after_its_last_commit_and_a_finished_run_is_refused", KV_KILLED),
        (Edit(KV_SINK, "KvSink.resume",
              'self._reached = {tp: to for tp, (_, to) in ranges_of(json.dumps(progress["reached"])).items()}',
              "self._reached = {}"),),
    ),
    Mutant(
        "150-dev-redis-forgets-its-data",
        "streamer dev redis runs without persistence: a restart loses the precomputed predictions and features",
        ("tests/commands/test_devredis.py::test_a_printed_password_guards_it_the_data_survives_a_restart_and_signals_stop_it",),
        (Edit("streamer/commands/devredis.py", "run_dev_redis", "persist=True", "persist=False"),),
    ),
    Mutant(
        "151-dev-redis-prints-a-given-password",
        "streamer dev redis prints the password it was given in $REDIS_PASSWORD: a secret in a terminal's scrollback and logs",
        ("tests/commands/test_devredis.py::test_a_printed_password_guards_it_the_data_survives_a_restart_and_signals_stop_it",),
        (Edit("streamer/commands/devredis.py", "run_dev_redis",
              'shown = f"the password from ${PASSWORD_ENV}" if given else f"password {password}"',
              'shown = f"password {password}"'),),
    ),
    Mutant(
        "109-store-guard-never-opens",
        "a failed store stays asked: under a stall every request waits its whole timeout and holds a connection",
        ("tests/online/test_guard.py::test_a_failure_skips_the_store_for_skip_ms_then_one_probe_closes_it_or_opens_it_again",
         "tests/online/test_degrade_redis.py::"
         "test_a_stalled_store_under_load_answers_every_request_degraded_or_refused_within_its_deadline"),
        (Edit("streamer/online/guard.py", "Guard.ask",
              "except (StoreError, TimeoutError):\n    self._opened_at, self._probing = self.clock(), False\n",
              "except (StoreError, TimeoutError):\n    pass\n"),),
    ),
    Mutant(
        "110-admission-prices-every-call-as-the-last",
        "admission prices a one-row request's call as the last full batch's: after one slow batch an empty queue refuses every request for good",
        ("tests/online/test_admission.py::"
         "test_a_slow_call_of_a_full_batch_does_not_keep_refusing_a_one_row_request_into_an_empty_queue",),
        (Edit("streamer/online/admission.py", "Admission.answer_in",
              "share = 1.0 if batch is None else min(1.0, max(batch, 1) / self.call_rows)", "share = 1.0"),),
    ),
    Mutant(
        "111-kv-hash-merged-with-an-earlier-write",
        "a prediction written again over an entity's hash keeps the fields it leaves null: the answer mixes two predictions",
        ("tests/stores/test_sink.py::test_a_row_written_again_replaces_the_whole_hash_a_null_field_keeps_no_earlier_value",),
        (Edit("streamer/stores/bulk.py", "hsets", "out.append(pack([b\"DEL\", key]))\n", ""),),
    ),
    Mutant(
        "112-kv-older-run-switched-to-last",
        "a run that completes after a run started later switches the readers back to older predictions",
        ("tests/stores/test_sink.py::test_a_run_that_completes_after_a_run_started_later_does_not_take_the_readers_back",),
        (Edit("streamer/stores/sink.py", "KvSink.finish", "if later is not None and int(later) > started:",
              "if False:"),),
    ),
    Mutant(
        "113-store-guard-blames-only-its-own-timeout",
        "a store that outlasts a request's whole deadline is never blamed: with the default timeouts a stalled Redis is asked by every request",
        ("tests/online/test_guard.py::test_a_timeout_the_request_s_deadline_cut_opens_the_guard_once_it_waited_blame_s",),
        (Edit("streamer/online/guard.py", "Guard.within", "late = budget < min(timeout_s, BLAME_S)",
              "late = budget < timeout_s"),),
    ),
    Mutant(
        "114-features-failure-skips-the-constant-fallback",
        "features that did not come, with no precomputed prediction, are a 503 though a constant fallback could answer",
        ("tests/online/test_degrade_redis.py::"
         "test_features_that_do_not_come_without_a_precomputed_prediction_are_answered_by_a_constant_fallback",),
        (Edit("streamer/online/events.py", "ScoreRoute._constant", "if fallback is None or fallback.runner is not None:",
              "if True:"),),
    ),
    Mutant(
        "115-spark-run-id-always-forced",
        "a Spark run retried with a run id that committed writes the run again instead of being refused",
        ("tests/engines/test_spark.py::test_a_committed_run_id_is_refused_and_force_replaces_its_rows",),
        (Edit("streamer/engines/spark_io.py", "checked_run", "scorer.schema, force=force)",
              "scorer.schema, force=True)"),),
    ),
    Mutant(
        "116-spark-scored-frame-not-persisted",
        "the predictions and the rejects each score the table again: every action of a run scores every row anew",
        ("tests/engines/test_spark.py::test_each_row_is_scored_once_however_many_actions_read_both_frames",),
        (Edit("streamer/engines/spark.py", "scored_frame", ".persist()", ""),),
    ),
    Mutant(
        "117-ray-run-id-never-refused",
        "streamer score --engine ray runs a run id that committed again without --force: a retried job writes twice",
        ("tests/engines/test_ray.py::test_force_scores_a_committed_run_again_replacing_its_rows",),
        (Edit("streamer/engines/ray.py", "run_ray", "run_id, scorer.schema, force=force)", "run_id, scorer.schema, force=True)"),),
    ),
    Mutant(
        "118-ray-split-loses-the-rejects",
        "the outcomes of Ray's actor pool split wrongly: the rejects part holds the predictions",
        ("tests/engines/test_ray.py::test_score_dataset_maps_a_datasets_batches_to_predictions_and_rejects",),
        (Edit("streamer/engines/ray.py", "_rejects", "split_outcomes(outcomes, schema).rejects",
              "split_outcomes(outcomes, schema).predictions"),),
    ),
    Mutant(
        "119-ray-batches-scored-by-a-task-not-the-pool",
        "each batch scored by a scorer of its own (the model loaded per batch), not by the pool's actors",
        ("tests/engines/test_ray.py::test_the_million_rows_into_parquet_once_each_with_a_scoring_actor_killed_mid_job",),
        (Edit("streamer/engines/ray.py", "score_dataset", "outcomes = ds.map_batches(Scoring, fn_constructor_args=",
              "outcomes = ds.map_batches(lambda b, s: Scoring(s)(b), fn_args="),
         Edit("streamer/engines/ray.py", "score_dataset", "compute=ActorPoolStrategy(size=size)",
              "concurrency=size")),
    ),
    Mutant(
        "120-engine-left-out-of-the-run-summary",
        "an engine run's snapshots say which run wrote them but not which engine (spark or ray)",
        ("tests/engines/test_engines_page.py::test_the_engines_page_runs_as_written",),
        (Edit("streamer/engines/runs.py", "RunTarget.summary", "return {RUN: self.run_id, ENGINE: engine}",
              "return {RUN: self.run_id}"),),
    ),
    Mutant(
        "121-engine-run-ids-cut-to-16-characters",
        "an engine's tables keep Iceberg's default bounds of run_id (16 characters): a forced Spark run fails, "
        "its filter unprovable on the files of a run alike in its first 16 characters",
        ("tests/engines/test_runs.py::test_a_tables_run_ids_keep_whole_bounds_so_runs_alike_in_16_characters_stay_apart",
         "tests/engines/test_spark.py::test_a_committed_run_id_is_refused_and_force_replaces_its_rows"),
        (Edit("streamer/engines/runs.py", "_exact_run_ids", 'if table.properties.get(RUN_ID_METRICS) != "full":',
              "if False:"),),
    ),
    Mutant(
        "122-engine-source-unchecked",
        "an engine run scores a source its model's inputs cannot read: every row a reject, where streamer score "
        "refuses the source naming the input",
        ("tests/engines/test_ray.py::test_a_source_the_models_inputs_cannot_read_is_refused_before_ray_is_reached",),
        (Edit("streamer/engines/ray.py", "run_ray", "scorer.check(location)", "scorer.schema"),),
    ),
    Mutant(
        "123-route-to-the-next-model",
        "a routed event goes to the model after the one its value names (a row scored by the wrong model)",
        ("tests/pipeline/test_route.py::test_each_event_goes_to_the_model_its_value_names_in_chunk_order",
         "tests/integration/test_routing_kafka.py::"
         "test_three_models_score_their_tenants_as_onnx_runtime_does_each_on_its_topic"),
        (Edit("streamer/pipeline/route.py", "Router.__init__",
              "self._map = {value: at[name] for value, name in route.map.items()}",
              "self._map = {value: (at[name] + 1) % len(self.lanes) for value, name in route.map.items()}"),),
    ),
    Mutant(
        "124-lane-acks-commit-the-other-lanes",
        "a lane's acknowledged outputs mark every offset up to its last row done, the other lanes' rows "
        "between them included: offsets committed before those rows' acks",
        ("tests/test_processor_lanes.py::test_each_model_writes_its_own_topic_and_commits_wait_for_every_lane",),
        (Edit(PROCESSOR, "Processor._collect_acks", "self._observe.acked(acked)\n",
              "self._observe.acked(acked)\n"
              "for tp, offs in acked.offsets().items():\n"
              "    self._tracker.done(tp, list(range(max(int(o.max()) for o in offs) + 1)))\n"),),
    ),
    Mutant(
        "125-reload-swaps-every-model",
        "one model's new version makes every model of the stream load again",
        ("tests/integration/test_routing_kafka.py::test_one_model_reloads_alone_and_one_failing_model_degrades_alone",),
        (Edit(PROCESSOR, "Processor._infer_and_produce",
              "for lane in self._lanes:\n"
              "    self._account.reloaded(lane.serving.poll(), lane.name)  # a new version goes in between batches\n",
              "for lane in self._lanes:\n"
              "    self._account.reloaded(done := lane.serving.poll(), lane.name)\n"
              "    if done is not None:\n"
              "        self._lanes.reload()\n"),),
    ),
    Mutant(
        "126-unknown-value-scored-when-dead-letter-asked",
        "route.unknown: dead_letter is ignored: an unknown tenant is silently scored by the default model",
        ("tests/pipeline/test_route.py::test_each_event_goes_to_the_model_its_value_names_in_chunk_order",
         "tests/integration/test_routing_kafka.py::"
         "test_three_models_score_their_tenants_as_onnx_runtime_does_each_on_its_topic"),
        (Edit("streamer/pipeline/route.py", "Router.__init__",
              'self._unknown = _UNKNOWN if route.unknown == "dead_letter" else at[default]',
              "self._unknown = at.get(default, 0)"),),
    ),
    Mutant(
        "140-online-lru-unloads-the-one-just-used",
        "models.max_loaded unloads the most recently used model for the one coming in, not the least recently used",
        (MANY_MODELS + "test_twenty_models_answer_within_their_deadlines_and_five_in_memory",),
        (Edit(LANES, "Lanes._make_room", "victim = min(free, key=lambda lane: lane.used)",
              "victim = max(free, key=lambda lane: lane.used)"),),
    ),
    Mutant(
        "141-online-load-without-warm-up",
        "a model loaded on demand answers before its warm-up ran",
        (MANY_MODELS + "test_twenty_models_answer_within_their_deadlines_and_five_in_memory",),
        (Edit("streamer/online/server.py", "OnlineServer._build", "warm()\nloaded.dispatcher.start()\n",
              "loaded.dispatcher.start()\n"),),
    ),
    Mutant(
        "142-online-unload-without-the-token",
        "the repository extension loads and unloads models without the jobs token",
        (MANY_MODELS + "test_the_repository_extension_loads_and_unloads_behind_the_jobs_token",),
        (Edit("streamer/online/repository_http.py", "RepositoryApi.routes", "g = self._guarded",
              "g = lambda handler: handler  # noqa: E731"),),
    ),
    Mutant(
        "143-online-request-to-the-wrong-model",
        "a request naming a model of the repository is answered by the default model",
        (MANY_MODELS + "test_three_models_each_answer_at_their_own_path_as_onnx_runtime_does",
         MANY_MODELS + "test_twenty_models_answer_within_their_deadlines_and_five_in_memory"),
        (Edit("streamer/online/plane.py", "DataPlane.lane", "if self.lanes is None or name == self.model.name:",
              "if True:"),),
    ),
    Mutant(
        "170-model-flag-ignored",
        "a batch command given --model NAME scores with the default model",
        (MODELS_BATCH + "test_score_with_model_writes_that_models_predictions_and_its_version",
         "tests/commands/test_models_batch_kafka.py::test_replay_with_model_writes_that_models_predictions_and_its_version",
         "tests/commands/test_models_batch_kafka.py::test_evaluate_with_model_proves_a_candidate_against_that_model"),
        (Edit("streamer/cli_batch.py", "one_model", "return replay_config(cfg, args.model, None)",
              "return replay_config(cfg, None, None)"),
         Edit("streamer/cli_batch.py", "one_model", 'return replay_config(cfg, args.model, "lake" if lake else "topic")',
              'return replay_config(cfg, None, "lake" if lake else "topic")')),
    ),
    Mutant(
        "171-job-model-dropped-on-the-way-to-the-worker",
        "a job spec's model is left out of the queued spec: the worker scores the job with the default model",
        (MODELS_BATCH + "test_a_job_spec_names_its_model_and_the_worker_scores_with_it",),
        (Edit("streamer/jobs/spec.py", "JobSpec.with_id", "self.priority, self.labels, model=self.model)",
              "self.priority, self.labels)"),),
    ),
    Mutant(
        "172-worker-ignores-the-jobs-model",
        "the worker runs every job with the default model, whatever its spec's model",
        (MODELS_BATCH + "test_a_job_spec_names_its_model_and_the_worker_scores_with_it",),
        (Edit("streamer/cli_jobs.py", "JobRunner.run", "cfg = job_config(load_config(self.config), spec)",
              "cfg = load_config(self.config)"),),
    ),
    Mutant(
        "173-check-only-the-default-model",
        "streamer check loads the default model alone: a broken model of the repository passes",
        (MODELS_BATCH + "test_check_lists_every_model_and_refuses_a_bad_one_on_its_key",),
        (Edit("streamer/commands/check.py", "_models", "if len(names) == 1:", "if True:"),),
    ),
    Mutant(
        "174-jobs-api-queues-an-unknown-model",
        "POST /v1/jobs queues a spec naming no model of the config: its job fails on a worker instead of a 422",
        (MODELS_BATCH + "test_the_jobs_api_refuses_a_spec_with_an_unknown_model",),
        (Edit(JOBS_HTTP, "JobsApi._spec", "check_model(spec, model_entries(self.cfg))\n", "pass\n"),),
    ),
    Mutant(
        "175-submit-queues-an-unknown-model",
        "jobs submit and jobs watch queue a spec naming no model of the config: its job fails on a worker",
        (MODELS_BATCH + "test_a_job_spec_with_an_unknown_model_is_refused_at_submit",),
        (Edit("streamer/cli_jobs.py", "checked_spec", "if names is not None:", "if False:"),),
    ),
    Mutant(
        "176-evaluate-every-tenant",
        "evaluate --model of a routed config scores every tenant's events with that model, not the events its route "
        "sends it: the proof of one tenant's model mixes in the others",
        ("tests/commands/test_models_evaluate_routed_kafka.py::"
         "test_evaluate_with_model_of_a_routed_config_proves_the_candidate_on_that_models_events",),
        (Edit("streamer/cli_batch.py", "evaluate", "routed=RoutedTo.of(routed, cfg.model.name))", "routed=None)"),),
    ),
    Mutant(
        "190-resume-reads-the-current-snapshot",
        "a resumed table run reads the source table's current snapshot, not the one it was planned on: rows "
        "appended since are scored into the run",
        ("tests/lake/test_score.py::test_a_resumed_score_reads_the_snapshot_it_was_planned_on",),
        (Edit("streamer/lake/table.py", "TableSource._batches",
              "return iter(table.scan(snapshot_id=int(snapshot)).to_arrow_batch_reader()), 0",
              "return iter(table.scan().to_arrow_batch_reader()), 0"),),
    ),
    Mutant(
        "127-default-serving-is-the-first-routed-models",
        "a routed stream whose default model the route never sends events to serves the first routed "
        "model as its default: the online server's default beside the stream answers with another model",
        ("tests/test_processor_lanes.py::"
         "test_the_default_model_stands_behind_the_processor_when_the_route_sends_it_nothing",),
        (Edit("streamer/wiring/stream.py", "build_wiring",
              "house = houses.get(cfg.model.name) or house_of(cfg, cfg.model.name, metrics)",
              "house = next(iter(houses.values()))"),),
    ),
)
