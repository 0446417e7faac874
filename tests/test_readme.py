"""The README's walkthrough ("Try it with curl") runs as written, in order, and then the
data-subject commands of "Data protection" (issue 18).

A server is started the way `make run` starts one (`flask db upgrade`, `flask seed-demo`,
`flask run` and an outbox worker writing `instance/mail.log`), on a fresh SQLite database
in a folder of its own, and every shell block of that section runs in one bash, from that
folder (with `.venv` pointing at this project's). The only change made to the text is the
port, `localhost:5000` → a free one. `curl` fails on any 4xx or 5xx answer and bash stops
at the first failing command, so every request the README shows must succeed.
"""

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import free_port

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Try it with curl"
STRICT = """set -euo pipefail
curl() { command curl --fail-with-body --show-error "$@"; }
"""


def blocks_of(section: str, language: str) -> list[str]:
    """The `language` code blocks of one section of the README, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(section)
    end = text.index("\n## ", start + len(section))
    return re.findall(rf"```{language}\n(.*?)```", text[start:end], re.DOTALL)


def walkthrough() -> list[str]:
    """The walkthrough's blocks, then the operator's data-subject commands (run on what the
    walkthrough left: its voter is val@example.com)."""
    return blocks_of(SECTION, "sh") + blocks_of("## Data protection", "bash")


def flask(folder: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(  # noqa: S603
        [str(folder / ".venv" / "bin" / "flask"), *args],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_until_up(port: int, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the server stopped:\n{server.stdout.read()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    pytest.fail("the server did not answer /health within 30 s")


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str], int]]:
    """A folder laid out as the project's, a `make run`-style server and worker for it."""
    folder = tmp_path / "project"
    (folder / "instance").mkdir(parents=True)
    (folder / ".venv").symlink_to(Path(sys.executable).parent.parent)
    port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TEST_", "DATABASE_", "REDIS_", "MAIL_", "APP_", "FLASK_"))
    }
    env |= {
        "FLASK_APP": "wsgi",
        "DATABASE_URL": f"sqlite:///{folder / 'instance' / 'directory.sqlite3'}",
        "SESSION_FILE_DIR": str(folder / "instance" / "sessions"),
        "MAIL_LOG_FILE": str(folder / "instance" / "mail.log"),
    }
    for step in (("db", "upgrade"), ("seed-demo",)):
        with flask(folder, env, *step) as done:
            output, _ = done.communicate(timeout=120)
        assert done.returncode == 0, output
    worker = flask(folder, env, "outbox", "worker", "--interval", "1")
    server = flask(folder, env, "run", "--host", "127.0.0.1", "--port", str(port))
    try:
        wait_until_up(port, server)
        yield folder, env, port
    finally:
        for process in (server, worker):
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            process.stdout.close()


def test_the_walkthrough_runs_as_written(make_run):
    folder, env, port = make_run
    blocks = walkthrough()
    assert len(blocks) >= 5
    script = STRICT + "\n".join(blocks).replace("localhost:5000", f"localhost:{port}")
    # An operator's shell has the virtualenv on its PATH (README, Deploying).
    env = {**env, "PATH": f"{folder / '.venv' / 'bin'}:{env['PATH']}"}
    finished = subprocess.run(  # noqa: S603
        ["bash", "-c", script],  # noqa: S607
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = finished.stdout
    assert finished.returncode == 0, (
        f"a README command failed (exit {finished.returncode}):\n"
        f"{output[-4000:]}\n{finished.stderr[-4000:]}"
    )
    # What the walkthrough's comments promise along the way, and the erasure after it.
    assert '{"votes":1,"messages":' in output.replace(" ", ""), output[-2000:]  # erased
    assert '"status":"confirmed"' in output.replace(" ", "")  # the receipt's link worked
    assert '"created":0' in output.replace(" ", "")  # the dry run of an unchanged export
    # The audit log's first query finds the walkthrough's own change (issue 35).
    assert '"changes":{"phone":[null,"+4417687720' in output.replace(" ", ""), output[-2000:]
    # Answers are printed back to back (JSON ends with no line break); `-w` codes end a line.
    assert "304\n" in output  # the ETag revalidation (JSON answers hold no line break)
    assert "204\n" in output  # signed out
    # Files the walkthrough wrote where it said: the cookie jars and the exports.
    left = sorted(path.name for path in folder.iterdir())
    assert {"jar", "olive", "businesses.csv", "pending.csv"} <= set(left)
    # …and git ignores every file it left, so a newcomer's `git status` stays clean.
    ignored = output_of("git", "check-ignore", "--no-index", *left).split()
    assert sorted(ignored) == left


def output_of(*command: str) -> str:
    """What `command`, run in the project's folder, prints (whatever its exit status: git
    check-ignore exits 1 when a path is not ignored)."""
    return subprocess.run(  # noqa: S603
        command, cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout


@pytest.mark.parametrize(("given", "served"), [((), "5000"), (("PORT=8123",), "8123")])
def test_make_run_serves_on_port_or_5000(given, served):
    """`make run PORT=…` when 5000 is taken (read with `make -n`: printed, not run)."""
    planned = output_of("make", "-n", "run", *given)
    assert f"flask run --host 127.0.0.1 --port {served}\n" in planned


def test_the_package_builds_without_a_warning_and_with_its_data(tmp_path):
    """Issue 35: every install printed three screens of setuptools warnings (the data
    folders templates/ and docs/ were not among the packages). Built as pip builds it."""
    built = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", str(ROOT), "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert "BuildBackendWarning" not in built.stdout + built.stderr
    (wheel,) = tmp_path.glob("directory_api-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {"config.py", "wsgi.py", "directory_api/templates/docs.html"} <= names
    assert "directory_api/templates/mail/invitation.txt" in names
    assert "directory_api/docs/altcha.min.js" in names
    assert not any(name.startswith(("tests/", "bench/")) for name in names)


@pytest.mark.parametrize("unit", ["directory-api.service", "directory-worker.service"])
def test_the_service_units_verify(tmp_path, unit):
    """deploy/'s systemd units, with this checkout's paths for /srv/directory's, pass
    `systemd-analyze verify` (where it is installed; else they are read as unit files)."""
    text = (ROOT / "deploy" / unit).read_text()
    venv = Path(sys.executable).parent.parent
    local = text.replace("/srv/directory/venv", str(venv)).replace("/srv/directory/app", str(ROOT))
    local = local.replace("/etc/directory/environment", str(tmp_path / "environment"))
    local = local.replace("User=directory", "User=root").replace("Group=directory", "Group=root")
    (tmp_path / "environment").write_text("APP_ENV=production\n")
    (tmp_path / unit).write_text(local)
    service = dict(
        line.split("=", 1)
        for line in text.split("[Service]")[1].split("[Install]")[0].splitlines()
        if "=" in line and not line.startswith("#")
    )
    assert service["User"] == "directory" and service["Restart"] in ("on-failure", "always")
    assert service["EnvironmentFile"] == "/etc/directory/environment"
    program = service["ExecStart"].split()[0].rsplit("/", 1)[1]
    assert (venv / "bin" / program).exists()  # the command the venv installs
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return  # read above as unit files; nothing more to ask without systemd
    verified = subprocess.run(  # noqa: S603
        [analyze, "verify", "--man=no", str(tmp_path / unit)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stderr
    assert unit not in verified.stderr, verified.stderr  # no warning about the unit itself
