"""One module per CLI command: each chooses a source and a sink, takes its house from streamer/wiring/, runs it and reports."""
