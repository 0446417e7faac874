"""Extension objects only; create_app() binds them to an application."""

from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from flask_login import LoginManager
from flask_mail import Mail
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import MetaData
from sqlalchemy.orm import DeclarativeBase

from .autogenerate import render_migration_type
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
# Behind a proxy, ProxyFix (PROXY_FIX_X_FOR) makes remote_addr the real client.
limiter = Limiter(key_func=get_remote_address)
