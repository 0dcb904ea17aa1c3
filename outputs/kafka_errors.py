"""The one place where librdkafka's errors become dblog's (SPEC section 8: driver errors are
classified once, in the adapter, by error code).

* fencing (another producer with this ``transactional.id`` started: a newer leader; or the
  coordinator aborted a transaction open longer than ``transaction.timeout.ms``) ->
  :class:`ProducerFenced`, a :class:`LeadershipLost`: this producer writes nothing more (the
  output tells the second cause from the first by the transaction's age, see
  ``KafkaOutput``);
* a record larger than a producer or broker limit -> :class:`FatalOutputError` naming the
  table, the key and the setting to raise (bad input: it stops the pipeline, nothing else is
  lost or skipped);
* rights, authentication, an unknown topic with auto-creation off, an invalid setting ->
  :class:`FatalOutputError` with the fix;
* everything transient (brokers down or restarting, leader elections, timeouts, not enough
  in-sync replicas, coordinator moves) -> :class:`RetryableOutputError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import KafkaError, KafkaException

from dblog.errors import DblogError, FatalOutputError, LeadershipLost, RetryableOutputError

E = KafkaError

FENCED = frozenset({E._FENCED, E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH,
                    E.TRANSACTION_COORDINATOR_FENCED})
TOO_LARGE = frozenset({E.MSG_SIZE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE, E.INVALID_MSG_SIZE})
RETRYABLE = frozenset({
    E._TRANSPORT, E._ALL_BROKERS_DOWN, E._TIMED_OUT, E._MSG_TIMED_OUT, E._TIMED_OUT_QUEUE,
    E._QUEUE_FULL, E.REQUEST_TIMED_OUT, E.NOT_ENOUGH_REPLICAS,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.LEADER_NOT_AVAILABLE, E.NOT_LEADER_FOR_PARTITION,
    E.NETWORK_EXCEPTION, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR,
    E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS, E.KAFKA_STORAGE_ERROR,
    E._PURGE_QUEUE, E._PURGE_INFLIGHT, E.TRANSACTION_ABORTABLE, E._STATE,
})
_FIXES = {
    E.TOPIC_AUTHORIZATION_FAILED: "grant the pipeline's principal WRITE and DESCRIBE on its "
                                  "topics",
    E.CLUSTER_AUTHORIZATION_FAILED: "grant IDEMPOTENT_WRITE on the cluster (or use a broker "
                                    "that allows it)",
    E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "grant WRITE and DESCRIBE on the transactional "
                                             "id (exactly-once)",
    E.SASL_AUTHENTICATION_FAILED: "check producer.sasl.username / sasl.password",
    E._AUTHENTICATION: "check the producer's security.* / ssl.* / sasl.* settings",
    E.UNKNOWN_TOPIC_OR_PART: "create the topic, or allow auto-creation on the broker "
                             "(auto.create.topics.enable=true)",
    E._UNKNOWN_TOPIC: "create the topic, or allow auto-creation on the broker "
                      "(auto.create.topics.enable=true)",
    E.POLICY_VIOLATION: "create the topic as the broker's policy requires",
    E.INVALID_TRANSACTION_TIMEOUT: "lower transaction_timeout_s below the broker's "
                                   "transaction.max.timeout.ms",
    E._INVALID_ARG: "check the output's producer settings",
}


class ProducerFenced(LeadershipLost):
    """librdkafka reports this producer fenced (its epoch is not the transactional id's
    newest)."""


def error_of(exc: BaseException) -> KafkaError | None:
    """The librdkafka error behind ``exc``: a KafkaException's, or, for the SystemError CPython
    raises when a delivery callback ran while the client's KafkaException was pending (as
    ``flush`` and ``poll`` do after a fatal error), its cause's."""
    for candidate in (exc, exc.__cause__, exc.__context__):
        if isinstance(candidate, KafkaException) and candidate.args and \
                isinstance(candidate.args[0], KafkaError):
            return candidate.args[0]
    return None


@contextmanager
def classified(what: str) -> Iterator[None]:
    """Raise what a client call (``poll``, ``flush``) raised as dblog's error."""
    try:
        yield
    except (KafkaException, SystemError) as exc:
        error = error_of(exc)
        if error is None:
            raise
        raise classify(error, what) from exc


def describe(error: KafkaError) -> str:
    return f"{error.str()} ({error.name()})"


def classify(error: KafkaError, what: str) -> DblogError:
    """``what`` failed with ``error``: the dblog error to raise (not raised here)."""
    code = error.code()
    message = f"{what}: {describe(error)}"
    if code in FENCED:
        return ProducerFenced(f"{message}: a newer producer with this transactional id (a new "
                              "leader) fenced this one; nothing more is written")
    if code in _FIXES:
        return FatalOutputError(message, fix=_FIXES[code])
    if code in TOO_LARGE:
        return FatalOutputError(message, fix="raise producer.message.max.bytes and the "
                                "topic's max.message.bytes, or shrink the row")
    if code in RETRYABLE or (error.retriable() and not error.fatal()):
        return RetryableOutputError(message)
    return FatalOutputError(message, fix="see the Kafka broker's log; restart the pipeline "
                            "once the cause is fixed")


def too_large(error: KafkaError, table: object, key: bytes | None, seq: int,
              size: int) -> DblogError:
    """A record over a size limit, named by table and key (bad input: stops the pipeline)."""
    shown = "no key" if key is None else key.decode("utf-8", "replace")[:200]
    return FatalOutputError(
        f"the record of {table} key {shown} (seq {seq}, {size} bytes) is over the size limit: "
        f"{describe(error)}",
        fix="raise producer.message.max.bytes and the broker's message.max.bytes (or the "
            "topic's max.message.bytes), or shrink the row; nothing after it was committed")


def is_too_large(error: KafkaError) -> bool:
    return error.code() in TOO_LARGE


def is_retryable(error: KafkaError) -> bool:
    return classify(error, "").retryable
