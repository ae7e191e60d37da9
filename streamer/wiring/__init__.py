"""Builds the house for every command from a Config: the model side once (model.py), then each mode's composition (stream.py, lake.py, evaluate.py, online.py)."""
