"""Backfills into the lake and table scoring: predictions as Apache Iceberg tables or Parquet datasets."""
