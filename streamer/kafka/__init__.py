"""Everything that talks to Kafka: clients, delivery, offsets, checkpoints, transactions, dead letters, topics."""
