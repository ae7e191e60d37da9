"""`streamer serve` with its entity features in a Redis of their own, for benchmarks/online_store.py.

The server of ``STREAMER_CONFIG`` (its ``kv:`` store holds the precomputed predictions), run as
`streamer serve` runs it, but fetching the features from ``FEATURES_ADDRESS`` (password
``FEATURES_PASSWORD``): stalling that Redis stalls the features alone, as a stuck feature server
does, while the precomputed predictions stay reachable for the degrade path.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streamer.config import Secret  # noqa: E402
from streamer.config_file import load_config  # noqa: E402
from streamer.online.server import OnlineServer  # noqa: E402
from streamer.stores.features import RedisFeatures  # noqa: E402
from streamer.wiring.lake import lake_house  # noqa: E402 - after the path

if __name__ == "__main__":
    cfg = load_config(os.environ["STREAMER_CONFIG"])
    kv = replace(cfg.kv, address=os.environ["FEATURES_ADDRESS"], password=Secret(os.environ["FEATURES_PASSWORD"]))
    server = OnlineServer(cfg, lake_house(cfg).model.serving, features=RedisFeatures(cfg.online.features, kv))
    sys.exit(server.run())
