"""Differential conformance: the same raw requests to Apache Kafka 4.4 and to Exactly, answers
compared field by field.

Theory of operation
-------------------
A *case* is a function of a `Session`: it sends requests with `s.call(...)` (kio entities built
from plain dicts, exact API versions) or `s.send_frame(...)` (any bytes, good or bad), and
records what it wants compared with `s.record(label, answer)`. The runner plays every case
once against each target, on fresh names (the same names on both: `s.name("t")`), and compares
the two recordings label by label after normalizing what must differ between two brokers:

- throttle times, hosts and ports: dropped;
- ids that each broker makes up (producer ids, member ids, topic ids, cluster ids, node ids):
  replaced by aliases in order of first appearance, `<producer_id#1>`, so that "the same id
  twice" and "a new id" still compare;
- wall-clock times (any field named *time* or *timestamp* holding a time within a day of now):
  `<now>`;
- error messages: `<message>` when there is one (Kafka's wording is its own), None stays None.

A difference left over is a bug in Exactly, or a deliberate choice listed in `divergences.py`
with the KIP that makes it so. A listed divergence that no longer happens fails too, so the
list never goes stale.

Cases must be deterministic on both brokers: wait for what they depend on (a coordinator, a
leader, markers written) with `s.until(...)` before recording.
"""

from __future__ import annotations

import fnmatch
import json
import re
import socket
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from exactly.protocol.apis import request_class
from exactly.protocol.framing import RequestHeader, decode_response, encode_request
from tests.helpers.conformance.wire import entity, plain

# -- cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str  # "area.what", e.g. "produce.bad_crc"
    run: Callable[[Session], None]
    doc: str


CASES: dict[str, Case] = {}


def case(name: str) -> Callable[[Callable[[Session], None]], Callable[[Session], None]]:
    """Register a case under `name` (unique; "area.what")."""

    def register(fn: Callable[[Session], None]) -> Callable[[Session], None]:
        if name in CASES:
            raise ValueError(f"conformance case {name!r} registered twice")
        CASES[name] = Case(name, fn, (fn.__doc__ or "").strip())
        return fn

    return register


# -- talking to a target ----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    name: str  # "kafka" or "exactly"
    host: str
    port: int

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


class Closed(Exception):
    """The broker closed the connection instead of answering."""


class Connection:
    """One TCP connection; requests numbered from 1."""

    def __init__(self, target: Target, timeout: float = 30.0, client_id: str = "conformance",
                 ) -> None:
        self.target = target
        self.client_id = client_id
        self.sock = socket.create_connection((target.host, target.port), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def call(self, api_key: int, version: int, fields: dict[str, Any]) -> dict[str, Any]:
        """A request built from plain fields; its answer as plain data."""
        request = entity(request_class(api_key, version), fields)
        self.correlation_id += 1
        frame = encode_request(
            RequestHeader(api_key, version, self.correlation_id, self.client_id), request)
        self.sock.sendall(frame)
        correlation_id, response = decode_response(api_key, version, self.read_frame())
        if correlation_id != self.correlation_id:
            raise AssertionError(f"correlation id {correlation_id}, sent {self.correlation_id}")
        return plain(response)  # type: ignore[no-any-return]

    def send_frame(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._read(4))[0]
        return self._read(size)

    def outcome(self, api_key: int, version: int, wait: float = 10.0) -> dict[str, Any] | str:
        """After a hand-made frame: its decoded answer, or "closed" when the broker closed the
        connection, or "no answer" when it did neither within `wait` seconds."""
        self.sock.settimeout(wait)
        try:
            frame = self.read_frame()
        except Closed:
            return "closed"
        except (ConnectionResetError, BrokenPipeError):
            return "closed"
        except TimeoutError:
            return "no answer"
        _cid, response = decode_response(api_key, version, frame)
        return plain(response)  # type: ignore[no-any-return]

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise Closed("connection closed by the broker")
            buf += chunk
        return bytes(buf)


def raw_frame(api_key: int, version: int, correlation_id: int, body: bytes,
              client_id: str | None = "conformance", flexible_header: bool = True) -> bytes:
    """A request frame with any body: header v2 (flexible) or v1, then `body` as given."""
    cid = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id)) + \
        client_id.encode()
    header = struct.pack(">hhi", api_key, version, correlation_id) + cid
    if flexible_header:
        header += b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


# -- a case's view of one target --------------------------------------------------------------


@dataclass
class Recorded:
    label: str
    answer: Any
    ignore: tuple[str, ...] = ()
    unordered: tuple[str, ...] = ()


