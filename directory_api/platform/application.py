"""The Flask class of the service: Flask, less a question it asks on every request; and
what a request's view says of itself."""

from collections.abc import Callable
from inspect import CO_COROUTINE, CO_ITERABLE_COROUTINE
from typing import Any, TypeVar

from flask import Flask

from .current import current_application, current_request

ASYNC_FLAGS = CO_COROUTINE | CO_ITERABLE_COROUTINE


class Application(Flask):
    """Flask asks `inspect.iscoroutinefunction` of every hook and view it calls, about 15
    times a request here, to run an `async def` one through asgiref; the question costs
    more than most hooks (3 % of a 304, callgrind). For the app's own hooks, views and error
    handlers, registered before its first request and kept until its end, the answer is
    kept once asked; a callable made for one request (`after_this_request`, a class-based
    view's method) is asked each time and never kept. A plain function's code object
    answers it (its flags); anything else (a partial, a callable object, a function marked
    by `inspect.markcoroutinefunction`) is asked as Flask asks."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sync: dict[Callable[..., Any], Callable[..., Any]] = {}
        self._registered: frozenset[Callable[..., Any]] | None = None

    def ensure_sync(self, func: Callable[..., Any]) -> Callable[..., Any]:
        try:
            known = self._sync.get(func)  # a bound method made anew is equal to the last one
        except TypeError:  # an unhashable callable object: asked each time
            return self._ensure_sync_uncached(func)
        if known is not None:
            return known
        made = self._ensure_sync_uncached(func)
        if func in self._registered_callables():
            self._sync[func] = made
        return made

    def _registered_callables(self) -> frozenset[Callable[..., Any]]:
        """What the app registered: fixed once it has begun answering (Flask refuses a
        registration after its first request); nothing before that."""
        if self._registered is None:
            if not self._got_first_request:
                return frozenset()
            tables = (
                self.before_request_funcs,
                self.after_request_funcs,
                self.teardown_request_funcs,
                self.url_value_preprocessors,
                self.template_context_processors,
            )
            found: list[Callable[..., Any]] = [*self.view_functions.values()]
            found += [func for table in tables for funcs in table.values() for func in funcs]
            found += self.teardown_appcontext_funcs
            found += [
                handler
                for codes in self.error_handler_spec.values()
                for handlers in codes.values()
                for handler in handlers.values()
            ]
            self._registered = frozenset(found)
        return self._registered

    def _ensure_sync_uncached(self, func: Callable[..., Any]) -> Callable[..., Any]:
        code = getattr(func, "__code__", None)  # a function's, or a bound method's function's
        if code is not None and not code.co_flags & ASYNC_FLAGS and not _marked(func):
            return func
        return super().ensure_sync(func)


def _marked(func: Callable[..., Any]) -> bool:
    """Whether `inspect.markcoroutinefunction` marked `func` (Python 3.12+)."""
    return getattr(getattr(func, "__func__", func), "_is_coroutine_marker", None) is not None


View = TypeVar("View", bound=Callable[..., Any])


def say_of_view(view: View, flag: str) -> View:
    """Set `flag` on `view`, the function its route calls, for `view_says` to read."""
    setattr(view, flag, True)
    return view


def view_says(flag: str) -> bool:
    """Whether this request's view function carries `flag` (an attribute set on it where it
    is defined), known from the URL before the view runs."""
    view = current_application().view_functions.get(current_request().endpoint or "")
    return getattr(view, flag, False)
