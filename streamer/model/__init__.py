"""The model: its signature, the contract that feeds and reads it, the prediction schema, and the runner."""
