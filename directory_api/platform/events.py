"""ORM event listeners, registered by `create_app` (not by importing a module), once per
process however many apps it builds: each module that keeps something in step with the
database's changes lists its own as `LISTENERS`."""

from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import event

# (target, event name, function, options of event.listen)
Listener = tuple[Any, str, Callable[..., Any], dict[str, Any]]


def listen(listeners: Iterable[Listener]) -> None:
    for target, name, function, options in listeners:
        if not event.contains(target, name, function):
            event.listen(target, name, function, **options)
