"""The Grafana dashboard, as code: ``python deploy/grafana/dashboard.py`` writes
deploy/grafana/dashboards/streamer.json (committed; tests/deploy/test_dashboard.py checks it is this
script's output and that it keeps the conventions below).

Conventions, for any Grafana and any Prometheus datasource:
- a ``datasource`` variable (type prometheus) that every panel and query uses: no hard-coded uid;
- ``job``, ``instance`` and ``group`` (consumer group) variables that every series selector uses,
  and a ``model`` variable that the model side's series (``{MSEL}``: batches, inference, drift,
  degraded rows, the breaker, versions and reloads, the challengers) use too: a stream of several models
  (``route``) shows one model, some or all;
- ``$__rate_interval`` for every range (never a fixed ``[1m]``);
- a unit and a description on every panel.

A panel is a title, a description, a unit (Grafana's unit id) and its queries (legend, PromQL
with ``{SEL}`` where the variables' selector goes). ``PANELS`` are the stream's; ``ONLINE`` and
``JOBS`` sit under rows of their own, "Online" and "Jobs". Standard library only.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "dashboards" / "streamer.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'job=~"$job", instance=~"$instance", group=~"$group"'
MSEL = SEL + ', model=~"$model"'  # a model-side series: the model variable too
RATE = "$__rate_interval"


def q(expr: str, legend: str) -> tuple[str, str]:
    return legend, expr.replace("{MSEL}", "{" + MSEL + "}").replace("{SEL}", "{" + SEL + "}").replace("[RATE]", f"[{RATE}]")


def quantiles(metric: str, by: str = "le", qs: tuple[float, ...] = (0.5, 0.95, 0.99),
              legend: str = "", sel: str = "SEL") -> list[tuple[str, str]]:
    return [q(f"histogram_quantile({x}, sum by ({by}) (rate({metric}_bucket{{{sel}}}[RATE])))",
              f"p{round(x * 100)}{legend}") for x in qs]


PANELS: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    ("Lag per partition (messages)",
     "Messages between each partition's end and the group's committed offset (the lag exporter, "
     "computed from the brokers even when no processor runs).", "short",
     [q("streamer_group_lag_messages{SEL}", "{{topic}}[{{partition}}]")]),
    ("Total lag (messages)",
     "Lag summed over the group's partitions. Growing for minutes means the processors score slower "
     "than events arrive: add replicas, up to the partition count.", "short",
     [q("streamer_group_total_lag_messages{SEL}", "{{group}}")]),
    ("Lag per partition (seconds)",
     "Age of the oldest uncommitted message of each partition (0 when caught up), and the oldest "
     "over all partitions: how late the predictions are.", "s",
     [q("streamer_group_lag_seconds{SEL}", "{{topic}}[{{partition}}]"),
      q("streamer_group_lag_seconds_max{SEL}", "oldest ({{group}})")]),
    ("Events in and predictions out",
     "Input events consumed and predictions acknowledged by the broker, per second, over the "
     "selected processors.", "ops",
     [q("sum(rate(streamer_events_consumed_total{SEL}[RATE]))", "consumed"),
      q("sum(rate(streamer_predictions_produced_total{SEL}[RATE]))", "predicted")]),
    ("Dead letters by stage",
     "Events written to the dead-letter topic per second, by the stage that refused them "
     "(deserialize, validate, infer, serialize, produce).", "ops",
     [q("sum by (stage) (rate(streamer_dead_letters_total{SEL}[RATE]))", "{{stage}}")]),
    ("Batch size",
     "Rows per model call of the selected models: quantiles and mean. Small batches under load mean "
     "max_wait_ms flushes them early.", "short",
     quantiles("streamer_batch_size_rows", qs=(0.5, 0.99), sel="MSEL")
     + [q("sum(rate(streamer_batch_size_rows_sum{MSEL}[RATE])) / sum(rate(streamer_batch_size_rows_count{MSEL}[RATE]))",
          "mean")]),
    ("Flushes by reason",
     "Why batches were closed, per second, by model: size (max_size reached), time (max_wait_ms "
     "after the first row), revoke or shutdown.", "ops",
     [q("sum by (model, reason) (rate(streamer_batch_flushes_total{MSEL}[RATE]))", "{{model}} {{reason}}")]),
    ("Inference duration",
     "Duration of one model call (one batch), by model, version and execution provider.", "s",
     quantiles("streamer_inference_seconds", by="le, model, version, provider",
               legend=" {{model}} v{{version}} ({{provider}})", sel="MSEL")),
    ("End-to-end latency",
     "From an event's timestamp to its prediction's acknowledgement by the broker.", "s",
     quantiles("streamer_end_to_end_latency_seconds", qs=(0.5, 0.99))),
    ("In flight",
     "Batches flushed and not yet acknowledged, and messages in the producers' local queues.", "short",
     [q("sum(streamer_in_flight_batches{SEL})", "batches in flight"),
      q("sum(streamer_producer_queue_messages{SEL})", "producer queue")]),
    ("Rebalances",
     "Partition assignment changes (assign, revoke, lost) per interval. Frequent ones cost "
     "throughput: prefer static membership for rolling restarts.", "short",
     [q("sum by (kind) (increase(streamer_rebalances_total{SEL}[RATE]))", "{{kind}}")]),
    ("Group members",
     "Live members of the consumer group, as the group coordinator reports.", "short",
     [q("streamer_group_members{SEL}", "{{group}}")]),
    ("Feature drift (PSI)",
     "Population stability index of each input feature over the drift window, against the model's "
     "training profile (model.drift_profile): below 0.1 stable, 0.1-0.25 moderate, above 0.25 a major "
     "shift. Empty when the model ships no profile.", "none",
     [q("max by (model, feature) (streamer_feature_psi{MSEL})", "{{model}} {{feature}}")]),
    ("Features outside the training range",
     "Share of each feature's values in the drift window below the smallest or above the largest "
     "value of the training profile.", "percentunit",
     [q("max by (model, feature) (streamer_feature_out_of_range_ratio{MSEL})", "{{model}} {{feature}}")]),
    ("Degraded predictions",
     "Share of all predictions scored by a selected model's fallback (model.fallback_*) while its "
     "circuit breaker was open or it failed on the batch, and each model's breaker per processor: "
     "0 closed, 1 half-open (probing the model), 2 open.", "percentunit",
     [q("sum(rate(streamer_degraded_predictions_total{MSEL}[RATE])) / "
        "clamp_min(sum(rate(streamer_predictions_produced_total{SEL}[RATE])), 1e-9)", "degraded share"),
      q("max by (instance, model) (streamer_model_breaker_state{MSEL}) / 2",
        "breaker {{model}} {{instance}} (1 = open)")]),
    ("Model versions and reloads",
     "The version of each model each processor serves (hot reload swaps it between two batches) and "
     "the reloads that were swapped in or refused (a file that failed to load or its checks).", "short",
     [q("count by (model, version) (streamer_model_info{MSEL})", "serving {{model}} v{{version}}"),
      q("sum by (model, result) (increase(streamer_model_reloads_total{MSEL}[RATE]))",
        "reloads {{model}} {{result}}")]),
    ("Shadow: decisions that flip",
     "Share of the rows both scored on which a challenger's decision (score[0] >= "
     "shadow.flip_threshold) differs from the champion's, per challenger (shadow.challengers).",
     "percentunit",
     [q("sum by (model, challenger) (rate(streamer_shadow_flips_total{MSEL}[RATE])) / "
        "clamp_min(sum by (model, challenger) (rate(streamer_shadow_compared_rows_total{MSEL}[RATE])), 1e-9)",
        "{{model}}: {{challenger}}")]),
    ("Shadow: score difference",
     "Absolute difference of each challenger's first score from the champion's on the same rows: "
     "median and 99th percentile.", "none",
     quantiles("streamer_shadow_abs_diff", by="le, model, challenger", qs=(0.5, 0.99),
               legend=" {{model}}: {{challenger}}", sel="MSEL")),
    ("Shadow: published and failed",
     "Shadow predictions acknowledged per second, and a challenger's rows not published, by stage "
     "(skipped: it lagged and its queue was full; score, encode, produce). The champion never waits "
     "for a challenger.", "ops",
     [q("sum by (model, challenger) (rate(streamer_shadow_predictions_total{MSEL}[RATE]))",
        "{{model}}: {{challenger}} published"),
      q("sum by (model, challenger, stage) (rate(streamer_shadow_failures_total{MSEL}[RATE]))",
        "{{model}}: {{challenger}} {{stage}}")]),
    ("Health",
     "Healthy is 0 while a processor is blocked (model failing, outputs unwritable, registry "
     "away); stalled partitions have work and no progress; paused partitions wait on a block.",
     "short",
     [q("min(streamer_healthy{SEL})", "healthy (min)"),
      q("sum(streamer_partition_stalled{SEL})", "stalled partitions"),
      q("sum(streamer_paused_partitions{SEL})", "paused partitions")]),
]

# The row "Online": the online server (`streamer serve`, or `run` with online.enabled), from the
# series on its HTTP port's /metrics.
ONLINE: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    ("Online: requests by code",
     "Online requests answered per second, by status code and transport (http, grpc, score: "
     "POST /v1/score). 503 is a shed request, 4xx a bad one.", "reqps",
     [q("sum by (code, transport) (rate(streamer_online_requests_total{SEL}[RATE]))", "{{code}} {{transport}}")]),
    ("Online: latency",
     "From a request's arrival to its answer, by transport: the 99th percentile (the latency to "
     "alert on) and the median. At most online.max_wait_ms and one model call in a healthy server.",
     "s",
     quantiles("streamer_online_request_seconds", by="le, transport", qs=(0.99, 0.5), legend=" {{transport}}")),
    ("Online: shed requests by reason",
     "Requests refused with 503 and Retry-After per second: queue (online.max_queue_rows reached), "
     "deadline (it could not be met), stopping (SIGTERM), expired (its deadline passed while it "
     "waited). Steady shedding asks for more replicas.", "reqps",
     [q("sum by (reason) (rate(streamer_online_shed_total{SEL}[RATE]))", "{{reason}}")]),
    ("Online: queued rows",
     "Rows admitted and not yet scored, per instance (the autoscaler's metric). A queue above a "
     "batch makes each request wait a model call longer.", "short",
     [q("sum by (instance) (streamer_online_queued_rows{SEL})", "{{instance}}")]),
    ("Online: degraded answers by reason",
     "Share of the answers (/v1/score and /v1/predictions) flagged degraded, by reason: breaker (the "
     "model's breaker is open), deadline (it could not be met), features (the feature fetch failed "
     "or passed online.features.timeout_ms). Above 5% for 10 minutes: the StreamerOnlineDegraded alert.",
     "percentunit",
     [q("sum by (reason) (rate(streamer_online_degraded_total{SEL}[RATE])) / ignoring (reason) group_left "
        "clamp_min(sum(rate(streamer_online_answers_total{SEL}[RATE])), 1e-9)", "{{reason}}")]),
    ("Online: hops",
     "The 99th percentile of each hop of an online answer: features (the fetch), queue (admitted to "
     "its batch's model call), model (the call), encode (the call's end to the answer built).", "s",
     quantiles("streamer_online_hop_seconds", by="le, hop", qs=(0.99,), legend=" {{hop}}")),
]


# The row "Jobs": the job workers (`streamer worker`), from the series on their metrics port.
# Every worker reads the same status topic, so the jobs per state are one worker's count per group.
JOBS: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    ("Jobs: by state",
     "Jobs in each state as the status topic holds them: queued, running, completed, failed, expired, "
     "cancelling, cancelled. Every worker reads the same topic: the panel takes the highest count of "
     "each group's workers. Queued growing while running stays flat: add workers.", "short",
     [q("sum by (state) (max by (group, state) (streamer_jobs{SEL}))", "{{state}}")]),
    ("Jobs: finished",
     "Jobs that ended on the workers per interval, by the state they ended in: completed, failed (the "
     "reason is in `streamer jobs status ID`), expired (past their window), cancelled.", "short",
     [q("sum by (state) (increase(streamer_job_duration_seconds_count{SEL}[RATE]))", "{{state}}")]),
    ("Jobs: duration",
     "From a job's start on a worker to its end, by the state it ended in, over the jobs that ended in "
     "each interval: median and 95th percentile. A job resumed on another worker counts each run.", "s",
     quantiles("streamer_job_duration_seconds", by="le, state", qs=(0.5, 0.95), legend=" {{state}}")),
    ("Jobs: time queued",
     "From a job's submission to its start on a worker, over the jobs started in each interval. Includes "
     "the wait for its not_before; long waits with idle workers point at the queue's partitions.", "s",
     quantiles("streamer_job_queued_seconds", qs=(0.5, 0.95, 0.99))),
    ("Jobs: rows per second",
     "Rows scored per second by the jobs running now, per worker as it reports, and in total from the "
     "rows counter.", "ops",
     [q("sum by (instance) (streamer_job_rows_per_second{SEL})", "{{instance}}"),
      q("sum(rate(streamer_job_rows_total{SEL}[RATE]))", "all workers")]),
    ("Jobs: time needed and time left",
     "For each worker's running job: the seconds it needs still at its rate, and the seconds left in its "
     "completion window (within). Needed above left: it will miss its window "
     "(the StreamerJobWillMissWindow alert).", "s",
     [q("max by (instance) (streamer_job_eta_seconds{SEL})", "{{instance}} needs"),
      q("max by (instance) (streamer_job_deadline_timestamp_seconds{SEL}) - time()", "{{instance}} has left")]),
]


def variable(name: str, label: str, query: str) -> dict[str, object]:
    return {"name": name, "label": label, "type": "query", "datasource": DATASOURCE,
            "query": {"query": query, "refId": name}, "definition": query, "refresh": 2,
            "includeAll": True, "multi": True, "allValue": ".+", "sort": 1,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "options": [], "hide": 0}


def timeseries(n: int, y: int, panel: tuple[str, str, str, list[tuple[str, str]]]) -> dict[str, object]:
    """Panel ``n`` (its id, n + 1) of a two-column grid starting at height ``y``."""
    title, description, unit, queries = panel
    return {
        "id": n + 1, "type": "timeseries", "title": title, "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (n % 2), "y": y + 8 * (n // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "targets": [{"refId": chr(ord("A") + k), "datasource": DATASOURCE, "expr": expr,
                     "legendFormat": legend} for k, (legend, expr) in enumerate(queries)],
    }


def dashboard() -> dict[str, object]:
    panels: list[dict[str, object]] = [timeseries(n, 0, p) for n, p in enumerate(PANELS)]
    y = 8 * ((len(PANELS) + 1) // 2)
    for title, below in (("Online", ONLINE), ("Jobs", JOBS)):
        row = len(panels) + 1
        panels.append({"id": row, "type": "row", "title": title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        # ids after the row's; the grid restarts below it
        panels += [{**timeseries(k, y + 1, p), "id": row + k + 1} for k, p in enumerate(below)]
        y += 1 + 8 * ((len(below) + 1) // 2)
    streamer = '{__name__=~"streamer_.+"}'
    return {
        "uid": "streamer", "title": "streamer: scoring on Kafka", "schemaVersion": 39, "version": 4,
        "editable": False, "time": {"from": "now-1h", "to": "now"}, "refresh": "30s",
        "tags": ["streamer", "kafka"],
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {}, "options": [], "refresh": 1, "regex": "", "hide": 0},
            variable("job", "Job", f"label_values({streamer}, job)"),
            variable("instance", "Instance", 'label_values({__name__=~"streamer_.+", job=~"$job"}, instance)'),
            variable("group", "Consumer group", 'label_values({__name__=~"streamer_.+", job=~"$job"}, group)'),
            variable("model", "Model", 'label_values(streamer_model_info{job=~"$job"}, model)'),
        ]},
        "annotations": {"list": []},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
