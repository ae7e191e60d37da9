"""Scoring tables on a cluster engine (Apache Spark, Ray Data) with the lake's contract and prediction columns."""
