"""The Kafka output's configuration: a partitioner that would split one key's records across
partitions is refused, the settings that reach and authenticate to the brokers also go to the
checkpoint topic's clients, and the transaction timeout a producer override sets is the one
the output reasons with."""

from __future__ import annotations

import pytest

from dblog.outputs.kafka_config import KafkaConfig


@pytest.mark.parametrize("partitioner", ["random", "consistent", "fnv1a_random"])
def test_a_partitioner_other_than_murmur2_is_refused(partitioner: str) -> None:
    with pytest.raises(ValueError, match=f"producer.partitioner '{partitioner}'.*murmur2_random"):
        KafkaConfig(bootstrap_servers="h:1", producer={"partitioner": partitioner})


@pytest.mark.parametrize("partitioner", ["murmur2_random", "murmur2"])
def test_murmur2_partitioners_are_accepted(partitioner: str) -> None:
    config = KafkaConfig(bootstrap_servers="h:1", producer={"partitioner": partitioner})
    assert config.producer_settings("p", None, None)["partitioner"] == partitioner


def test_the_checkpoint_clients_get_the_connection_and_security_settings() -> None:
    shared = {"security.protocol": "SASL_SSL", "enable.ssl.certificate.verification": False,
              "sasl.mechanism": "OAUTHBEARER", "oauthbearer_token_refresh_cb": print,
              "broker.address.family": "v4", "ssl.ca.location": "/ca.pem"}
    config = KafkaConfig(bootstrap_servers="h:1", producer={**shared, "linger.ms": 50})
    settings = config.client_settings(None)
    assert {k: settings[k] for k in shared} == shared
    assert "linger.ms" not in settings


def test_the_transaction_timeout_follows_a_producer_override() -> None:
    assert KafkaConfig(bootstrap_servers="h:1", transaction_timeout_s=30).transaction_timeout == 30
    overridden = KafkaConfig(bootstrap_servers="h:1",
                             producer={"transaction.timeout.ms": 90_000})
    assert overridden.transaction_timeout == 90
