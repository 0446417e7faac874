"""Extension objects only; create_app() binds them to an application."""

import ipaddress

from flask_limiter.util import get_remote_address
from flask_login import LoginManager
from flask_mail import Mail
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import MetaData
from sqlalchemy.orm import DeclarativeBase

from .autogenerate import render_migration_type
from .rate_windows import ServiceLimiter
from .reads import ReadAwareSession

# Stable constraint names, so Alembic can alter and drop them on every database.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class SessionLoginManager(LoginManager):
    """Flask-Login with sessions only: its separate remember-me cookie never signs anyone in."""

    def _load_user_from_remember_cookie(self, cookie: str) -> None:
        return None


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


db = SQLAlchemy(model_class=Base, session_options={"class_": ReadAwareSession})
migrate = Migrate(
    render_as_batch=True,
    compare_type=True,
    render_item=render_migration_type,
)
login_manager = SessionLoginManager()
mail = Mail()


def client_network() -> str:
    """Key of the per-IP limits: the client's IPv4 address, or the /64 network of its IPv6
    one. A subscriber or a rented server gets a whole /64, so keyed by its full address one
    client could spend a fresh allowance per address, without end. An IPv4 client reaching
    an IPv6 socket (`::ffff:192.0.2.1`) is its IPv4 address. Behind a proxy, ProxyFix
    (PROXY_FIX_X_FOR) makes remote_addr the real client."""
    address = get_remote_address()
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # no zone (`%eth0`)
    except ValueError:
        return address  # not an address (a test client's): as it is
    if ip.version == 4:
        return str(ip)
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ipaddress.IPv6Network((ip, 64), strict=False))


limiter = ServiceLimiter(key_func=client_network)


def commit_keeping_state() -> None:
    """Commit without expiring what the session holds: for an answer made of exactly what
    the request loaded and wrote (a sign-in's account and roles), which reading it all again
    would find unchanged, one round trip or two saved. Every other commit expires, so what
    is read after it is the database's."""
    session = db.session()
    keep, session.expire_on_commit = session.expire_on_commit, False
    try:
        session.commit()
    finally:
        session.expire_on_commit = keep
