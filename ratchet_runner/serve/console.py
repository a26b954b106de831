"""The operator console: server-rendered pages over the same library the API and the CLI use.

Pages: the queue (decisions waiting, with the exact arguments and the digest being approved, and
runs waiting for a person, with what to do and the evidence), the runs list with filters, a run's
page (its trace as a timeline, its effects, its state diagram with the current state
emphasised, and the buttons its status and the operator's roles allow), and each spec's table and
diagrams (:mod:`~ratchet_runner.serve.console_pages`, which also lists the routes). No
JavaScript: links, forms and buttons, usable by keyboard. This module is the machinery they share:
signing in and out, the wrappers of pages and forms, the forms' actions, rendering, diagrams.

An operator signs in with their token (:mod:`~ratchet_runner.serve.sessions`); every form carries
the session's CSRF token, and a POST without it, or from another origin, changes nothing. The
actor and role of every decision and action are the signed-in operator's
(:mod:`~ratchet_runner.serve.acting`), recorded with ``via: console`` and where the request came
from.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlsplit

import jinja2
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..errors import GraphvizNotFound, RatchetError
from ..review.views import age, diagram_svg, relative, when
from ..session import acting_from
from ..words import RunStatus
from .acting import Refusal, decide, operate
from .operators import token_digest
from .service import INTERNAL, Service, log_bug, status_of
from .sessions import COOKIE, LOGIN_COOKIE, Session, same_token

if TYPE_CHECKING:
    from ..spec.model import Spec

#: The pages' security policy: nothing but the service's own style sheet, no script at all,
#: forms only to the service, never framed.
PAGE_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
#: The operator actions a run's status allows (``ratchet ops``), in the order shown.
ACTIONS_BY_STATUS: Mapping[str, tuple[str, ...]] = {
    RunStatus.RUNNING: ("pause", "cancel"),
    RunStatus.WAITING: ("pause", "cancel"),
    RunStatus.NEEDS_PERSON: ("retry", "reconcile", "compensate", "cancel"),
    RunStatus.PAUSED: ("resume", "cancel"),
}
#: Runs per page in the lists.
PAGE_SIZE = 50


@cache
def templates() -> jinja2.Environment:

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("ratchet_runner.serve", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ago"] = age
    env.filters["when"] = when
    env.filters["pretty"] = lambda value: json.dumps(
        value, indent=2, sort_keys=True, ensure_ascii=False
    )
    env.filters["short"] = lambda text, n=12: str(text)[:n]
    env.filters["relative"] = relative
    env.filters["iso"] = _iso
    env.filters["ticks"] = _ticks
    return env


def _iso(epoch: float) -> str:
    """An epoch time as RFC 3339, for a ``<time datetime>``."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _ticks(text: str) -> Any:
    """``text``, escaped, with its `backticked` spans (a guard, in a verdict) as code."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an odd backtick: no spans
        return escape(text)
    return Markup("").join(
        Markup("<code>{}</code>").format(part) if i % 2 else escape(part)
        for i, part in enumerate(parts)
    )


def render(
    request: Request, name: str, context: Mapping[str, Any], status: int = 200
) -> HTMLResponse:
    session: Session | None = getattr(request.state, "session", None)
    page = (
        templates()
        .get_template(name)
        .render(
            **context,
            me=session.operator if session else None,
            csrf=session.csrf if session else "",
            flashes=session.take_flashes() if session else [],
            path=request.url.path,
        )
    )
    response = HTMLResponse(page, status_code=status)
    response.headers["content-security-policy"] = PAGE_POLICY
    # A browser sends "Origin: null" with a form under no-referrer: say the console's own
    # origin to itself (and to nobody else), so that a POST's origin can be checked.
    response.headers["referrer-policy"] = "same-origin"
    return response


def problem(request: Request, status: int, code: str, message: str, back: str = "/") -> Response:
    """An error page: what was refused, its code, and the way back; nothing changed."""
    return render(request, "error.html", {"code": code, "message": message, "back": back}, status)


# -- signing in ----------------------------------------------------------------------------------


def _secure(request: Request, service: Service) -> bool:
    """Whether the browser reached the service over HTTPS (directly, or through a trusted
    proxy that says so): the cookies are then marked ``Secure``."""
    if request.url.scheme == "https":
        return True
    peer = request.client.host if request.client else None
    forwarded = request.headers.get("x-forwarded-proto", "")
    return peer is not None and service.config.trusts(peer) and forwarded == "https"


def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a path of this service, never another site."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/queue"
    return target


def login_page(request: Request) -> Response:
    service: Service = request.app.state.service
    service.check_config()
    target = _safe_next(request.query_params.get("next"))
    if service.sessions.get(request.cookies.get(COOKIE)) is not None:
        return RedirectResponse(target, status_code=303)  # signed in already
    nonce = secrets.token_urlsafe(24)
    response = render(request, "login.html", {"nonce": nonce, "next": target})
    response.set_cookie(
        LOGIN_COOKIE,
        nonce,
        max_age=3600,
        httponly=True,
        samesite="strict",
        secure=_secure(request, service),
    )
    return response


def login(request: Request) -> Response:
    service: Service = request.app.state.service
    service.check_config()
    form = _form(request)
    if not same_token(form.get("nonce"), request.cookies.get(LOGIN_COOKIE)):
        return problem(
            request,
            403,
            "R200",
            "this sign-in form was not made here (or is too old): "
            "open the sign-in page again; nothing changed",
            "/login",
        )
    token = form.get("token", "").strip()
    operator = service.config.authenticate(f"Bearer {token}")
    if operator is None:
        service.count("denied:sign_in")
        return problem(request, 401, "R200", "that token is not an operator's", "/login")
    cookie, session = service.sessions.open(operator, token_digest(token))
    session.flash("ok", f"signed in as {operator.name} ({', '.join(operator.roles)})")
    response = RedirectResponse(_safe_next(form.get("next")), status_code=303)
    response.set_cookie(
        COOKIE, cookie, httponly=True, samesite="strict", secure=_secure(request, service)
    )
    response.delete_cookie(LOGIN_COOKIE)
    return response


def _form(request: Request) -> dict[str, str]:
    """The urlencoded form in the request's body (the last value of each field)."""
    raw = getattr(request.state, "body", b"")
    try:
        parsed = parse_qs(raw.decode("utf-8"), keep_blank_values=True, max_num_fields=50)
    except (UnicodeDecodeError, ValueError):
        return {}
    return {key: values[-1] for key, values in parsed.items()}


