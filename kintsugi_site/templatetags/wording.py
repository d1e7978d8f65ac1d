"""`{% load wording %}{{ n|thousands }}` → "1,516": counts people read, with separators (core.wording)."""
from django import template

register = template.Library()


@register.filter(name="thousands")
def thousands(value) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "" if value is None else str(value)
