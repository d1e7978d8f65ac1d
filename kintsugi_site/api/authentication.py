from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from provenance.access import tokens


class ExpiringTokenAuthentication(TokenAuthentication):
    """DRF's token authentication, refusing an expired token and recording its last use
    (provenance.access.tokens: at most one write a minute per token)."""

    def authenticate_credentials(self, key):
        try:
            found = tokens.api_token_user(key)
        except tokens.TokenExpired as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        if found is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        return found


class BearerTokenAuthentication(ExpiringTokenAuthentication):
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