# -- wrappers: pages and actions ---------------------------------------------------------------

PageHandler = Callable[[Request, Service, Session], Response]


def page(handler: PageHandler) -> Callable[[Request], Response]:
    """A page for signed-in operators (others are sent to sign in first)."""

    def route(request: Request) -> Response:
        service: Service = request.app.state.service
        service.check_config()  # handlers run in the thread pool, off the event loop
        session = service.sessions.get(request.cookies.get(COOKIE))
        if session is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={quote(target)}", status_code=303)
        request.state.session = session
        try:
            return handler(request, service, session)
        except Refusal as refused:
            return problem(request, refused.status, refused.code, refused.message)
        except RatchetError as exc:
            return problem(request, status_of(exc), exc.code, exc.message)
        except Exception as exc:  # a bug: an error page here, one line in the log
            log_bug(exc)
            return problem(request, 500, "R000", INTERNAL)

    return route


def action(handler: Callable[[Request, Service, Session, dict[str, str]], str]) -> Any:
    """A form's POST: only with a session and its CSRF token, from this service's own pages;
    what ``handler`` did is said on the page it sends the browser to."""

    def route(request: Request) -> Response:
        service: Service = request.app.state.service
        service.check_config()  # handlers run in the thread pool, off the event loop
        session = service.sessions.get(request.cookies.get(COOKIE))
        form = _form(request)
        back = _safe_next(form.get("back")) if form.get("back") else "/queue"
        if session is None:
            service.count("denied:no_session")
            return problem(request, 403, "R200", "sign in first; nothing changed", "/login")
        request.state.session = session
        if not same_token(form.get("csrf"), session.csrf) or not _same_origin(request):
            service.count("denied:csrf")
            return problem(
                request,
                403,
                "R200",
                "this form was not sent from this console's own page (its token is missing or "
                "wrong): nothing changed",
                back,
            )
        peer = request.client.host if request.client else None
        address = service.config.client(peer, request.headers.get("x-forwarded-for"))
        try:
            with acting_from("console", address):
                said = handler(request, service, session, form)
        except Refusal as refused:
            return problem(request, refused.status, refused.code, refused.message, back)
        except RatchetError as exc:
            return problem(request, status_of(exc), exc.code, exc.message, back)
        except Exception as exc:  # a bug: an error page here, one line in the log
            log_bug(exc)
            return problem(request, 500, "R000", INTERNAL, back)
        session.flash("ok", said)
        return RedirectResponse(back, status_code=303)

    return route


