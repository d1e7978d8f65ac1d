from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    """`?limit=&offset=` on every list; a limit above `max_limit` is clamped to it."""

    default_limit = 50
    max_limit = 200
