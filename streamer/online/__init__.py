"""Online scoring: the Open Inference Protocol over HTTP and gRPC, on the stream's batcher and model contract."""
