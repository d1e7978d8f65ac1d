"""The role groups and their permissions, as the data migrations and every test's users get them."""
import pytest
from django.contrib.auth.models import Group, Permission

from core import roles

pytestmark = pytest.mark.django_db


def _granted() -> dict[str, set[str]]:
    return {g.name: {f"{p.content_type.app_label}.{p.codename}" for p in g.permissions.all()}
            for g in Group.objects.filter(name__in=roles.ROLES).prefetch_related("permissions__content_type")}


def test_each_role_gets_exactly_its_permissions_even_after_its_groups_were_dropped():
    Group.objects.filter(name__in=roles.ROLES).delete()
    roles.ensure_roles()
    assert _granted() == {name: set(perms) for name, perms in roles.ROLES.items()}


def test_granting_again_changes_nothing_and_takes_a_handful_of_queries(django_assert_max_num_queries):
    roles.ensure_roles()  # a transactional test before this one may have emptied the groups
    before = _granted()
    with django_assert_max_num_queries(1 + 4 * 2):  # the permissions; per group its row and one insert
        roles.ensure_roles()
    assert _granted() == before


def test_a_role_naming_a_missing_permission_is_refused_unless_a_later_migration_grants_it(monkeypatch):
    monkeypatch.setitem(roles.ROLES, roles.AUDITOR, [*roles.ROLES[roles.AUDITOR], "repairs.no_such_thing"])
    with pytest.raises(LookupError, match="repairs.no_such_thing"):
        roles.grant_roles(Group, Permission)
    roles.grant_roles(Group, Permission, missing_ok=True)
    assert "repairs.view_incident" in _granted()[roles.AUDITOR]
