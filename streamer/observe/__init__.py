"""Metrics, health, progress and stall detection, summary stats, the lag exporter."""
