"""`create_dashboard_app`: the dashboard as an ASGI app to mount or to run alone."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from soniq import Soniq
from soniq.errors import JobOptionsError, MissingBackendRoleError
from soniq.observers import redact_data, redact_text, redact_url
from soniq_dashboard.access import HostGuard, ReadKeyGuard, UrlGuard
from soniq_dashboard.charts import Charts
from soniq_dashboard.metrics import MetricsEndpoint
from soniq_dashboard.reads import (
    COUNT_KEYS,
    STATUSES,
    DashboardReads,
    JobFilter,
    args_preview,
    first_line,
    require_dashboard_roles,
    run_words,
)
from soniq_dashboard.security import (
    API_KEY_FIELD,
    CSRF_COOKIE,
    CSRF_FIELD,
    Authorize,
    WriteGuard,
    WriteRefusedError,
    csrf_token_of,
    new_csrf_token,
)
from soniq_dashboard.snapshot import Refresher

HERE = Path(__file__).parent
MAX_FORM_BYTES = 64 * 1024
SECURITY_HEADERS = {
    # Defence in depth behind autoescaping: no inline script or style can run even if a value slipped through.
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
}


def _age(value: timedelta | None) -> str:
    if value is None:
        return "none"
    seconds = int(value.total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


def _utc(value: datetime) -> datetime:
    """Naive times from a store are UTC; aware ones are converted, so every time on a page is UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _when(value: Any) -> str:
    """Every timestamp the dashboard shows, in one format: ``2026-01-31 14:05:09 UTC``."""
    if isinstance(value, str):
        text: str = value
        try:
            value = datetime.fromisoformat(text)  # ISO times inside JSON records, such as a shutdown's path
        except ValueError:
            return text
    if isinstance(value, datetime):
        return _utc(value).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "" if value is None else str(value)


def _until(value: Any) -> str:
    """How far ahead `value` is, as `_age` words it."""
    if not isinstance(value, datetime):
        return ""
    return _age(max(timedelta(0), _utc(value) - datetime.now(UTC)))


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        age=_age,
        when=_when,
        until=_until,
        pretty=_pretty,
        preview=args_preview,
        first_line=first_line,
        # Job data shown on a page goes through these: a key named like a secret, a URL's password.
        masked=redact_data,
        masked_text=lambda value: redact_text(str(value)) if value else "",
    )
    env.globals["runs"] = run_words
    return env


