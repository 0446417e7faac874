"""gunicorn settings: `gunicorn -c gunicorn.conf.py wsgi:app`, behind nginx
(deploy/nginx.conf). Each one can be overridden from the environment (see README,
"Deploying")."""

import multiprocessing
import os
import sys
from typing import Any

from gunicorn.errors import AppImportError

from config import SettingsError, env, env_choice, env_int, get_config

bind = env("GUNICORN_BIND", "127.0.0.1:8000")
# The usual 2 × cores + 1 processes; WEB_CONCURRENCY overrides (as on most platforms).
workers = env_int("WEB_CONCURRENCY", multiprocessing.cpu_count() * 2 + 1)
# gunicorn's own gthread: each worker serves `threads` requests at once. A thread blocks on
# its client, so slow clients must never reach it: nginx in front buffers requests and
# answers (deploy/nginx.conf).
worker_class = "gthread"
threads = env_int("GUNICORN_THREADS", 8)

# A worker whose event loop stops checking in for this long is restarted (a slow request
# does not count with threads: the app's own timeouts bound it); on SIGTERM, workers get
# graceful_timeout to finish their requests.
timeout = env_int("GUNICORN_TIMEOUT", 30)
graceful_timeout = env_int("GUNICORN_GRACEFUL_TIMEOUT", 30)
keepalive = 5
# Recycle workers now and then, so a slow leak can never grow without bound. A new worker
# costs about 0.8 s of CPU to start (it imports and builds the app): every request pays its
# share, 0.08 ms at 10,000 (about 10 % of a cached list page's 0.8 ms under gunicorn),
# 0.016 ms at 50,000. A worker's memory grew 4 MB over 63,000 requests of lists, searches,
# votes and /me/ (bench/WALLTIME.md), so 50,000 still bounds any leak well. gunicorn adds
# up to max_requests_jitter, so workers started together do not all restart together.
max_requests = env_int("GUNICORN_MAX_REQUESTS", 50000)
max_requests_jitter = max_requests // 10

# gunicorn's access log would print request lines, and reset tokens travel in paths; the
# app writes one line per request itself, with the request id and tokens redacted.
accesslog = None
errorlog = "-"
loglevel = env_choice(
    "GUNICORN_LOG_LEVEL", "info", ("debug", "info", "warning", "error", "critical")
)

# Only a proxy on these addresses may set X-Forwarded-Proto for gunicorn itself; the app's
# own trust in X-Forwarded-For is PROXY_FIX_X_FOR.
forwarded_allow_ips = env("FORWARDED_ALLOW_IPS", "127.0.0.1")
# Heartbeat files in memory, so a slow disk never makes the arbiter kill healthy workers.
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None  # noqa: S108
# gunicorn's control socket sits at one path per user; several instances on one host (or a
# second one started for a rolling restart) would contend for it. Opt in with its path.
control_socket = env("GUNICORN_CONTROL_SOCKET")
control_socket_disable = control_socket is None

# A value of the wrong kind, here or in the app's settings, stops the master before any
# worker starts, with one line (an exception here would be a page of gunicorn's traceback).
# The master also refuses an EXPORTS_AT_ONCE that would let exports take every thread: a
# process streams that many at most (directory_api/platform/at_once.py), and one thread at least is
# left for the other requests (a single thread has none to leave: it serves one at a time).
try:
    exports_at_once = get_config().EXPORTS_AT_ONCE
    # gunicorn's own counts: 0 would end in its traceback (or a server that serves nothing).
    problems = [
        f"{name} must be at least 1 (it is {value})"
        for name, value in (("WEB_CONCURRENCY", workers), ("GUNICORN_THREADS", threads))
        if value < 1
    ]
    if 1 < threads <= exports_at_once:
        problems.append(
            f"EXPORTS_AT_ONCE must be less than GUNICORN_THREADS ({threads}), leaving "
            f"threads for other requests (it is {exports_at_once})"
        )
    if problems:
        raise SettingsError(problems)
except SettingsError as error:
    error.show()
    sys.exit(error.exit_code)
finally:
    # The master forgets config.py once it has read it: every worker imports it as it is on
    # disk, also those `kill -HUP` starts with a new release's code (and this file, read
    # again then, checks the new release's settings).
    del sys.modules["config"]


def post_fork(server: Any, worker: Any) -> None:
    """Values the app can read but refuses (a timeout of 0, a weak SECRET_KEY in production)
    stop the first worker as gunicorn's "App failed to load": their one line on stderr, and
    the server stops, instead of a traceback and "Worker failed to boot". The app is still
    loaded where gunicorn loads it, in the worker's start (as its user, in its environment);
    the hook only words the refusal."""
    load_wsgi = worker.load_wsgi

    def load_or_refuse() -> None:
        from config import SettingsError  # the worker's own import, not the master's

        try:
            load_wsgi()
        except SettingsError as error:
            raise AppImportError(error.format_message()) from None

    worker.load_wsgi = load_or_refuse


def post_worker_init(worker: Any) -> None:
    """Once a worker has loaded the app, the app's objects (modules, models, the registries of
    Flask and SQLAlchemy: some 160,000) live as long as the worker does: they leave the
    garbage collector's generations, so that its full collections scan what requests left
    behind, not the app. Measured in one process (bench/WALLTIME.md): a full collection
    held every thread of the worker for 80–90 ms; with the app frozen, 1.2–5.4 ms. A cycle
    formed later among frozen objects is never collected: a worker lives max_requests.
    Each worker loads its own app (no preload_app, so that `kill -HUP` loads new code);
    with --preload, this collection would touch every object the workers share."""
    import gc

    gc.collect()  # what loading left as garbage goes first, not frozen forever
    gc.freeze()


# Metrics (API.md 18): every worker writes its own files in one directory, which a scrape of
# any worker reads whole. The master empties it (or makes one) before any worker starts, so
# no series of an earlier run lingers, and marks each worker that exits (a recycled one,
# max_requests) dead. Set PROMETHEUS_MULTIPROC_DIR to choose the directory.
def on_starting(server: Any) -> None:
    import shutil
    import tempfile

    chosen = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    directory = chosen or tempfile.mkdtemp(prefix="directory-api-metrics-")
    if chosen:
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory, mode=0o700)
    else:
        server.made_metrics_dir = directory  # ours: removed when the master exits
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory


def on_exit(server: Any) -> None:
    import shutil

    made = getattr(server, "made_metrics_dir", None)
    if made:
        shutil.rmtree(made, ignore_errors=True)


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
