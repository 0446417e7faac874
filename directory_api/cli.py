"""Flask CLI commands: create-super, seed-demo, outbox send|worker|rekey, listings
recount|store-outputs, retention run, privacy erase|export; and the outbox worker's loop
with its housekeeping."""

import json
import logging
import threading
import time
from collections.abc import Callable

import click
from flask import Flask, current_app
from flask.cli import AppGroup, with_appcontext
from marshmallow import ValidationError
from sqlalchemy import select

from . import demo
from .audit import compact_counts
from .credentials import notice_expiring_tokens, set_password
from .listing_pages import store_missing_outputs
from .models import User
from .models.listing import recount_listings
from .platform.extensions import db
from .platform.idempotency import purge_expired_idempotency_keys
from .platform.outbox import deliver_due
from .platform.single_use import purge_used_once
from .privacy import erase, export, rekey_outbox, run_retention
from .schemas.fields import Email
from .schemas.passwords import password_problems
from .vote_integrity import recount_votes
from .webhooks.delivery import deliver_due_webhooks, purge_webhook_log

# The worker logs as the outbox it serves (what operators filter on).
log = logging.getLogger("directory_api.platform.outbox")


def _address(email: str) -> str:
    """The address as stored (normalised), or a usage error naming the problem."""
    try:
        return Email(required=True).deserialize(email)
    except ValidationError as error:
        raise click.BadParameter("; ".join(error.messages), param_hint="EMAIL") from error


@click.command("create-super")
@click.argument("email")
@click.option("--password", help="The password (prompted for when omitted).")
@click.option(
    "--reset-password",
    is_flag=True,
    help="EMAIL has an account already: replace its password (and make it a super).",
)
@with_appcontext
def create_super(email: str, password: str | None, reset_password: bool) -> None:
    """Create a super with a password; with --reset-password, an existing account's
    password is replaced and the account made a super."""
    email = _address(email)
    user = db.session.scalar(select(User).where(User.email == email))
    if user is not None and not reset_password:
        # Asked before the password, so nobody types one only to be refused.
        raise click.ClickException(
            f"{email} has an account already; its password is unchanged. To replace it "
            "(and make the account a super), run this again with --reset-password."
        )
    if password is None:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    problems = password_problems(password, email)
    if problems:
        raise click.BadParameter(" ".join(problems), param_hint="--password")
    replaced = user is not None
    if user is None:
        user = User(email=email)
        db.session.add(user)
    user.is_super = True
    # As every password change: its sessions end, and its reset and e-mail-change links
    # stop working (whoever holds an old one must not set a super's password).
    set_password(user, password)
    db.session.commit()
    click.echo(f"{email} is a super" + ("; its password was replaced." if replaced else "."))


def recount() -> None:
    """Recompute the stored counts (listings per location, and each employer's votes) and
    store the listings' outputs that are missing, committed."""
    recount_listings()
    recount_votes()
    db.session.commit()
    store_missing_outputs()


@click.command("seed-demo")
@with_appcontext
def seed_demo() -> None:
    """Load demo data: two locations with a few hundred listings, votes in every state, an
    owner and an admin (their passwords printed); safe to run again."""
    if current_app.config.get("ENV_NAME") == "production":
        raise click.ClickException(
            "seed-demo creates accounts whose passwords are public: not in production."
        )
    added = demo.seed()
    recount()  # the listings and votes were written in bulk, past the ORM's counting
    if any(added.values()):
        click.echo(
            f"Demo data loaded: {added['listings']} listings, {added['votes']} votes and "
            f"{added['users']} users added."
        )
    else:
        click.echo("Demo data already loaded; nothing added.")
    click.echo("Demo users (the password as seeded, unless changed since):")
    for user in demo.DEMO_USERS:
        roles = ", ".join(f"{role} of {slug}" for slug, role in user.roles)
        click.echo(f'  {user.email}  password "{user.password}"  ({roles})')


# The outbox worker's loop -------------------------------------------------------------

