"""Errors of the storage layer. Each carries the Kafka error code the network layer answers with."""

from __future__ import annotations

from typing import ClassVar

from exactly.protocol.errors import ErrorCode


class LogError(Exception):
    """Base of every storage error; `error_code` is what goes into the response."""

    error_code: ClassVar[ErrorCode] = ErrorCode.unknown_server_error


class CorruptRecordError(LogError):
    error_code = ErrorCode.corrupt_message


class InvalidRecordError(LogError):
    error_code = ErrorCode.invalid_record

    def __init__(self, message: str,
                 record_errors: tuple[tuple[int, str | None], ...] = ()) -> None:
        super().__init__(message)
        # Produce v8+ answers these: (index of the record in its batch, why), as Kafka's
        # RecordError(batchIndex, message).
        self.record_errors = record_errors


class RecordTooLargeError(LogError):
    error_code = ErrorCode.message_too_large


class RecordListTooLargeError(LogError):
    error_code = ErrorCode.record_list_too_large


class OutOfOrderSequenceError(LogError):
    error_code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(LogError):
    error_code = ErrorCode.invalid_producer_epoch


class OffsetOutOfRangeError(LogError):
    error_code = ErrorCode.offset_out_of_range


class UnknownTopicOrPartitionError(LogError):
    error_code = ErrorCode.unknown_topic_or_partition


class TopicAlreadyExistsError(LogError):
    error_code = ErrorCode.topic_already_exists


class InvalidTopicError(LogError):
    error_code = ErrorCode.invalid_topic_exception


class InvalidPartitionsError(LogError):
    error_code = ErrorCode.invalid_partitions


class InvalidConfigError(LogError):
    error_code = ErrorCode.invalid_config


class StorageError(LogError):
    """The disk failed under us (ENOSPC, EIO); what was being written has been rolled back."""

    error_code = ErrorCode.kafka_storage_error


class InvalidTxnStateError(LogError):
    """A producer with an open transaction in this partition wrote a non-transactional batch."""

    error_code = ErrorCode.invalid_txn_state


class TransactionCoordinatorFencedError(LogError):
    """A marker came from a coordinator older than the one that wrote this producer's last marker."""

    error_code = ErrorCode.transaction_coordinator_fenced
