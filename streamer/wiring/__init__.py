"""Builds the house for every command from a Config: the model side once (model.py, codecs.py), then each mode's composition (stream, lake, evaluate, online)."""
