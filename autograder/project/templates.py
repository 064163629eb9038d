"""The one Jinja environment of the engine's page templates (autograder/templates)."""

from __future__ import annotations

from collections.abc import Callable

import jinja2


def environment(**filters: Callable) -> jinja2.Environment:
    """A Jinja environment over autograder/templates with `filters` added."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("autograder", "templates"),
        # Templates are named *.html.j2: escaping must follow that suffix, not ".html".
        autoescape=jinja2.select_autoescape(["html", "html.j2"]), trim_blocks=True,
        lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(filters)
    return env
