from compensation.review import policies
from compensation.models import ReviewPolicy
from core.commands import KintsugiCommand
from core.users import get_user
from core.vocabulary import Via
from provenance.access import tenancy
from repairs.models import Incident
from core.wording import counted, past


class Command(KintsugiCommand):
    help = ("Decide many pending items of one incident by a rule, with four eyes on the rule. --preview prints "
            "what the rule matches (nothing changes); --propose stores it as --user; --apply --policy ID decides "
            "exactly the previewed items as a second --user. Rules: kind=correction_email, amount<5000 (cents), "
            "validated=true, ticket=t05, joined by commas or AND. Refusals exit 2.")

    def add_arguments(self, parser):
        parser.add_argument("--incident", type=int)
        parser.add_argument("--rule")
        mode = parser.add_mutually_exclusive_group(required=True)
        mode.add_argument("--preview", action="store_true")
        mode.add_argument("--propose", action="store_true")
        mode.add_argument("--apply", action="store_true")
        parser.add_argument("--policy", type=int, help="The proposed policy to apply.")
        parser.add_argument("--decision", choices=ReviewPolicy.Decision.values, default="approve")
        parser.add_argument("--user")
        parser.add_argument("--reason", default="")
        parser.add_argument("--json", action="store_true")

    def _incident(self, o, user):
        if not o["incident"]:
            raise ValueError("--incident is required")
        qs = Incident.objects.defer("plan", "verification")
        if user is not None:
            qs = tenancy.scoped(qs, user=user)
        incident = qs.filter(pk=o["incident"]).first()
        if incident is None:
            raise LookupError(f"unknown incident {o['incident']}")
        return incident

    def handle(self, *args, **o):
        user = get_user(o["user"]) if o["user"] else None
        if o["apply"]:
            if not (o["policy"] and user):
                raise ValueError("--apply needs --policy ID and --user (not the policy's author)")
            policy = ReviewPolicy.objects.select_related("incident").filter(pk=o["policy"]).first()
            if policy is None or not tenancy.may_see(user, policy.incident.workspace_id):
                raise LookupError(f"unknown policy {o['policy']}")
            out = {"policy": policy.pk, **policies.apply(policy=policy, actor=user, reason=o["reason"], via=Via.CLI)}
            return self._print(o, out, f"policy #{policy.pk}: {counted(out['decided'], 'item')} {past(out['decision'])}, "
                                       f"{len(out['refusals']):,} refused, {out['skipped']:,} no longer matching")
        if not o["rule"]:
            raise ValueError("--rule is required")
        incident = self._incident(o, user)
        if o["preview"]:
            found = policies.preview(incident=incident, rule=o["rule"])
            return self._print(o, found.as_dict(), f"{counted(found.cases, 'case')}, {counted(found.items, 'item')}, "
                                                   f"{found.amount_cents:,} cents would be {past(o['decision'])}")
        if user is None:
            raise ValueError("--propose needs --user")
        policy = policies.propose(incident=incident, rule=o["rule"], decision=o["decision"], actor=user,
                                  reason=o["reason"], via=Via.CLI)
        found = policies.preview(incident=incident, rule=o["rule"])
        self._print(o, {"policy": policy.pk, **found.as_dict()},
                    f"policy #{policy.pk} proposed: {counted(found.items, 'item')}; another person applies it")

    def _print(self, o, data, line):
        if o["json"]:
            self.print_json(data)
        else:
            self.stdout.write(line)
