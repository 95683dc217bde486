"""What the run hands Spark's Kafka source: the batch shape, and a consumer cache sized for the subscription."""

from __future__ import annotations

from connector.config import ConnectorSettings, SourceSettings, SparkSettings
from connector.spark.source import CONSUMER_CACHE_CAPACITY, _batch_shape_options, with_consumer_cache


def test_only_the_batch_shape_settings_given_reach_spark() -> None:
    assert _batch_shape_options(SourceSettings()) == {"maxOffsetsPerTrigger": "200000"}
    source = SourceSettings(
        max_offsets_per_trigger=None,
        min_offsets_per_trigger=500_000,
        max_trigger_delay="2m",
        min_partitions=8,
        max_records_per_partition=100_000,
    )
    assert _batch_shape_options(source) == {
        "minOffsetsPerTrigger": "500000",
        "maxTriggerDelay": "2m",
        "minPartitions": "8",
        "maxRecordsPerPartition": "100000",
    }


def test_the_consumer_cache_holds_every_subscribed_partition() -> None:
    settings = ConnectorSettings()
    assert with_consumer_cache(settings, 10).spark.conf[CONSUMER_CACHE_CAPACITY] == "64"  # Spark's default floor
    assert int(with_consumer_cache(settings, 2_000).spark.conf[CONSUMER_CACHE_CAPACITY]) >= 2_000
    chosen = ConnectorSettings(spark=SparkSettings(conf={CONSUMER_CACHE_CAPACITY: "100"}))
    assert with_consumer_cache(chosen, 2_000).spark.conf[CONSUMER_CACHE_CAPACITY] == "100"  # the user's value wins
