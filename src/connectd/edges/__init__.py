"""The daemon's edges: where the outside world reaches it, and where its audit log leaves.

- :mod:`connectd.edges.mcp`: the MCP endpoint (``/mcp``) the agents call, one tool per agent or act call.
- :mod:`connectd.edges.http`: the owner API under ``/api/``, the loopback guard on every route, and the
  owner page (:mod:`connectd.edges.http.page`, its files in ``edges/http/static/``).
- :mod:`connectd.edges.otlp`: the audit log's OTLP export.
"""