def _same_origin(request: Request) -> bool:
    """Whether the request's Origin (when the browser sent one) is this service's own host."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


def logout(request: Request) -> Response:
    service: Service = request.app.state.service
    session = service.sessions.get(request.cookies.get(COOKIE))
    if session is not None and not same_token(_form(request).get("csrf"), session.csrf):
        service.count("denied:csrf")  # another site cannot sign an operator out either
        return problem(
            request,
            403,
            "R200",
            "this form was not sent from this console; you are still signed in",
            "/queue",
        )
    service.sessions.close(request.cookies.get(COOKIE))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE)
    return response


# -- the actions -------------------------------------------------------------------------------


def approve(request: Request, service: Service, session: Session, form: dict[str, str]) -> str:
    reference = request.path_params["run"]
    digest = form.get("digest") or None
    if digest is None:
        raise Refusal(400, "R200", "approve the arguments shown: the form has no digest")
    result = decide(
        service,
        session.operator,
        reference,
        "approve",
        role=form.get("role") or None,
        digest=digest,
    )
    return f"{reference}: {result.message}"


def reject(request: Request, service: Service, session: Session, form: dict[str, str]) -> str:
    reference = request.path_params["run"]
    reason = form.get("reason", "").strip() or None
    result = decide(
        service,
        session.operator,
        reference,
        "reject",
        role=form.get("role") or None,
        digest=form.get("digest") or None,
        reason=reason,
    )
    return f"{reference}: {result.message}"


def act(request: Request, service: Service, session: Session, form: dict[str, str]) -> str:
    reference, what = request.path_params["run"], request.path_params["action"]
    note = form.get("note", "").strip() or None
    result = operate(
        service, session.operator, reference, what, role=form.get("role") or None, note=note
    )
    return f"{reference}: {result.message}"


# -- diagrams ------------------------------------------------------------------------------------

_drawn: dict[tuple[str, str, str | None], str] = {}
_drawing = threading.Lock()


def diagram(spec: Spec, view: str, current: str | None = None) -> str | None:
    """The SVG ``ratchet diagram`` draws of ``spec`` (for the states view, with ``current``
    emphasised), ready to put in a page; drawn once per spec version, view and state. None
    when Graphviz's ``dot`` is not installed."""
    key = (spec.digest, view, current)
    with _drawing:
        found = _drawn.get(key)
    if found is not None:
        return found

    try:
        svg = diagram_svg(spec, view, current).decode("utf-8")
    except GraphvizNotFound:
        return None  # the page says so; nothing else on it needs Graphviz
    svg = svg[svg.index("<svg") :]  # no XML declaration or doctype inside a page
    with _drawing:
        if len(_drawn) > 512:
            _drawn.clear()
        _drawn[key] = svg
    return svg
