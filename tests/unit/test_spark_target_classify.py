"""How the Spark output classifies a failed flush: a Kafka error its client marks retriable
(``org.apache.kafka.common.errors.RetriableException`` anywhere in the Java cause chain, by
class, not by message) is retryable; a Kafka error that is not stays fatal. The Java side is
faked with objects answering the few py4j calls the classification makes."""

from __future__ import annotations

from dataclasses import dataclass

from dblog.errors import FatalOutputError, RetryableOutputError
from dblog.outputs.spark_target import classify, java_causes

KAFKA = "org.apache.kafka.common.errors."
HIERARCHY = {
    "org.apache.spark.SparkException": "java.lang.Exception",
    KAFKA + "TimeoutException": KAFKA + "RetriableException",
    KAFKA + "RetriableException": KAFKA + "ApiException",
    KAFKA + "TopicAuthorizationException": KAFKA + "AuthorizationException",
    KAFKA + "AuthorizationException": KAFKA + "ApiException",
    KAFKA + "ApiException": "org.apache.kafka.common.KafkaException",
    "org.apache.kafka.common.KafkaException": "java.lang.RuntimeException",
    "java.lang.RuntimeException": "java.lang.Exception",
    "java.lang.Exception": "java.lang.Throwable",
    "java.lang.Throwable": "java.lang.Object",
}


@dataclass
class FakeClass:
    """java.lang.Class as py4j shows it (Java method names)."""

    name: str

    def getName(self) -> str:
        return self.name

    def getSuperclass(self) -> FakeClass | None:
        parent = HIERARCHY.get(self.name)
        return None if parent is None else FakeClass(parent)


@dataclass
class FakeThrowable:
    name: str
    message: str
    cause: FakeThrowable | None = None

    def getClass(self) -> FakeClass:
        return FakeClass(self.name)

    def getCause(self) -> FakeThrowable | None:
        return self.cause

    def getMessage(self) -> str:
        return self.message


class FakePy4JError(Exception):
    """Py4JJavaError's shape: the Java throwable in ``java_exception``."""

    def __init__(self, java: FakeThrowable) -> None:
        super().__init__("An error occurred while calling o93.save.\n: " + java.message)
        self.java_exception = java


def _aborted(cause: FakeThrowable) -> FakePy4JError:
    """A Spark job aborted by a failed task, as Spark's Kafka sink fails."""
    return FakePy4JError(FakeThrowable(
        "org.apache.spark.SparkException",
        f"Job aborted due to stage failure: Task 0 failed: {cause.name}: {cause.message}",
        cause))


def test_a_kafka_timeout_under_a_spark_job_failure_is_retryable() -> None:
    timeout = FakeThrowable(KAFKA + "TimeoutException",
                            "Topic p.public.t not present in metadata after 3000 ms.")
    error = classify(_aborted(timeout), "flushing spark")
    assert isinstance(error, RetryableOutputError) and error.retryable
    assert "TimeoutException: Topic p.public.t not present" in error.message


def test_a_kafka_timeout_from_the_partition_lookup_is_retryable() -> None:
    """``SparkKafkaWriter._partitions``: the consumer's own call raises it directly."""
    error = classify(FakePy4JError(FakeThrowable(
        KAFKA + "TimeoutException", "Timeout expired while fetching topic metadata")), "x")
    assert error.retryable


def test_a_kafka_error_that_is_not_retriable_stays_fatal() -> None:
    denied = FakeThrowable(KAFKA + "TopicAuthorizationException",
                           "Not authorized to access topics: [p.public.t]")
    error = classify(_aborted(denied), "flushing spark")
    assert isinstance(error, FatalOutputError) and not error.retryable


def test_the_cause_chain_is_bounded() -> None:
    loop = FakeThrowable("java.lang.RuntimeException", "loop")
    loop.cause = loop
    assert sum(1 for _ in java_causes(FakePy4JError(loop))) == 32
    assert not classify(FakePy4JError(loop), "x").retryable
