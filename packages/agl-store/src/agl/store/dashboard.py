"""The store's dashboard, served at ``/`` and ``/dashboard``.

This is the public import path; the code and its static files live in :mod:`agl.store.http.server.dashboard`.
"""

from .http.server.dashboard import DASHBOARD_PATH, DashboardMiddleware, dashboard_files

__all__ = ["DASHBOARD_PATH", "DashboardMiddleware", "dashboard_files"]
