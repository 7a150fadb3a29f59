"""The web console's ASGI application (Starlette, Jinja2 templates, htmx polling).

Pages: overview, topics and partitions, transactions (in-doubt 2PC ones first), consumer groups,
producers per partition. Each page's live part is also served alone under /fragment/<page>,
which htmx fetches every `refresh_s` seconds; without JavaScript the page is still whole.

Actions (force-terminate, abort a hanging transaction) are a GET that shows a confirmation naming
what will happen, then a POST carrying the session's CSRF token. They run with the acting user's
credentials (see sessions.py for why the password is kept server-side): on a SASL listener the
user logs in first, and the broker's ACLs decide. Templates autoescape everything; responses
carry a Content-Security-Policy that allows only this origin's scripts and styles.
"""

from __future__ import annotations

import contextlib
import datetime
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from exactly.client.admin import AsyncAdmin
from exactly.webconsole import actions, gather
from exactly.webconsole.sessions import DEFAULT_IDLE_TIMEOUT_S, Login, Session, SessionStore

HERE = Path(__file__).parent
COOKIE = "exactly_console"
MAX_FORM_BYTES = 64 * 1024
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    """settings: the console's own client settings (bootstrap.servers, security, its reading
    credentials). On a SASL listener, users log in to act."""

    settings: Mapping[str, Any]
    refresh_s: float = 3.0
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S

    @property
    def needs_login(self) -> bool:
        return str(self.settings.get("security.protocol", "")).upper().startswith("SASL")


# -- formatting, for the templates -----------------------------------------------------------------

