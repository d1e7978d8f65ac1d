"""The review queue's paginator: exact counts from the maintained totals when the filters allow, a capped
row count otherwise, so a page of a 100k-item queue never counts every row."""
from __future__ import annotations

from django.core.paginator import EmptyPage, PageNotAnInteger, Paginator
from django.utils.functional import cached_property


class CappedCount(int):
    """A row count that stopped counting past `cap`: compares and pages as cap + 1 rows, reads "10,000+"
    wherever the admin prints a count (paginator line, "Select all …", search results)."""

    def __new__(cls, cap: int):
        count = super().__new__(cls, cap + 1)
        count.cap = cap
        return count

    def __str__(self) -> str:
        return f"{self.cap:,}+"

    def __repr__(self) -> str:
        return f"CappedCount({self.cap})"


class QueuePaginator(Paginator):
    """The review queue's paginator: the count is `known_count` when the caller has it exactly (from the
    maintained totals), otherwise rows are counted up to CAP + 1 only, so a filter matching 60k rows of a
    100k queue costs a LIMIT, not a COUNT over all of them (Django's exact COUNT visited every row).

    Past the cap the last page is unknown: any page number is accepted (a page past the end is empty) and
    the page links end in "…" instead of a last page number."""

    CAP = 10_000

    def __init__(self, object_list, per_page, orphans=0, allow_empty_first_page=True, *, known_count: int | None = None):
        super().__init__(object_list, per_page, orphans, allow_empty_first_page)
        self.known_count = known_count

    @cached_property
    def count(self) -> int:
        if self.known_count is not None:
            return self.known_count
        # SELECT count(*) FROM (SELECT … LIMIT CAP + 1): without ORDER BY, so no sort or ordered scan.
        counted = self.object_list.order_by()[: self.CAP + 1].count()
        return CappedCount(self.CAP) if counted > self.CAP else counted

    @property
    def capped(self) -> bool:
        return isinstance(self.count, CappedCount)

    def validate_number(self, number):
        if not self.capped:
            return super().validate_number(number)
        try:
            if isinstance(number, float) and not number.is_integer():
                raise ValueError
            number = int(number)
        except (TypeError, ValueError):
            raise PageNotAnInteger(self.error_messages["invalid_page"])
        if number < 1:
            raise EmptyPage(self.error_messages["min_page"])
        return number

    def page(self, number):
        if not self.capped:
            return super().page(number)
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        return self._get_page(self.object_list[bottom:bottom + self.per_page], number, self)

    def get_elided_page_range(self, number=1, *, on_each_side=3, on_ends=2):
        if not self.capped:
            yield from super().get_elided_page_range(number, on_each_side=on_each_side, on_ends=on_ends)
            return
        number = self.validate_number(number)
        if number > on_each_side + on_ends + 2:
            yield from range(1, on_ends + 1)
            yield self.ELLIPSIS
            yield from range(number - on_each_side, number + 1)
        else:
            yield from range(1, number + 1)
        yield from range(number + 1, number + on_each_side + 1)
        yield self.ELLIPSIS
