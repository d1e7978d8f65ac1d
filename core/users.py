"""The person a command acts as (the CLI's --user)."""
from django.contrib.auth import get_user_model


def get_user(username: str):
    User = get_user_model()
    try:
        return User.objects.get(username=username)
    except User.DoesNotExist:
        raise LookupError(f"unknown user {username!r}") from None
