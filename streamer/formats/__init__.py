"""Wire formats: every byte layout streamer reads or writes, a module per family (codec, varint,
avro, confluent, json_events, protobuf, subjects); docs/wire_formats.md is their contract."""
