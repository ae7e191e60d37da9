"""streamer: streaming inference on Apache Kafka with ONNX Runtime."""

__version__ = "0.1.0"
