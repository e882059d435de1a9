"""The store's dashboard: static HTML, CSS and JavaScript modules served at ``/`` and ``/dashboard``.

The files ship inside the package (``static/``), with no build step and nothing fetched from elsewhere, so
the dashboard works offline from a fresh clone or the published wheel. The page holds no data: it asks for
the store's token once (kept in the browser's ``sessionStorage``) and reads everything through the
ordinary ``/v1/agl`` routes, with the same validation as any client.
"""

from __future__ import annotations

from importlib import resources

from .._middleware import ASGIApp, Receive, Scope, Send

__all__ = ["DASHBOARD_PATH", "DashboardMiddleware", "dashboard_files"]

DASHBOARD_PATH = "/dashboard"

_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".svg": b"image/svg+xml",
}
# Everything comes from this server: no CDN, no inline scripts. No other site may frame the page either
# (clickjacking): frame-ancestors for current browsers, X-Frame-Options for older ones.
_CSP = (
    b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; "
    b"frame-ancestors 'none'"
)


def dashboard_files() -> dict[str, bytes]:
    """Name → content of every file of the dashboard."""
    root = resources.files(__name__).joinpath("static")
    found: dict[str, bytes] = {}
    for entry in root.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in _TYPES:
            found[entry.name] = entry.read_bytes()
    return found


class DashboardMiddleware:
    """Answers ``GET /``, ``/dashboard`` and ``/dashboard/<file>``; passes everything else on.

    The files are public (they contain no data); the API calls the page makes carry the token.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._files = dashboard_files()

    def _lookup(self, path: str) -> str | None:
        if path in ("/", DASHBOARD_PATH, DASHBOARD_PATH + "/"):
            return "index.html"
        if path.startswith(DASHBOARD_PATH + "/"):
            name = path[len(DASHBOARD_PATH) + 1 :]
            return name if name in self._files else None
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        name = self._lookup(scope["path"])
        if name is None:
            await self.app(scope, receive, send)
            return
        body = self._files[name]
        headers = [
            (b"content-type", _TYPES["." + name.rsplit(".", 1)[-1]]),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-cache"),
            (b"content-security-policy", _CSP),
            (b"x-frame-options", b"DENY"),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"no-referrer"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body if scope["method"] == "GET" else b""})
