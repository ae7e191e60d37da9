"""Development tooling that production never imports: the local Kafka broker."""