def duration(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    seconds = ms // 1000
    if seconds < 60:
        return f"{seconds}s" if seconds else f"{ms}ms"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours < 48 else f"{hours // 24}d {hours % 24}h"


def size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def timestamp(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def dash(value: object) -> object:
    return "-" if value is None else value


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    env.filters.update(duration=duration, size=size, timestamp=timestamp, dash=dash)
    return Jinja2Templates(env=env)


# -- the application ---------------------------------------------------------------------------------

PAGES = ("overview", "topics", "transactions", "groups", "producers")


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _page_data(admin: AsyncAdmin, page: str) -> dict[str, Any]:
    match page:
        case "overview":
            return {"view": await gather.overview_view(admin, _now_ms())}
        case "topics":
            return {"view": await gather.topics_view(admin)}
        case "transactions":
            return {"view": await gather.transactions_view(admin, _now_ms())}
        case "groups":
            return {"view": await gather.groups_view(admin)}
        case "producers":
            return {"view": await gather.producers_view(admin)}
    raise KeyError(page)


def _safe_next(target: str | None) -> str:
    """Only a path of this site: never another origin (an open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


async def _form(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return {}
    return {k: v[0] for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace")).items()}


def create_app(config: ConsoleConfig) -> Starlette:
    templates = _templates()
    store = SessionStore(idle_timeout_s=config.idle_timeout_s)
    state: dict[str, AsyncAdmin] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        state["admin"] = AsyncAdmin(dict(config.settings))
        try:
            yield
        finally:
            await state["admin"].close()

    def session_of(request: Request) -> Session:
        session: Session = request.state.session
        return session

    def render(request: Request, name: str, status: int = 200, **context: Any) -> Response:
        session = session_of(request)
        context.update(
            session=session, login=session.login, needs_login=config.needs_login,
            refresh_s=config.refresh_s,
            # A fragment's poll must not take the messages meant for the next page.
            flash=[] if name.endswith("_body.html") else session.take_flash(),
            bootstrap=config.settings.get("bootstrap.servers", ""), pages=PAGES,
            idle_minutes=int(config.idle_timeout_s // 60),
            current_path=request.url.path + (f"?{request.url.query}" if request.url.query else ""))
        return templates.TemplateResponse(request, name, context, status_code=status)

    async def page(request: Request) -> Response:
        """A whole page, or under /fragment/ its live part alone (what htmx polls)."""
        name = request.path_params.get("page", "overview")
        fragment = request.url.path.startswith("/fragment/")
        if name not in PAGES:
            return HTMLResponse("", 404) if fragment else render(
                request, "message.html", 404, title="Not found",
                message=f"There is no page {name!r}.")
        data = await _page_data(state["admin"], name)
        return render(request, f"{name}_body.html" if fragment else f"{name}.html", page=name,
                      **data)

    def actor(session: Session) -> actions.Actor:
        return actions.Actor(config.settings, session.login)

    def login_first(request: Request) -> Response | None:
        if config.needs_login and session_of(request).login is None:
            target = urllib.parse.quote(request.url.path + "?" + request.url.query, safe="")
            if request.method == "POST":
                target = urllib.parse.quote("/transactions", safe="")
            return RedirectResponse(f"/login?next={target}", 303)
        return None

    async def params_of(request: Request) -> Mapping[str, str] | None:
        """A POST's form (None when its CSRF token is not the session's), or a GET's query."""
        if request.method != "POST":
            return request.query_params
        form = await _form(request)
        return form if store.csrf_ok(session_of(request), form.get("csrf_token")) else None

    async def act(request: Request, run: Callable[[actions.Actor], Awaitable[str]]
                  ) -> Response | actions.ActionError | None:
        """On a POST, `run` as the session's user: a redirect to the Transactions page with what
        was done, or the ActionError to show on the confirmation page. None on a GET."""
        if request.method != "POST":
            return None
        try:
            done = await run(actor(session_of(request)))
        except actions.ActionError as exc:
            return exc
        session_of(request).flash.append(("ok", done))
        return RedirectResponse("/transactions", 303)

    async def terminate(request: Request) -> Response:
        if (params := await params_of(request)) is None:
            return _csrf_refused(request)
        txn_id = params.get("transactional_id", "")
        if not txn_id:
            return render(request, "message.html", 400, title="Bad request",
                          message="A force-terminate needs a transactional_id: follow a link "
                                  "of the Transactions page.")
        if (redirect := login_first(request)) is not None:
            return redirect
        error = await act(request, lambda who: actions.force_terminate(who, txn_id))
        if isinstance(error, Response):
            return error
        view = await gather.transactions_view(state["admin"], _now_ms())
        txn = next((t for t in view.transactions if t.transactional_id == txn_id), None)
        return render(request, "confirm_terminate.html", _status(error), txn_id=txn_id, txn=txn,
                      error=error, actor=actor(session_of(request)).name, problems=view.problems)

    async def abort(request: Request) -> Response:
        if (params := await params_of(request)) is None:
            return _csrf_refused(request)
        try:
            topic, partition = params["topic"], int(params["partition"])
            producer_id, producer_epoch = int(params["producer_id"]), int(params["producer_epoch"])
        except (KeyError, ValueError):
            return render(request, "message.html", 400, title="Bad request",
                          message="An abort needs topic, partition, producer_id and "
                                  "producer_epoch (integers): follow a link of the "
                                  "Transactions page.")
        if (redirect := login_first(request)) is not None:
            return redirect
        error = await act(request, lambda who: actions.abort_hanging(
            who, topic, partition, producer_id, producer_epoch))
        if isinstance(error, Response):
            return error
        view = await gather.transactions_view(state["admin"], _now_ms())
        hanging = next((h for h in view.hanging if h.tp == (topic, partition)
                        and h.producer.producer_id == producer_id), None)
        return render(request, "confirm_abort.html", _status(error), topic=topic,
                      partition=partition, producer_id=producer_id,
                      producer_epoch=producer_epoch, hanging=hanging, error=error,
                      actor=actor(session_of(request)).name, problems=view.problems)

    async def login(request: Request) -> Response:
        session = session_of(request)
        if request.method == "GET":
            return render(request, "login.html", next=_safe_next(request.query_params.get("next")),
                          error=None, username="")
        form = await _form(request)
        if not store.csrf_ok(session, form.get("csrf_token")):
            return _csrf_refused(request)
        target = _safe_next(form.get("next"))
        username, password = form.get("username", "").strip(), form.get("password", "")
        if not config.needs_login:
            return RedirectResponse(target, 303)
        problem = ("give a user name and a password" if not username or not password
                   else await actions.check_login(config.settings, Login(username, password)))
        if problem is not None:
            return render(request, "login.html", 401, next=target, error=problem,
                          username=username)
        request.state.session = store.log_in(session, Login(username, password), time.monotonic())
        return RedirectResponse(target, 303)

    async def logout(request: Request) -> Response:
        form = await _form(request)
        if not store.csrf_ok(session_of(request), form.get("csrf_token")):
            return _csrf_refused(request)
        request.state.session = store.log_out(session_of(request), time.monotonic())
        return RedirectResponse("/", 303)

    def _csrf_refused(request: Request) -> Response:
        return render(request, "message.html", 403, title="Refused",
                      message="This form is out of date or did not come from this console "
                              "(its CSRF token does not match): reload the page and try again.")

    async def sessions_and_headers(request: Request, call_next: RequestResponseEndpoint
                                   ) -> Response:
        cookie = request.cookies.get(COOKIE)
        request.state.session = store.get(cookie, time.monotonic())
        response = await call_next(request)
        session: Session = request.state.session
        if session.session_id != cookie:
            response.set_cookie(COOKIE, session.session_id, httponly=True, samesite="strict",
                                secure=request.url.scheme == "https", path="/")
        for key, value in SECURITY_HEADERS.items():
            response.headers.setdefault(key, value)
        if not request.url.path.startswith("/static/"):
            response.headers["Cache-Control"] = "no-store"
        return response

    routes = [
        Route("/", page),
        Route("/fragment/{page}", page),
        Route("/terminate", terminate, methods=["GET", "POST"]),
        Route("/abort", abort, methods=["GET", "POST"]),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        Route("/{page}", page),
    ]
    middleware: list[Middleware] = [Middleware(BaseHTTPMiddleware,
                                               dispatch=sessions_and_headers)]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)


def _status(error: actions.ActionError | None) -> int:
    if error is None:
        return 200
    return 403 if error.refused else 409

