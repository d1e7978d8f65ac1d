"""`{% load stories %}{% with s=ticket_stories|story_of:t.ticket %}…{% endwith %}`: a ticket's before →
after story (repairs.ticket_story) out of the dict a page or a report passes."""
from django import template

register = template.Library()


@register.filter(name="story_of")
def story_of(stories, ticket):
    return (stories or {}).get(ticket)
