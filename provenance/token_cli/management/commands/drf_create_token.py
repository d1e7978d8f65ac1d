from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from core.commands import KintsugiCommand
from provenance.access import tenancy, tokens


class Command(KintsugiCommand):
    help = ("Create an API token for USERNAME and print its key, as DRF's command does. Only a digest of a key "
            "is stored, so an existing token cannot be shown again: each call issues a new key that replaces "
            "the user's token (audited; the old key is refused from then on). -r/--reset is accepted and "
            "changes nothing. `manage.py api_token` also sets an expiry.")

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("-r", "--reset", action="store_true", dest="reset_token",
                            help="replace the user's token (every call does: a stored key cannot be shown)")
        parser.add_argument("--reason", default="issued with drf_create_token", help="why (kept in the audit record)")

    def handle(self, *args, **o):
        users = get_user_model()._default_manager
        try:
            user = users.get_by_natural_key(o["username"])
        except get_user_model().DoesNotExist:
            raise CommandError(f"Cannot create the Token: user {o['username']} does not exist") from None
        _, key = tokens.issue_api_token(user=user, actor=None, reason=o["reason"], via=tenancy.OPERATOR_VIA)
        self.stdout.write(f"Generated token {key} for user {o['username']}")
