"""The Compose stack's feature repository: each entity's model input, keyed by ``entity_id``.

``data/entity_features.parquet`` holds one row per entity and time: ``entity_id`` (a string),
``features`` (the example model's 32 float32s) and ``event_timestamp``. `feast apply` registers
the view, `feast materialize-incremental` copies the latest row of each entity into Redis, and
the online server asks for ``entity_features:features`` (deploy/config/stack.yaml), which feeds
the event field ``features``.
"""

from datetime import timedelta
from pathlib import Path

from feast import Entity, FeatureService, FeatureView, Field, FileSource
from feast.types import Array, Float32
from feast.value_type import ValueType

entity = Entity(name="entity", join_keys=["entity_id"], value_type=ValueType.STRING)
source = FileSource(path=str(Path(__file__).parent / "data" / "entity_features.parquet"),
                    timestamp_field="event_timestamp")
entity_features = FeatureView(name="entity_features", entities=[entity], ttl=timedelta(days=365), online=True,
                              source=source, schema=[Field(name="features", dtype=Array(Float32))])
scoring = FeatureService(name="scoring", features=[entity_features])
