from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from core.audit import trail
from provenance.access import membership
from core.commands import KintsugiCommand
from core.vocabulary import AuditAction, Role, Via
from provenance.models import Workspace
from provenance.recording.services import desk_run

DEMO_USERS = [
    # username, group, superuser
    ("lead", Role.SUPPORT_LEAD, False),
    ("reviewer", Role.REVIEWER, False),
    ("auditor", Role.AUDITOR, False),
    ("admin", None, True),
]
DEMO_PASSWORD = "kintsugi-demo"


class Command(KintsugiCommand):
    help = "Record the canonical scenario into workspace 'demo' (once) and create the demo users."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", default="demo")
        parser.add_argument("--rerecord", action="store_true", help="record the scenario again")

    def handle(self, *args, **o):
        ws = Workspace.objects.filter(name=o["workspace"]).first()
        if ws is None or ws.run_number == 0 or o["rerecord"]:
            summary = desk_run(workspace=o["workspace"], reason="demo set-up")
            self.stdout.write(f"recorded the canonical scenario into {o['workspace']!r}: {summary['actions']} actions")
            ws = Workspace.objects.get(name=o["workspace"])
        else:
            self.stdout.write(f"workspace {o['workspace']!r} already recorded (run {ws.run_number}); kept")
        User = get_user_model()
        people = []
        for username, group, superuser in DEMO_USERS:
            user, created = User.objects.get_or_create(username=username, defaults={"is_staff": True})
            if created:
                user.set_password(DEMO_PASSWORD)
            user.is_staff = True
            user.is_superuser = superuser
            user.save()
            if group and Group.objects.filter(name=group).exists():
                user.groups.add(Group.objects.get(name=group))
            people.append(user)
            if created:  # users are system events: the system chain, not a workspace's
                trail.record(action=AuditAction.USER_CREATED, subject_type="user", subject_id=user.pk, via=Via.CLI, workspace=None,
                             reason="demo set-up", data={"username": username, "group": group, "superuser": superuser})
        # Through the membership service, so the demo's record says who added the team and why.
        admin = next(u for u in people if u.is_superuser)
        membership.set_members(workspace=ws, users=list(ws.members.all()) + people, actor=admin,
                               reason="demo set-up", via=Via.CLI)
        self.stdout.write("demo users (password: %s): %s" % (
            DEMO_PASSWORD, ", ".join(f"{u} ({g or 'superuser'})" for u, g, _ in DEMO_USERS)))
