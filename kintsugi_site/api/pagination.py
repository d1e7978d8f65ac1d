from rest_framework.pagination import LimitOffsetPagination

from kintsugi_site.api.errors import ApiError


class Pagination(LimitOffsetPagination):
    """`?limit=&offset=` on every list. Unlike DRF's default, a limit or offset that is not a number is a
    400 rather than silently ignored; a limit above `max_limit` is clamped to it."""

    default_limit = 50
    max_limit = 200

    def get_limit(self, request):
        if self.limit_query_param in request.query_params:
            self._check(request, self.limit_query_param, minimum=1)
        return super().get_limit(request)

    def get_offset(self, request):
        if self.offset_query_param in request.query_params:
            self._check(request, self.offset_query_param, minimum=0)
        return super().get_offset(request)

    def _check(self, request, name: str, *, minimum: int) -> None:
        values = request.query_params.getlist(name)
        if len(values) != 1 or not values[0].isdigit() or int(values[0]) < minimum:
            raise ApiError(f"{name} must be a whole number of at least {minimum}", code="invalid",
                           details={name: values})

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            minimum = 1 if parameter["name"] == self.limit_query_param else 0
            parameter["schema"] = parameter["schema"] | {"minimum": minimum}
        return parameters