# The worker waits this long after a failed pass (doubling, up to the cap) before the next.
WORKER_RETRY_FIRST = 1.0
WORKER_RETRY_CAP = 60.0


# Housekeeping the worker does besides delivering, and how often (seconds): listing outputs
# to store each minute; expired idempotency records, marks of used challenges and the
# notices of tokens about to expire hourly, retention (privacy.py) daily. Each runs at
# start-up too.
def purge_idempotency_keys() -> None:
    purged = purge_expired_idempotency_keys()
    if purged:
        log.info("purged %d expired idempotency records", purged)


def purge_used_challenges() -> None:
    """Marks of used challenge solutions (without Redis) once their challenges expired."""
    purged = purge_used_once()
    db.session.commit()
    if purged:
        log.info("purged %d expired marks of used solutions", purged)


def purge_webhook_deliveries() -> None:
    """Deliveries past WEBHOOK_LOG_DAYS, once over."""
    purged = purge_webhook_log()
    if purged:
        log.info("purged %d webhook deliveries past WEBHOOK_LOG_DAYS", purged)


def compact_audit_counts() -> None:
    """The rows the audit log's triggers added, folded (audit.compact_counts)."""
    folded = compact_counts()
    if folded:
        log.info("folded %d rows of audit counts", folded)


# Listing outputs a rename of a category's or social's slug cleared (or loaded past the
# ORM): a bounded share each minute, so that mail is never long behind them.
OUTPUTS_STORED_A_PASS = 10_000


def store_listing_outputs() -> None:
    stored = store_missing_outputs(most=OUTPUTS_STORED_A_PASS)
    if stored:
        log.info("stored the outputs of %d listings", stored)


HOUSEKEEPING: list[tuple[float, Callable[[], object]]] = [
    (60.0, store_listing_outputs),
    (3600.0, compact_audit_counts),
    (3600.0, purge_idempotency_keys),
    (3600.0, purge_used_challenges),
    (3600.0, purge_webhook_deliveries),
    (3600.0, notice_expiring_tokens),
    (86400.0, run_retention),
]


def run_worker(
    interval: float, stop_after: int | None = None, stop: threading.Event | None = None
) -> None:
    """Deliver forever (or for `stop_after` passes of the mail, or until `stop` is set),
    sleeping `interval` seconds when idle: mail and housekeeping in this thread, webhooks
    in WEBHOOK_WORKERS threads of their own (a slow receiver never delays mail). An outage
    of the database, of SMTP or of a receiver never ends it: a failed pass is logged and
    retried with backoff, and delivery resumes on its own."""
    stop = stop or threading.Event()
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    threads = [
        threading.Thread(
            target=deliver_webhooks, args=(app, interval, stop), name=f"webhooks-{n}", daemon=True
        )
        for n in range(app.config["WEBHOOK_WORKERS"])
    ]
    for thread in threads:
        thread.start()
    last_done = [-period for period, _ in HOUSEKEEPING]

    def mail_pass() -> int:
        for index, (period, task) in enumerate(HOUSEKEEPING):
            if time.monotonic() - last_done[index] >= period:
                task()
                last_done[index] = time.monotonic()
        report = deliver_due()
        return report.sent + report.failed

    try:
        run_passes(mail_pass, "outbox", interval, stop, stop_after)
    finally:
        stop.set()
        for thread in threads:  # each ends its delivery first (bounded by its timeout)
            thread.join(app.config["WEBHOOK_TIMEOUT"] + 5)


def deliver_webhooks(app: Flask, interval: float, stop: threading.Event) -> None:
    """One webhook thread of the worker: deliver what is due until `stop` is set."""
    with app.app_context():
        try:
            run_passes(webhook_pass, "webhook", interval, stop)
        finally:
            db.session.remove()


def webhook_pass() -> int:
    report = deliver_due_webhooks()
    return report.delivered + report.failed


