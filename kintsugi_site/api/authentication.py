from rest_framework.authentication import TokenAuthentication


class BearerTokenAuthentication(TokenAuthentication):
    """The same API token sent as `Authorization: Bearer <key>`, the scheme MCP clients use, so one
    header works for both the REST API and the MCP endpoint."""

    keyword = "Bearer"