class Dashboard:
    def __init__(
        self,
        app: Soniq,
        *,
        prefix: str,
        guard: WriteGuard,
        poll_interval: float,
        title: str,
    ) -> None:
        self.app = app
        self.metrics_endpoint = MetricsEndpoint(app)
        self.reads = DashboardReads(app)
        self.charts = Charts(poll_interval)
        self.overview_snapshot = Refresher(self.charts.sampling(self.reads.overview), poll_interval)
        self.prefix = prefix
        self.guard = guard
        self.poll_interval = poll_interval
        self.title = title
        self.env = _environment()

    def base(self, request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/") + self.prefix

    def render(self, request: Request, template: str, page: str, **context: Any) -> Response:
        token = csrf_token_of(request) or new_csrf_token()
        base = self.base(request)
        ctx = {
            "base": base,
            "page": page,
            "title": self.title,
            "store": redact_url(self.app.settings.resolved_database_url),
            "writes": self.guard.writes,
            "needs_key": self.guard.needs_key_field,
            "csrf_field": CSRF_FIELD,
            "csrf_token": token,
            "api_key_field": API_KEY_FIELD,
            "poll_ms": int(self.poll_interval * 1000),
            "now": datetime.now(UTC),
            "query": lambda **changes: self._query(request, changes),
            **context,
        }
        tmpl = self.env.get_template(template)
        if request.query_params.get("partial") == "live":
            # A page with nothing live (a confirmation, a refusal) answers its poll with an empty region.
            live = tmpl.blocks.get("live")
            body = "".join(live(tmpl.new_context(ctx))) if live is not None else ""
        else:
            body = tmpl.render(ctx)
        response = HTMLResponse(body, headers=SECURITY_HEADERS | {"cache-control": "no-store"})
        if csrf_token_of(request) is None:
            response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict", path=base or "/")
        return response

    @staticmethod
    def _query(request: Request, changes: dict[str, Any]) -> str:
        params = {k: v for k, v in request.query_params.items() if k != "partial"}
        for key, value in changes.items():
            if value in (None, ""):
                params.pop(key, None)
            else:
                params[key] = str(value)
        return "?" + urlencode(params) if params else "?"

    # -- pages -----------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        snapshot = await self.overview_snapshot.get()
        overview = snapshot.value
        # Read on every render, not with the counts' snapshot: a pause or resume shows at once.
        paused = await self.reads.paused_queues()
        queues = list(overview.queues)
        listed = {name for name, _ in queues}
        if paused and any(name not in listed for name in paused):  # a paused queue shows before its first job
            zero = dict.fromkeys(COUNT_KEYS, 0)
            queues = sorted(queues + [(name, dict(zero)) for name in paused if name not in listed])
        return self.render(
            request,
            "overview.html",
            "overview",
            overview=overview,
            queues=queues,
            paused=paused,
            as_of=snapshot.as_of,
            notice=request.query_params.get("notice") or "",
        )

    async def jobs(self, request: Request) -> Response:
        q = request.query_params
        status = q.get("status") if q.get("status") in STATUSES else None
        flt = JobFilter(status=status, queue=q.get("queue") or None, name=q.get("name") or None, search=q.get("q"))
        page = await self.reads.jobs_page(flt, cursor=q.get("after"))
        return self.render(
            request, "jobs.html", "jobs", flt=flt, result=page, statuses=STATUSES, queues=await self.reads.queue_names()
        )

    async def job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        detail = await self.reads.job(job_id)
        if detail is None:
            response = self.render(request, "missing.html", "jobs", job_id=job_id)
            response.status_code = 404
            return response
        return self.render(request, "job.html", "jobs", detail=detail)

    async def dead_letters(self, request: Request) -> Response:
        q = request.query_params
        page = await self.reads.dead_letters(
            queue=q.get("queue") or None, name=q.get("name") or None, cursor=q.get("after")
        )
        return self.render(
            request,
            "dead_letters.html",
            "dead-letters",
            result=page,
            queue=q.get("queue") or "",
            name=q.get("name") or "",
            notice=q.get("notice") or "",
        )

    async def confirm(self, request: Request) -> Response:
        """The confirmation step every dead-letter write goes through."""
        q = request.query_params
        action = q.get("action")
        if action not in ("replay", "purge"):
            return self._refuse(request, "unknown action", status=400)
        job_id = q.get("id") or ""
        if job_id:
            row = await self.app.dead_letter.get(job_id)
            rows = [row] if row else []
        else:
            rows = await self.reads.dead_letter_rows(queue=q.get("queue") or None, name=q.get("name") or None)
        return self.render(
            request,
            "confirm.html",
            "dead-letters",
            action=action,
            ids=[row["id"] for row in rows],
            rows=rows,
            complete=True,
            single=bool(job_id),
            queue=q.get("queue") or "",
            name=q.get("name") or "",
        )

    async def workers(self, request: Request) -> Response:
        return self.render(
            request,
            "workers.html",
            "workers",
            workers=await self.reads.workers(),
            heartbeat_timeout=self.app.settings.heartbeat_timeout,
        )

    async def schedules(self, request: Request) -> Response:
        return self.render(
            request,
            "schedules.html",
            "schedules",
            schedules=await self.reads.schedules(),
            notice=request.query_params.get("notice") or "",
        )

    async def favicon(self, request: Request) -> Response:
        """For clients that ask for ``/favicon.ico`` without reading the page's icon link: the same icon."""
        return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml", headers=SECURITY_HEADERS)

    async def metrics(self, request: Request) -> Response:
        rendered = await self.metrics_endpoint.render()
        if rendered is None:
            return PlainTextResponse("no Prometheus exporter for this app: pip install soniq-prometheus\n", 404)
        body, content_type = rendered
        return Response(body, headers={"Content-Type": content_type})

    async def health(self, request: Request) -> Response:
        return JSONResponse({"ok": True, "stats": await self.app.get_queue_stats()})

    # -- writes ----------------------------------------------------------------

    async def bad_filter(self, request: Request, exc: Exception) -> Response:
        """A filter the store's reads refuse (a queue name no queue can have): 400 saying why, not a 500."""
        return self._refuse(request, f"this filter can match nothing: {redact_text(str(exc))}", status=400)

    def _refuse(self, request: Request, reason: str, *, status: int = 403) -> Response:
        response = self.render(request, "refused.html", "", reason=reason)
        response.status_code = status
        return response

    async def _form(self, request: Request) -> dict[str, str]:
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            raise WriteRefusedError("form too large")
        return dict(parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True))

    async def _guarded(self, request: Request) -> dict[str, str] | Response:
        try:
            form = await self._form(request)
            await self.guard.check(request, form)
        except WriteRefusedError as exc:
            return self._refuse(request, str(exc))
        return form

    async def dead_letter_action(self, request: Request) -> Response:
        form = await self._guarded(request)
        if isinstance(form, Response):
            return form
        action = form.get("action")
        if action not in ("replay", "purge"):
            return self._refuse(request, "unknown action", status=400)
        if form.get("id"):
            ids = [form["id"]]
        else:
            ids, _ = await self.reads.dead_letter_ids(queue=form.get("queue") or None, name=form.get("name") or None)
        done = 0
        for job_id in ids:
            if action == "replay":
                try:
                    await self.app.dead_letter.replay(job_id)
                except LookupError:
                    continue
                done += 1
            elif await self.app.dead_letter.purge(job_id):
                done += 1
        verb = "replayed" if action == "replay" else "purged"
        notice = f"{verb} {done} dead-letter job{'s' if done != 1 else ''}"
        return RedirectResponse(f"{self.base(request)}/dead-letters?{urlencode({'notice': notice})}", status_code=303)

    async def schedule_action(self, request: Request) -> Response:
        """Pause or resume one schedule: the row's button sends ``pause=<name>`` or ``resume=<name>``."""
        form = await self._guarded(request)
        if isinstance(form, Response):
            return form
        if form.get("pause"):
            name, verb = form["pause"], "paused"
            done = await self.app.scheduler.pause(name)
        elif form.get("resume"):
            name, verb = form["resume"], "resumed"
            done = await self.app.scheduler.resume(name)
        else:
            return self._refuse(request, "unknown action", status=400)
        notice = f"{verb} schedule {name}" if done else f"no schedule is named {name}: nothing changed"
        return RedirectResponse(f"{self.base(request)}/schedules?{urlencode({'notice': notice})}", status_code=303)

    async def queue_action(self, request: Request) -> Response:
        """Pause or resume one queue: the row's button sends ``pause=<queue>`` or ``resume=<queue>``
        (a pause may carry ``reason``)."""
        form = await self._guarded(request)
        if isinstance(form, Response):
            return form
        try:
            if form.get("pause"):
                name = form["pause"]
                reason = form.get("reason", "").strip() or None
                done = await self.app.pause_queue(name, reason=reason)
                notice = f"paused queue {name}" if done else f"queue {name} was already paused"
            elif form.get("resume"):
                name = form["resume"]
                done = await self.app.resume_queue(name)
                notice = f"resumed queue {name}" if done else f"queue {name} was not paused: nothing changed"
            else:
                return self._refuse(request, "unknown action", status=400)
        except (JobOptionsError, MissingBackendRoleError) as exc:
            return self._refuse(request, redact_text(str(exc)), status=400)
        return RedirectResponse(f"{self.base(request)}/?{urlencode({'notice': notice})}", status_code=303)

    async def cancel(self, request: Request) -> Response:
        form = await self._guarded(request)
        if isinstance(form, Response):
            return form
        job_id = request.path_params["job_id"]
        await self.app.cancel_job(job_id)
        return RedirectResponse(f"{self.base(request)}/jobs/{job_id}", status_code=303)

    def routes(self) -> list[BaseRoute]:
        pages: list[BaseRoute] = [
            Route("/", self.overview, name="overview"),
            Route("/jobs", self.jobs, name="jobs"),
            Route("/jobs/{job_id:path}/cancel", self.cancel, methods=["POST"]),
            Route("/jobs/{job_id:path}", self.job, name="job"),
            Route("/dead-letters", self.dead_letters, name="dead_letters"),
            Route("/dead-letters/confirm", self.confirm),
            Route("/dead-letters/action", self.dead_letter_action, methods=["POST"]),
            Route("/workers", self.workers, name="workers"),
            Route("/schedules", self.schedules, name="schedules"),
            *self.charts.routes(self, SECURITY_HEADERS),
            Route("/schedules/action", self.schedule_action, methods=["POST"]),
            Route("/queues/action", self.queue_action, methods=["POST"]),
            Route("/healthz", self.health),
            Route("/favicon.ico", self.favicon),
            Route("/metrics", self.metrics),
            Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
        ]
        return [Mount(self.prefix, routes=pages)] if self.prefix else pages


