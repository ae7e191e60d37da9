"""Columnar fast paths of the wire formats: whole chunks of events to named columns, predictions to bytes."""
