from core.commands import KintsugiCommand
from core.users import get_user
from core.vocabulary import Via
from provenance.access import tokens

VIA = Via.CLI


class Command(KintsugiCommand):
    help = ("A person's API token (the REST API and MCP): `issue` (or rotate: the old key is refused from then "
            "on) with an optional expiry, printing the key once; `list` shows each token's prefix, creation, expiry "
            "and last use.")

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="what", required=True)
        p = sub.add_parser("issue", help="issue or rotate USERNAME's token")
        p.add_argument("username")
        p.add_argument("--expires-in", type=int, metavar="DAYS", help="refused after this many days (default: never)")
        p.add_argument("--user", required=True, help="whom to attribute the act to")
        p.add_argument("--reason", required=True)
        p.add_argument("--json", action="store_true")
        p = sub.add_parser("list", help="every API token: prefix, user, created, expires, last used")
        p.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        if o["what"] == "list":
            rows = tokens.api_token_rows()
            if o["json"]:
                return self.print_json(rows)
            for r in rows:
                self.stdout.write(f"{r['prefix']}…  {r['user']}  created {r['created']:%Y-%m-%d}  expires "
                                  f"{r['expires_at'] or 'never'}  last used {r['last_used_at'] or 'never'}")
            return
        user = get_user(o["username"])
        token, key = tokens.issue_api_token(user=user, expires_in_days=o["expires_in"], actor=get_user(o["user"]),
                                            reason=o["reason"], via=VIA)
        if o["json"]:
            return self.print_json({"user": user.get_username(), "key": key,
                                    "expires_at": token.lease.expires_at})
        self.stdout.write(key)
