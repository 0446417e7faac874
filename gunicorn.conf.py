"""gunicorn settings: `gunicorn -c gunicorn.conf.py wsgi:app`. Each one can be overridden
from the environment (see README, "Deploying")."""

import multiprocessing
import os

from directory_api.gunicorn_worker import BoundedThreadWorker

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
# The usual 2 × cores + 1 processes; WEB_CONCURRENCY overrides (as on most platforms).
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count() * 2 + 1))
# gthread, where a thread only takes a request that has fully arrived, so that slow clients
# cannot hold them all; each worker serves `threads` requests at once.
worker_class = BoundedThreadWorker
threads = int(os.environ.get("GUNICORN_THREADS", "8"))
# A client has this long, from its first byte, to deliver a whole request; then a 408.
BoundedThreadWorker.client_timeout = float(os.environ.get("GUNICORN_CLIENT_TIMEOUT", "10"))

# A worker whose event loop stops checking in for this long is restarted (a slow request
# does not count with threads: the app's own timeouts bound it); on SIGTERM, workers get
# graceful_timeout to finish their requests.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "30"))
keepalive = 5
# Recycle workers now and then, so a slow leak can never grow without bound.
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "10000"))
max_requests_jitter = max_requests // 10

# gunicorn's access log would print request lines, and reset tokens travel in paths; the
# app writes one line per request itself, with the request id and tokens redacted.
accesslog = None
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")

# Only a proxy on these addresses may set X-Forwarded-Proto for gunicorn itself; the app's
# own trust in X-Forwarded-For is PROXY_FIX_X_FOR.
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
# Heartbeat files in memory, so a slow disk never makes the arbiter kill healthy workers.
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None  # noqa: S108
# gunicorn's control socket sits at one path per user; several instances on one host (or a
# second one started for a rolling restart) would contend for it. Opt in with its path.
control_socket = os.environ.get("GUNICORN_CONTROL_SOCKET") or None
control_socket_disable = control_socket is None