class Session:
    """One case played against one target."""

    def __init__(self, case_name: str, target: Target) -> None:
        self.case_name = case_name
        self.target = target
        self.recorded: list[Recorded] = []
        self._conn: Connection | None = None
        self._opened: list[Connection] = []

    # names and connections

    def name(self, suffix: str = "t") -> str:
        """A topic/group/transactional id unique to this case, the same on both targets."""
        return re.sub(r"[^a-zA-Z0-9._-]", "-", f"c-{self.case_name}-{suffix}")

    @property
    def conn(self) -> Connection:
        """This session's first connection (opened on first use)."""
        if self._conn is None:
            self._conn = self.connect()
        return self._conn

    def connect(self, client_id: str = "conformance") -> Connection:
        c = Connection(self.target, client_id=client_id)
        self._opened.append(c)
        return c

    def close(self) -> None:
        for c in self._opened:
            c.close()

    # requests

    def call(self, api_key: int, version: int, fields: dict[str, Any] | None = None,
             conn: Connection | None = None) -> dict[str, Any]:
        return (conn or self.conn).call(api_key, version, fields or {})

    def record(self, label: str, answer: Any, *, ignore: Iterable[str] = (),
               unordered: Iterable[str] = ()) -> Any:
        """Keep `answer` for comparison under `label` (unique within the case).

        ignore: paths (fnmatch globs, e.g. "responses.*.partitions.*.log_start_offset") left out.
        unordered: paths of lists compared as multisets (e.g. "topics", "groups").
        """
        if any(r.label == label for r in self.recorded):
            raise ValueError(f"label {label!r} recorded twice in case {self.case_name}")
        self.recorded.append(Recorded(label, answer, tuple(ignore), tuple(unordered)))
        return answer

    def until(self, what: str, probe: Callable[[], Any], timeout: float = 30.0,
              interval: float = 0.1) -> Any:
        """Call probe() until it returns something truthy; that value. AssertionError on time."""
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.target.name}: {what} did not happen in {timeout:g}s"
                                     f" (last: {value!r})")
            time.sleep(interval)


# -- normalizing and comparing ----------------------------------------------------------------

DROPPED = {"throttle_time", "throttle_time_ms", "host", "port"}
ALIASED = {"producer_id", "member_id", "topic_id", "cluster_id", "node_id", "leader_id",
           "controller_id", "broker_id", "coordinator_id", "session_id", "memberid",
           "pending_member_id", "group_instance_id_generated", "incarnation_id"}
NO_ID = {-1, 0, None, "", "00000000-0000-0000-0000-000000000000",
         "AAAAAAAAAAAAAAAAAAAAAA"}
# Ids for which 0 is a real id (a fresh broker's first producer id is 0): only -1 means none.
ID_ZERO_VALID = {"producer_id"}
DAY_MS = 86_400_000


class Normalizer:
    def __init__(self) -> None:
        self.aliases: dict[tuple[str, Any], str] = {}
        self.counts: dict[str, int] = {}
        self.now = int(time.time() * 1000)

    def alias(self, key: str, value: Any) -> Any:
        if (value in NO_ID and not (key in ID_ZERO_VALID and value == 0)) or (
                key == "node_id" and value == -1):
            return value
        kind = "node_id" if key in {"node_id", "leader_id", "controller_id", "broker_id",
                                    "coordinator_id"} else key
        got = self.aliases.get((kind, value))
        if got is None:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            got = f"<{kind}#{self.counts[kind]}>"
            self.aliases[(kind, value)] = got
        return got

    def __call__(self, value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: self(v, k) for k, v in value.items() if k not in DROPPED}
        if isinstance(value, list):
            return [self(v, key) for v in value]
        if key in ALIASED:
            return self.alias(key, value)
        if key == "error_message" or key.endswith("_error_message"):
            return None if value is None else "<message>"
        if (isinstance(value, int) and not isinstance(value, bool)
                and ("time" in key or "timestamp" in key)
                and abs(value - self.now) < DAY_MS):
            return "<now>"
        return value


@dataclass(frozen=True)
class Difference:
    path: str
    kafka: Any
    exactly: Any

    def __str__(self) -> str:
        return (f"{self.path}: Kafka {json.dumps(self.kafka, default=str)} / "
                f"Exactly {json.dumps(self.exactly, default=str)}")


def _drop(value: Any, patterns: tuple[str, ...], path: str = "") -> Any:
    if not patterns:
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            p = f"{path}.{k}" if path else k
            if any(fnmatch.fnmatchcase(p, pat) for pat in patterns):
                continue
            out[k] = _drop(v, patterns, p)
        return out
    if isinstance(value, list):
        return [_drop(v, patterns, f"{path}.{i}" if path else str(i))
                for i, v in enumerate(value)]
    return value


def _sort(value: Any, patterns: tuple[str, ...], path: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _sort(v, patterns, f"{path}.{k}" if path else k) for k, v in value.items()}
    if isinstance(value, list):
        items = [_sort(v, patterns, f"{path}.*" if path else "*") for v in value]
        if any(fnmatch.fnmatchcase(path, pat) for pat in patterns):
            items.sort(key=lambda v: json.dumps(v, sort_keys=True, default=str))
        return items
    return value


