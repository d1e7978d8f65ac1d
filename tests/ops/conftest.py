from tests.api.conftest import make_user  # noqa: F401  (people with API tokens, as the API tests make them)