def create_dashboard_app(
    app: Soniq,
    *,
    prefix: str = "",
    writes: bool = False,
    api_key: str | None = None,
    authorize: Authorize | None = None,
    trusted_origins: Sequence[str] = (),
    poll_interval: float = 2.0,
    title: str = "Soniq",
    manage_app: bool = False,
    allowed_hosts: Sequence[str] | None = None,
    read_key: str | None = None,
) -> Starlette:
    """The dashboard for `app` as an ASGI app; mount it in FastAPI or Starlette, or serve it with uvicorn.

    Read-only unless `writes=True`, and then every write needs `api_key`
    (header ``X-Soniq-Api-Key`` or the form's key field) or
    ``authorize(request)`` returning true (may be async): the mounting app's
    own auth. Form posts also need the page's CSRF token and a same-origin
    ``Origin``; `trusted_origins` adds origins a proxy rewrites to. With
    `manage_app`, the dashboard connects and closes `app` in its lifespan.

    `allowed_hosts` (``soniq dashboard`` always sets it) answers 400 to a
    request whose ``Host`` names none of them, port aside; `read_key` makes
    every page and JSON endpoint answer 401 without that key (header
    ``X-Soniq-Read-Key``, ``Authorization: Bearer``, or the cookie the
    login form sets). Mounted in your app, your own middleware may do both.

    A backend without the `OperatorReads` or `DeadLetterStore` role is refused here, with
    `MissingBackendRoleError` naming "the dashboard", rather than with a failing page later; one
    without `ScheduleStore` gets a schedules page saying it keeps no schedules.
    """
    require_dashboard_roles(app.backend)
    if prefix and (not prefix.startswith("/") or prefix.endswith("/")):
        raise ValueError(f"prefix must start with '/' and not end with one, got {prefix!r}")
    if poll_interval <= 0:
        raise ValueError(f"poll_interval must be > 0 seconds, got {poll_interval!r}")
    guard = WriteGuard(writes=writes, api_key=api_key, authorize=authorize, trusted_origins=trusted_origins)
    dashboard = Dashboard(app, prefix=prefix, guard=guard, poll_interval=poll_interval, title=title)
    # Outermost first: a foreign Host learns nothing, not even whether a read key is set.
    middleware: list[Middleware] = []
    if allowed_hosts is not None:
        middleware.append(Middleware(HostGuard, allowed_hosts=allowed_hosts))
    if read_key is not None:
        middleware.append(Middleware(ReadKeyGuard, read_key=read_key, prefix=prefix))
    middleware.append(Middleware(UrlGuard))
    return Starlette(
        routes=dashboard.routes(),
        middleware=middleware,
        exception_handlers={JobOptionsError: dashboard.bad_filter},
        lifespan=_lifespan(dashboard, manage_app),
    )


def _lifespan(dashboard: Dashboard, manage_app: bool) -> Callable[[Starlette], Any]:
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(_: Starlette) -> Any:
        # Mounted in another app, this never runs: the overview's refresh task then stops by itself
        # a few poll intervals after the last request.
        if manage_app:
            await dashboard.app.connect()
        try:
            yield
        finally:
            await dashboard.overview_snapshot.close()
            if manage_app:
                await dashboard.app.close()

    return lifespan


__all__ = ["create_dashboard_app"]
