from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import TokenAuthentication


class BearerTokenAuthentication(TokenAuthentication):
    """The same API token sent as `Authorization: Bearer <key>`, the scheme MCP clients use, so one
    header works for both the REST API and the MCP endpoint."""

    keyword = "Bearer"


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """The schema's name for the Bearer scheme. drf-spectacular's token extension also matches subclasses,
    so without this both classes come out as `tokenAuth` with different headers (drf_spectacular.W001)."""

    target_class = BearerTokenAuthentication
    name = "bearerAuth"
    priority = 1  # above the contrib TokenScheme, which would claim this subclass

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "The API token as `Authorization: Bearer <key>` (the scheme MCP clients use)."}
