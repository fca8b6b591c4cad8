"""The emq dashboard: server-rendered pages over a queue server (docs/dashboard.md).

Import :func:`emq.dashboard.app.create_app` to build the ASGI app; ``emq dashboard`` serves it
with uvicorn. Nothing here is imported by ``import emq``: the web stack (Starlette, Jinja2,
uvicorn) is the optional ``emq[dashboard]`` extra.
"""
