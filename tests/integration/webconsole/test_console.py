"""`exactly console` in a headless chromium against a real broker: the pages show the cluster's
real data (a topic, a consumer group with lag, an ongoing transaction, producers), an in-doubt
2PC transaction is listed first and disappears once force-terminated through the UI with its
confirmation, a hanging transaction is aborted the same way, and a POST without the form's CSRF
token changes nothing."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By

from exactly.client import Admin, Consumer, NewTopic, Producer, TransactionSession
from exactly.protocol.structs import TopicPartition
from exactly.testing import EmbeddedBroker
from tests.helpers.webconsole.support import (
    browser,
    cells,
    click,
    console,
    csp_violations,
    text,
    wait_for,
)
from tests.integration.cli.test_transactions_cli import HANGING, _hanging_transaction

TOPIC = "console-orders"
IN_DOUBT = "spark-task-7"
ONGOING = "checkout"
GROUP = "billing"


@dataclass
class Cluster:
    broker: EmbeddedBroker
    url: str
    driver: Chrome
    hanging_producer: int


def _send(session: TransactionSession | None, bootstrap: str, values: list[str],
          partition: int) -> None:
    with Producer({"bootstrap.servers": bootstrap}, session=session) as producer:
        for value in values:
            producer.send(TOPIC, value, partition=partition)
        producer.flush()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # Without KIP-890 verification a hanging transaction can be made (tests/integration/cli does the
    # same).
    with EmbeddedBroker(settings={"transaction.partition.verification.enable": "false",
                                  "log.flush.policy": "os"}) as broker:
        bootstrap = broker.bootstrap
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topics([NewTopic(TOPIC, 3), NewTopic(HANGING, 1)])
        _send(None, bootstrap, [f"order-{i}" for i in range(5)], 0)
        # A live member of a group that committed 2 of partition 0's 5 records: lag 3.
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([TOPIC])
        wait = 0
        while not consumer.assignment() and wait < 100:
            consumer.poll(100)
            wait += 1
        consumer.commit({(TOPIC, 0): 2})
        # An ordinary transaction left open, and a prepared 2PC one whose client went away.
        ongoing = TransactionSession({"bootstrap.servers": bootstrap, "transactional.id": ONGOING,
                                      "transaction.timeout.ms": 120_000})
        ongoing.initialize()
        ongoing.begin_transaction()
        _send(ongoing, bootstrap, ["cart"], 1)
        prepared = TransactionSession({"bootstrap.servers": bootstrap,
                                       "transactional.id": IN_DOUBT,
                                       "transaction.two.phase.commit.enable": True})
        prepared.initialize()
        prepared.begin_transaction()
        _send(prepared, bootstrap, ["a", "b", "c"], 2)
        prepared.prepare_transaction()
        prepared.close()
        hanging_producer, _epoch = _hanging_transaction(broker)
        driver = browser()
        try:
            with console(bootstrap) as url:
                yield Cluster(broker, url, driver, hanging_producer)
        finally:
            driver.quit()
            consumer.close()
            ongoing.close()


def _row(driver: Chrome, txn_id: str) -> str:
    return text(driver, f'tr[data-transactional-id="{txn_id}"]')


def test_pages_show_the_cluster(cluster: Cluster) -> None:
    d = cluster.driver
    d.get(cluster.url)
    assert wait_for(d, "the in-doubt count", lambda: text(d, "#in-doubt-count") == "1")
    assert IN_DOUBT in text(d, "main")

    d.get(f"{cluster.url}/topics")
    row = f'tr[data-topic="{TOPIC}"][data-partition="0"]'
    assert cells(d, row, ".log-start", ".end", ".lso") == ("0", "5", "5")
    assert cells(d, row, ".size")[0].endswith("B")
    # Internal topics are one summary row each, not 50 partitions.
    assert "__consumer_offsets" in text(d, "#internal-topics")
    assert not d.find_elements(By.CSS_SELECTOR, '#partitions tr[data-topic="__consumer_offsets"]')
    # The prepared transaction holds partition 2's LSO at its first offset.
    held = f'tr[data-topic="{TOPIC}"][data-partition="2"]'
    assert cells(d, held, ".end", ".lso") == ("3", "0")

    d.get(f"{cluster.url}/groups")
    group = text(d, f'section[data-group-id="{GROUP}"]')
    assert "lag 3" in group and "Stable" in group and f"{TOPIC}-0" in group

    d.get(f"{cluster.url}/transactions")
    assert "Ongoing" in _row(d, ONGOING) and f"{TOPIC}-1" in _row(d, ONGOING)

    d.get(f"{cluster.url}/producers")
    assert ONGOING in text(d, "#producers") and IN_DOUBT in text(d, "#producers")


def test_in_doubt_first_then_force_terminated_through_the_ui(cluster: Cluster) -> None:
    d = cluster.driver
    d.get(f"{cluster.url}/transactions")
    first = "#transactions tbody tr:first-child"
    assert d.find_elements(By.CSS_SELECTOR, f'{first}[data-transactional-id="{IN_DOUBT}"]')
    row = text(d, first)
    assert "in doubt" in row and "yes" in row
    assert cells(d, first, ".held-back") == ("3",)

    click(d, f'tr[data-transactional-id="{IN_DOUBT}"] a.terminate')
    wait_for(d, "the confirmation", lambda: text(d, "#confirm-target") == IN_DOUBT)
    page = text(d, "main")
    assert "overrides its coordinator" in page and "aborted" in page and "fenced" in page
    assert "holding the LSO 3 offsets back" in page
    click(d, "#confirm")
    wait_for(d, "the result", lambda: "Terminated" in text(d, ".flash.ok"))
    assert d.current_url.endswith("/transactions")
    wait_for(d, "no in-doubt row", lambda: not d.find_elements(By.CSS_SELECTOR, "tr.in-doubt"))
    # Fenced by an InitProducerId: idle again (Empty), nothing open.
    assert _row(d, IN_DOUBT).split()[1] in ("CompleteAbort", "Empty")
    assert "terminate" not in _row(d, IN_DOUBT).lower()
    with Admin({"bootstrap.servers": cluster.broker.bootstrap}) as admin:
        assert admin.describe_transactions([IN_DOUBT])[IN_DOUBT].state in ("CompleteAbort",
                                                                          "Empty")
    d.get(f"{cluster.url}/topics")
    held = f'tr[data-topic="{TOPIC}"][data-partition="2"]'
    assert cells(d, held, ".lso") == ("4",)  # past the abort marker


def test_a_hanging_transaction_is_aborted_through_the_ui(cluster: Cluster) -> None:
    d = cluster.driver
    d.get(f"{cluster.url}/transactions")
    assert f"{HANGING}-0" in text(d, "#hanging")
    click(d, "#hanging a.abort")
    wait_for(d, "the confirmation",
             lambda: text(d, "#confirm-target") == str(cluster.hanging_producer))
    assert "abort marker" in text(d, "main")
    click(d, "#confirm")
    wait_for(d, "the result", lambda: "Aborted" in text(d, ".flash.ok"))
    wait_for(d, "no hanging row", lambda: "None." in text(d, "#hanging"))
    with Admin({"bootstrap.servers": cluster.broker.bootstrap}) as admin:
        (state,) = admin.describe_producers([(HANGING, 0)])[TopicPartition(HANGING, 0)]
    assert state.current_txn_start_offset == -1


def test_the_page_refreshes_by_itself(cluster: Cluster) -> None:
    bootstrap = cluster.broker.bootstrap
    d = cluster.driver
    session = TransactionSession({"bootstrap.servers": bootstrap, "transactional.id": "refresh",
                                  "transaction.timeout.ms": 60_000})
    try:
        session.initialize()
        session.begin_transaction()
        _send(session, bootstrap, ["x"], 1)
        d.get(f"{cluster.url}/transactions")
        assert "Ongoing" in _row(d, "refresh")
        d.execute_script("window.notReloaded = true")
        session.commit_transaction()
        wait_for(d, "the row to refresh", lambda: "CompleteCommit" in _row(d, "refresh"))
        assert d.execute_script("return window.notReloaded") is True  # htmx swapped it in
    finally:
        session.close()
    assert csp_violations(d) == []


def test_a_post_without_the_csrf_token_changes_nothing(cluster: Cluster) -> None:
    form = urllib.parse.urlencode({"transactional_id": ONGOING, "csrf_token": "guess"}).encode()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{cluster.url}/terminate", data=form, timeout=10)
    assert refused.value.code == 403
    assert "CSRF" in refused.value.read().decode()
    with Admin({"bootstrap.servers": cluster.broker.bootstrap}) as admin:
        assert admin.describe_transactions([ONGOING])[ONGOING].state == "Ongoing"


def test_everything_is_escaped(cluster: Cluster) -> None:
    d = cluster.driver
    d.get(f"{cluster.url}/terminate?transactional_id=" + urllib.parse.quote("<b id=x>hi</b>"))
    assert text(d, "#confirm-target") == "<b id=x>hi</b>"
    assert not d.find_elements(By.ID, "x")