def prepare(r: Recorded, normalize: Normalizer) -> Any:
    return _sort(_drop(normalize(r.answer), r.ignore), r.unordered)


def differences(kafka: Any, exactly: Any, path: str = "") -> list[Difference]:
    if isinstance(kafka, dict) and isinstance(exactly, dict):
        out = []
        for k in list(kafka) + [k for k in exactly if k not in kafka]:
            p = f"{path}.{k}" if path else k
            if k not in kafka or k not in exactly:
                out.append(Difference(p, kafka.get(k, "<absent>"), exactly.get(k, "<absent>")))
            else:
                out += differences(kafka[k], exactly[k], p)
        return out
    if isinstance(kafka, list) and isinstance(exactly, list):
        key = _list_key(kafka, exactly)
        if key is not None:
            return _keyed_differences(key, kafka, exactly, path)
        if len(kafka) != len(exactly):
            return [Difference(f"{path}[len]" if path else "[len]", kafka, exactly)]
        out = []
        for i, (a, b) in enumerate(zip(kafka, exactly, strict=True)):
            out += differences(a, b, f"{path}.{i}" if path else str(i))
        return out
    return [] if kafka == exactly else [Difference(path or "<answer>", kafka, exactly)]


# Fields that name an element of a list: lists of dicts that all carry one of these (with
# distinct values) are compared element by element by that key, whatever their lengths.
LIST_KEYS = ("api_key", "name", "topic", "topic_name", "partition_index", "partition",
             "partition_id", "group_id", "transactional_id", "resource_name", "key", "node_id",
             "principal", "user")


def _list_key(a: list[Any], b: list[Any]) -> str | None:
    items = a + b
    if not items or not all(isinstance(v, dict) for v in items):
        return None
    for key in LIST_KEYS:
        if (all(key in v for v in items)
                and len({json.dumps(v[key], default=str) for v in a}) == len(a)
                and len({json.dumps(v[key], default=str) for v in b}) == len(b)):
            return key
    return None


def _keyed_differences(key: str, kafka: list[Any], exactly: list[Any], path: str,
                       ) -> list[Difference]:
    ka = {json.dumps(v[key], default=str): v for v in kafka}
    ex = {json.dumps(v[key], default=str): v for v in exactly}
    out = []
    for k in list(ka) + [k for k in ex if k not in ka]:
        p = f"{path}[{key}={k}]"
        if k not in ka or k not in ex:
            out.append(Difference(p, ka.get(k, "<absent>"), ex.get(k, "<absent>")))
        else:
            out += differences(ka[k], ex[k], p)
    if not out and list(ka) != list(ex):
        out.append(Difference(f"{path}[order by {key}]", list(ka), list(ex)))
    return out


@dataclass(frozen=True)
class Divergence:
    case: str  # the case's name
    label: str  # fnmatch glob on the recorded label
    path: str  # fnmatch glob on the difference's path
    reason: str  # why Exactly differs: the KIP, or the design choice and where it is written

    def explains(self, case: str, label: str, d: Difference) -> bool:
        return (case == self.case and fnmatch.fnmatchcase(label, self.label)
                and fnmatch.fnmatchcase(d.path, self.path))


# -- running a case on both targets -----------------------------------------------------------


@dataclass
class Pair:
    label: str
    kafka: Any
    exactly: Any
    differences: list[Difference] = field(default_factory=list)


@dataclass
class CaseResult:
    name: str
    pairs: list[Pair]
    error: str | None = None  # a case that failed on a target before recording everything

    @property
    def equal(self) -> int:
        return sum(1 for p in self.pairs if not p.differences)


def play(c: Case, target: Target) -> Session:
    s = Session(c.name, target)
    try:
        c.run(s)
    finally:
        s.close()
    return s


def run_case(c: Case, kafka: Target, exactly: Target) -> CaseResult:
    """Play `c` on Kafka, then on Exactly, and pair the recordings by label."""
    sessions = {}
    for target in (kafka, exactly):
        try:
            sessions[target.name] = play(c, target)
        except Exception as exc:  # noqa: BLE001  (a case that breaks on a target is a finding)
            return CaseResult(c.name, [], f"{target.name}: {type(exc).__name__}: {exc}")
    k, e = sessions[kafka.name], sessions[exactly.name]
    klabels = [r.label for r in k.recorded]
    elabels = [r.label for r in e.recorded]
    if klabels != elabels:
        return CaseResult(c.name, [], f"recorded labels differ: Kafka {klabels} / "
                                      f"Exactly {elabels}")
    nk, ne = Normalizer(), Normalizer()
    pairs = []
    for rk, re_ in zip(k.recorded, e.recorded, strict=True):
        a, b = prepare(rk, nk), prepare(re_, ne)
        pairs.append(Pair(rk.label, a, b, differences(a, b)))
    return CaseResult(c.name, pairs)
