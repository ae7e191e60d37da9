"""Batch jobs: a spec submitted to a Kafka-queued group of workers, its status in a compacted topic, schedules and triggers; a job is a run id."""
