"""The pages' form base and fields. A number field's range and messages are
``shardcore.limits``': a number is read as the command line reads it (``limits.parse``:
``1e6``, ``1_000_000``, ``1M``) and checked by the parameter's own function there, so the
page and ``shardyard`` accept and refuse the same values with the same words."""

from __future__ import annotations

from collections.abc import Callable

from django import forms
from django.utils.html import escape
from django.utils.safestring import SafeString

from shardcore import limits
from webapp.catalog.errors import CatalogError, checked


class LimitField(forms.CharField):
    """A number checked by ``check`` (e.g. ``limits.seq_len``); shown as text with a
    numeric keyboard, so that ``1e6`` and ``1M`` can be typed."""

    def __init__(self, *, name: str, check: Callable[[int | float], int | float], **kwargs):
        self.limit_name, self.check = name, check
        kwargs.setdefault("widget", forms.TextInput(attrs={"inputmode": "decimal"}))
        super().__init__(**kwargs)

    def to_python(self, value):
        text = super().to_python(value)
        if text in self.empty_values:
            return None
        try:
            return checked(lambda: self.check(limits.parse(self.limit_name, text)))
        except CatalogError as exc:
            raise forms.ValidationError(str(exc), code="limits") from None


class Form(forms.Form):
    """A form whose help texts are plain text. Django renders a field's help text as HTML,
    so "read as <annotator>.<column>" showed as "read as ." (the browser took the
    placeholders for tags); here each is escaped once, when its bound field is made for
    rendering, after ``__init__`` has added what it adds."""

    def __getitem__(self, name):
        bound = super().__getitem__(name)  # made once per field and cached
        if bound.help_text and not isinstance(bound.help_text, SafeString):
            bound.help_text = escape(bound.help_text)
        return bound
