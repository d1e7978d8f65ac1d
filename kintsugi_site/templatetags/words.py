"""`{% load words %}{{ event.action|event_words }}` → "Item: decision undone" (core.wording)."""
from django import template

from core.wording import counted as _counted, event_words as _event_words

register = template.Library()


@register.filter(name="event_words")
def event_words(action) -> str:
    return _event_words(str(action or ""))


@register.filter(name="counted")
def counted(n, word: str) -> str:
    """`{{ n|counted:"case" }}` → "1,516 cases"."""
    return _counted(int(n or 0), word)
