"""The console's browser sessions (exactly.webconsole.sessions), with time as a number."""

from __future__ import annotations

from exactly.webconsole.sessions import Login, SessionStore


def test_a_session_lives_while_used_and_expires_when_idle() -> None:
    store = SessionStore(idle_timeout_s=60)
    first = store.get(None, now=0)
    assert store.get(first.session_id, now=50) is first
    assert store.get(first.session_id, now=100) is first  # used at 50: still live
    later = store.get(first.session_id, now=161)
    assert later is not first and later.csrf_token != first.csrf_token
    assert len(store) == 1


def test_logging_in_replaces_the_id_and_token_and_logging_out_forgets_the_password() -> None:
    store = SessionStore()
    anonymous = store.get(None, now=0)
    anonymous.flash.append(("ok", "kept"))
    alice = store.log_in(anonymous, Login("alice", "secret"), now=1)
    assert alice.session_id != anonymous.session_id and alice.csrf_token != anonymous.csrf_token
    assert store.get(anonymous.session_id, now=2) is not alice  # the old id is gone
    assert store.get(alice.session_id, now=2).login == Login("alice", "secret")
    assert "secret" not in repr(alice)
    assert alice.take_flash() == [("ok", "kept")] and alice.take_flash() == []
    out = store.log_out(alice, now=3)
    assert out.login is None and store.get(alice.session_id, now=4).login is None


def test_the_csrf_token_must_match() -> None:
    store = SessionStore()
    session = store.get(None, now=0)
    assert store.csrf_ok(session, session.csrf_token)
    assert not store.csrf_ok(session, None)
    assert not store.csrf_ok(session, "")
    assert not store.csrf_ok(session, store.get(None, now=0).csrf_token)


def test_the_oldest_session_goes_when_there_are_too_many() -> None:
    store = SessionStore(max_sessions=2)
    a, b = store.get(None, now=0), store.get(None, now=1)
    store.get(None, now=2)
    assert len(store) == 2 and a.session_id not in store and b.session_id in store
