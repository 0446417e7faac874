"""The WSGI entry point: `gunicorn wsgi:app`, `flask --app wsgi …`."""

from directory_api import create_app

app = create_app()
