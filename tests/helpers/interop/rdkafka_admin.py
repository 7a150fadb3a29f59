"""librdkafka's rd_kafka_DeleteConsumerGroupOffsets through ctypes, on the librdkafka that
confluent-kafka bundles: its Python binding (2.16) does not expose delete_consumer_group_offsets,
and issue 17 asks for it from an unchanged librdkafka. Test support only."""

from __future__ import annotations

import ctypes
from pathlib import Path

import confluent_kafka

_LIBS = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"


class _TopicPartition(ctypes.Structure):  # rd_kafka_topic_partition_t
    _fields_ = [("topic", ctypes.c_char_p), ("partition", ctypes.c_int32),
                ("offset", ctypes.c_int64), ("metadata", ctypes.c_void_p),
                ("metadata_size", ctypes.c_size_t), ("opaque", ctypes.c_void_p),
                ("err", ctypes.c_int), ("_private", ctypes.c_void_p)]


class _TopicPartitionList(ctypes.Structure):  # rd_kafka_topic_partition_list_t
    _fields_ = [("cnt", ctypes.c_int), ("size", ctypes.c_int),
                ("elems", ctypes.POINTER(_TopicPartition))]


def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(next(_LIBS.glob("librdkafka*.so*"))))
    p, vp = ctypes.c_char_p, ctypes.c_void_p
    signatures = {
        "rd_kafka_conf_new": ([], vp),
        "rd_kafka_conf_set": ([vp, p, p, p, ctypes.c_size_t], ctypes.c_int),
        "rd_kafka_new": ([ctypes.c_int, vp, p, ctypes.c_size_t], vp),
        "rd_kafka_destroy": ([vp], None),
        "rd_kafka_queue_new": ([vp], vp),
        "rd_kafka_queue_destroy": ([vp], None),
        "rd_kafka_queue_poll": ([vp, ctypes.c_int], vp),
        "rd_kafka_event_destroy": ([vp], None),
        "rd_kafka_event_error": ([vp], ctypes.c_int),
        "rd_kafka_event_DeleteConsumerGroupOffsets_result": ([vp], vp),
        "rd_kafka_DeleteConsumerGroupOffsets_result_groups":
            ([vp, ctypes.POINTER(ctypes.c_size_t)], ctypes.POINTER(vp)),
        "rd_kafka_group_result_error": ([vp], vp),
        "rd_kafka_group_result_partitions": ([vp], ctypes.POINTER(_TopicPartitionList)),
        "rd_kafka_error_code": ([vp], ctypes.c_int),
        "rd_kafka_topic_partition_list_new": ([ctypes.c_int], vp),
        "rd_kafka_topic_partition_list_add": ([vp, p, ctypes.c_int32], vp),
        "rd_kafka_topic_partition_list_destroy": ([vp], None),
        "rd_kafka_DeleteConsumerGroupOffsets_new": ([p, vp], vp),
        "rd_kafka_DeleteConsumerGroupOffsets_destroy": ([vp], None),
        "rd_kafka_DeleteConsumerGroupOffsets": ([vp, ctypes.POINTER(vp), ctypes.c_size_t, vp,
                                                 vp], None),
    }
    for name, (args, result) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, result
    return lib


def delete_consumer_group_offsets(bootstrap: str, group: str,
                                  partitions: list[tuple[str, int]], timeout_s: float = 10.0,
                                  ) -> tuple[int, dict[tuple[str, int], int]]:
    """(the group's error code, {(topic, partition): error code}); librdkafka's codes are
    Kafka's for broker errors (0: none)."""
    lib = _library()
    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    assert lib.rd_kafka_conf_set(conf, b"bootstrap.servers", bootstrap.encode(), errstr,
                                 512) == 0, errstr.value
    rk = lib.rd_kafka_new(0, conf, errstr, 512)  # RD_KAFKA_PRODUCER; takes conf
    assert rk, errstr.value
    queue = lib.rd_kafka_queue_new(rk)
    tps = lib.rd_kafka_topic_partition_list_new(len(partitions))
    for topic, partition in partitions:
        lib.rd_kafka_topic_partition_list_add(tps, topic.encode(), partition)
    request = lib.rd_kafka_DeleteConsumerGroupOffsets_new(group.encode(), tps)
    lib.rd_kafka_topic_partition_list_destroy(tps)  # copied by _new
    event = None
    try:
        lib.rd_kafka_DeleteConsumerGroupOffsets(rk, (ctypes.c_void_p * 1)(request), 1, None,
                                                queue)
        event = lib.rd_kafka_queue_poll(queue, int(timeout_s * 1000))
        assert event, "no DeleteConsumerGroupOffsets result in time"
        top = lib.rd_kafka_event_error(event)
        if top:
            return top, {}
        result = lib.rd_kafka_event_DeleteConsumerGroupOffsets_result(event)
        count = ctypes.c_size_t()
        groups = lib.rd_kafka_DeleteConsumerGroupOffsets_result_groups(result,
                                                                       ctypes.byref(count))
        assert count.value == 1
        error = lib.rd_kafka_group_result_error(groups[0])
        code = lib.rd_kafka_error_code(error) if error else 0
        listed = lib.rd_kafka_group_result_partitions(groups[0])
        errors = {}
        if listed:
            for i in range(listed.contents.cnt):
                tp = listed.contents.elems[i]
                errors[(tp.topic.decode(), tp.partition)] = tp.err
        return code, errors
    finally:
        if event:
            lib.rd_kafka_event_destroy(event)
        lib.rd_kafka_DeleteConsumerGroupOffsets_destroy(request)
        lib.rd_kafka_queue_destroy(queue)
        lib.rd_kafka_destroy(rk)
