"""What the CLI runs: wiring only (run, replay, demo, dlq)."""