def run_passes(
    work: Callable[[], int],
    what: str,
    interval: float,
    stop: threading.Event,
    stop_after: int | None = None,
) -> None:
    """Call `work` (which answers how much it did) until `stop` is set, or `stop_after`
    times; wait `interval` after a pass that did nothing, and back off after one that
    failed (the database went away mid-pass, most likely)."""
    passes = 0
    retry = WORKER_RETRY_FIRST
    while not stop.is_set() and (stop_after is None or passes < stop_after):
        passes += 1
        try:
            done = work()
        except Exception as error:
            db.session.rollback()
            db.session.remove()
            log.error("%s pass failed (%s); retrying in %gs", what, describe(error), retry)
            stop.wait(retry)
            retry = min(retry * 2, WORKER_RETRY_CAP)
            continue
        retry = WORKER_RETRY_FIRST
        if not done:
            stop.wait(interval)


def describe(error: Exception) -> str:
    """The kind of error and its first line (database messages can run to many lines)."""
    text = str(error).strip().splitlines()
    return type(error).__name__ + (f": {text[0][:200]}" if text else "")


outbox = AppGroup("outbox", help="Deliver the mail waiting in the outbox.")


@outbox.command("send")
def outbox_send() -> None:
    """Deliver every due message and webhook once, then exit."""
    report = deliver_due()
    hooks = deliver_due_webhooks()
    click.echo(
        f"sent {report.sent}, failed {report.failed}; "
        f"webhooks delivered {hooks.delivered}, failed {hooks.failed}"
    )


@outbox.command("worker")
@click.option("--interval", default=5.0, show_default=True, help="Seconds to wait when idle.")
def outbox_worker(interval: float) -> None:
    """Deliver mail and webhooks continuously (several workers may run at once)."""
    click.echo(f"outbox worker: polling every {interval:g}s when idle")
    run_worker(interval)


@outbox.command("rekey")
def outbox_rekey() -> None:
    """Re-encrypt kept message bodies under the current OUTBOX_KEY (after a key change)."""
    report = rekey_outbox()
    click.echo(json.dumps(report))
    if report["unreadable"]:
        raise click.ClickException(
            f"{report['unreadable']} bodies open with none of the configured keys: "
            "add the secret they were queued under to OUTBOX_OLD_KEYS and run this again."
        )


listings = AppGroup("listings", help="Maintenance of businesses and employers.")


@listings.command("recount")
@with_appcontext
def listings_recount() -> None:
    """Recompute the stored counts (listings per location, each employer's votes) and store
    missing listing outputs: after loading listings or votes outside the app."""
    recount()
    click.echo("listing and vote counts recomputed, missing outputs stored")


@listings.command("store-outputs")
@with_appcontext
def listings_store_outputs() -> None:
    """Store each listing's output (its JSON, its CSV line) where it is missing: after the
    upgrade that added them (migration 0025), or loading listings outside the app (the
    worker stores up to 10,000 a minute too). Pages and exports compute a missing one as
    they read it, so this can run while serving."""
    click.echo(f"{store_missing_outputs()} listings' outputs stored")


retention = AppGroup("retention", help="Delete or redact personal data past its retention.")


@retention.command("run")
def retention_run() -> None:
    """Redact old votes' submitter details, delete old outbox rows and spent tokens."""
    click.echo(json.dumps(run_retention().as_dict()))


privacy = AppGroup("privacy", help="A data subject's requests: export or erase by address.")


@privacy.command("export")
@click.argument("email")
def privacy_export(email: str) -> None:
    """Print every vote and message held for EMAIL as JSON."""
    click.echo(json.dumps(export(_address(email)), indent=2, ensure_ascii=False))


@privacy.command("erase")
@click.argument("email")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def privacy_erase(email: str, yes: bool) -> None:
    """Delete every vote submitted with EMAIL and every message to or for it."""
    address = _address(email)
    if not yes:
        click.confirm(f"Delete every vote and message of {address}?", abort=True)
    click.echo(json.dumps(erase(address)))


commands = [create_super, seed_demo, outbox, listings, retention, privacy]
