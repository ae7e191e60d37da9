"""The stages over a batch: decode, validate, batch, infer (with isolation), encode. No Kafka here."""
