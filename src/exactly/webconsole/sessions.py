"""Browser sessions of the web console: a CSRF token per browser and, on a SASL listener, the
login of the user at that browser. Kept in the console process's memory only.

Theory of operation
-------------------

A browser gets a session on its first request: a random id in a cookie (HttpOnly,
SameSite=Strict) and a random CSRF token that every form carries back. A POST whose token does
not match its session's is refused, so another site cannot make the browser act.

On a SASL listener the broker decides what a user may do, so an action runs with that user's
credentials, not the console's. The user logs in once; the password stays here, server-side,
because SASL needs it again for each connection an action opens. It never goes to the browser,
a log or a disk, and it is dropped on logout, after `idle_timeout_s` without a request, and when
the console stops. Asking for the password on every action would keep it for less time, but an
operator ending several in-doubt transactions would type it each time; the idle timeout bounds
what a forgotten browser can do.

Logging in replaces the session id and the CSRF token (no session fixation). Time is passed in
(sans-IO), so expiry is tested without waiting.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

DEFAULT_IDLE_TIMEOUT_S = 30 * 60.0
DEFAULT_MAX_SESSIONS = 10_000


@dataclass(frozen=True, slots=True)
class Login:
    """Who acts in this browser: SASL credentials the broker checks."""

    username: str
    password: str = field(repr=False)


@dataclass(slots=True)
class Session:
    session_id: str
    csrf_token: str
    last_used: float
    login: Login | None = None
    # Messages for the next page shown: (kind, text), kind "ok" or "error".
    flash: list[tuple[str, str]] = field(default_factory=list)

    def take_flash(self) -> list[tuple[str, str]]:
        out, self.flash = self.flash, []
        return out


def _new_id() -> str:
    return secrets.token_urlsafe(32)


class SessionStore:
    """The live sessions by id; an idle one expires, the oldest goes when there are too many."""

    def __init__(self, idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
                 max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.max_sessions = max_sessions
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def get(self, session_id: str | None, now: float) -> Session:
        """The live session of that id, used now; a new one if there is none."""
        self._expire(now)
        session = self._sessions.get(session_id) if session_id else None
        if session is None:
            session = self._add(Session(_new_id(), _new_id(), now))
        session.last_used = now
        return session

    def log_in(self, session: Session, login: Login, now: float) -> Session:
        """A new session (new id and CSRF token) holding `login`; the old one is gone."""
        self._sessions.pop(session.session_id, None)
        return self._add(Session(_new_id(), _new_id(), now, login, session.flash))

    def log_out(self, session: Session, now: float) -> Session:
        self._sessions.pop(session.session_id, None)
        return self._add(Session(_new_id(), _new_id(), now))

    @staticmethod
    def csrf_ok(session: Session, token: str | None) -> bool:
        return token is not None and secrets.compare_digest(session.csrf_token, token)

    def _add(self, session: Session) -> Session:
        while len(self._sessions) >= self.max_sessions:
            oldest = min(self._sessions.values(), key=lambda s: s.last_used)
            del self._sessions[oldest.session_id]
        self._sessions[session.session_id] = session
        return session

    def _expire(self, now: float) -> None:
        stale = [sid for sid, s in self._sessions.items()
                 if now - s.last_used > self.idle_timeout_s]
        for sid in stale:
            del self._sessions[sid]
