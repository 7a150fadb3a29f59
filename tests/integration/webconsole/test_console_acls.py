"""`exactly console` on a SASL listener with the broker's authorizer: the console reads as its
own (super) user, but an action runs with the credentials of the user logged in at the browser,
so the broker's ACLs decide. A user without the ACL is refused and sees why; one with it acts."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By

from exactly.client import Admin, NewTopic, Producer, TransactionSession
from exactly.client import admin as a
from exactly.testing import EmbeddedBroker
from tests.helpers.webconsole.support import browser, click, console, text, wait_for

USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
TXN_ID = "app"
TOPIC = "acl-orders"


@dataclass
class Cluster:
    broker: EmbeddedBroker
    url: str
    driver: Chrome


def settings(b: EmbeddedBroker, user: str, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": b.address("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user], **extra}


def _txn_state(b: EmbeddedBroker) -> str:
    with Admin(settings(b, "admin")) as admin:
        return admin.describe_transactions([TXN_ID])[TXN_ID].state


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    broker_settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.plain.users": ",".join(f"{u}:{p}" for u, p in USERS.items()),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin", "log.flush.policy": "os"}
    with EmbeddedBroker(settings=broker_settings) as b:
        with Admin(settings(b, "admin")) as admin:
            admin.create_topics([NewTopic(TOPIC, 1)])
            admin.create_acls([a.AclBinding(
                a.ResourceType.TRANSACTIONAL_ID, TXN_ID, a.PatternType.LITERAL, "User:alice",
                "*", a.AclOperation.WRITE, a.AclPermissionType.ALLOW)])
        session = TransactionSession(settings(b, "admin", **{
            "transactional.id": TXN_ID, "transaction.two.phase.commit.enable": True}))
        session.initialize()
        session.begin_transaction()
        with Producer(settings(b, "admin"), session=session) as producer:
            producer.send(TOPIC, "prepared", partition=0)
            session.prepare_transaction()
        session.close()
        config: Path = tmp_path_factory.mktemp("console") / "console.properties"
        config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                          'sasl.jaas.config=org.apache.kafka.common.security.plain.'
                          'PlainLoginModule required username="admin" password="admin-pw";\n')
        driver = browser()
        try:
            with console(b.address("SASL_PLAINTEXT"), "--command-config", str(config)) as url:
                yield Cluster(b, url, driver)
        finally:
            driver.quit()


def _log_in(c: Cluster, user: str, password: str) -> None:
    d = c.driver
    wait_for(d, "the login form", lambda: d.find_element(By.ID, "username"))
    d.find_element(By.ID, "username").send_keys(user)
    d.find_element(By.ID, "password").send_keys(password)
    click(d, "#log-in")


def _to_confirmation(c: Cluster) -> None:
    """A new browser session, on the in-doubt transaction's force-terminate confirmation."""
    d = c.driver
    d.get(c.url)
    d.delete_all_cookies()
    d.get(f"{c.url}/transactions")
    click(d, f'tr[data-transactional-id="{TXN_ID}"] a.terminate')


def test_acting_needs_a_login_and_a_wrong_password_is_refused(cluster: Cluster) -> None:
    d = cluster.driver
    _to_confirmation(cluster)
    wait_for(d, "the login page", lambda: "/login" in d.current_url)
    _log_in(cluster, "alice", "not-her-password")
    assert "did not accept user 'alice'" in wait_for(d, "the error",
                                                      lambda: text(d, "#login-error"))
    assert not d.find_elements(By.ID, "acting-user")


def test_a_user_without_the_acl_cannot_act_and_sees_why(cluster: Cluster) -> None:
    d = cluster.driver
    _to_confirmation(cluster)
    _log_in(cluster, "bob", USERS["bob"])
    wait_for(d, "the confirmation", lambda: text(d, "#confirm-target") == TXN_ID)
    assert text(d, "#acting-user") == "bob"
    click(d, "#confirm")
    error = wait_for(d, "the refusal", lambda: text(d, "#action-error"))
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in error and "User:bob" in error
    assert _txn_state(cluster.broker) == "Ongoing"


def test_a_user_with_the_acl_acts_with_her_own_credentials(cluster: Cluster) -> None:
    d = cluster.driver
    _to_confirmation(cluster)
    _log_in(cluster, "alice", USERS["alice"])
    wait_for(d, "the confirmation", lambda: text(d, "#confirm-target") == TXN_ID)
    click(d, "#confirm")
    done = wait_for(d, "the result", lambda: text(d, ".flash.ok"))
    assert "as User:alice" in done
    assert _txn_state(cluster.broker) in ("CompleteAbort", "Empty")
    click(d, "header form.inline button")  # log out
    wait_for(d, "the logout", lambda: not d.find_elements(By.ID, "acting-user"))
