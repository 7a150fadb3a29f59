"""The conformance corpus (tests/helpers/conformance/corpus), played against Apache Kafka 4.4 and
Exactly side by side: every answer equal after normalizing, or a listed deliberate divergence.

One Kafka node and one Exactly broker serve every case (module-scoped): each case uses names of
its own. With EXACTLY_CONFORMANCE_OUT set, each case's pairs are written there as
JSON (tests/helpers/conformance/report.py reads them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from exactly.testing import EmbeddedBroker
from tests.helpers.conformance import corpus  # noqa: F401  (registers the cases)
from tests.helpers.conformance.divergences import DELIBERATE, explain
from tests.helpers.conformance.harness import CASES, CaseResult, Target, run_case
from tests.rigs.kafka import ApacheKafka

# Played in `make test`'s second part, alone on the machine: Kafka's share-group machinery makes
# records available after writes of its own (__share_group_state), and on a machine whose cores
# the parallel part keeps busy those came later than the share_groups cases wait (60-120 s), in
# two full runs out of two; alone, every run passed.
pytestmark = pytest.mark.serial

# Exactly as Kafka runs in these tests: page-cache durability (Kafka's default), and the same
# group settings as tests.rigs.kafka gives Kafka.
EXACTLY_SETTINGS = {"log.flush.policy": "os", "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def kafka() -> Iterator[ApacheKafka]:
    with ApacheKafka() as k:
        yield k


@pytest.fixture(scope="module")
def exactly() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings=EXACTLY_SETTINGS) as b:
        yield b


def write_result(result: CaseResult, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{result.name}.json").write_text(json.dumps({
        "case": result.name,
        "error": result.error,
        "pairs": [{"label": p.label, "kafka": p.kafka, "exactly": p.exactly,
                   "differences": [{"path": d.path, "kafka": d.kafka, "exactly": d.exactly,
                                    "deliberate": (div.reason if (div := explain(
                                        result.name, p.label, d)) else None)}
                                   for d in p.differences]}
                  for p in result.pairs],
    }, indent=1, default=str))


@pytest.mark.parametrize("name", sorted(CASES))
def test_conformance(name: str, kafka: ApacheKafka, exactly: EmbeddedBroker) -> None:
    result = run_case(CASES[name], Target("kafka", "127.0.0.1", kafka.ports[1]),
                      Target("exactly", exactly.host, exactly.port))
    if os.environ.get("EXACTLY_CONFORMANCE_OUT"):
        write_result(result, Path(os.environ["EXACTLY_CONFORMANCE_OUT"]))
    assert result.error is None, result.error
    assert result.pairs, f"case {name} recorded nothing"
    unexplained = []
    used = set()
    for p in result.pairs:
        for d in p.differences:
            div = explain(name, p.label, d)
            if div is None:
                unexplained.append(f"  [{p.label}] {d}")
            else:
                used.add(div)
    assert not unexplained, (f"{name}: answers differ from Apache Kafka 4.4's\n"
                             + "\n".join(unexplained))
    listed = [d for d in DELIBERATE if d.case == name]
    stale = [d for d in listed if d not in used]
    assert not stale, f"{name}: listed divergences that no longer happen: {stale}"


def test_every_listed_divergence_names_a_case_and_a_reason() -> None:
    for d in DELIBERATE:
        assert d.case in CASES, d
        assert d.reason.strip(), d
