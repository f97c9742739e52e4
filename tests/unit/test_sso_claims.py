"""Roles from Keycloak claims, as a pure function."""

from tenants.sso import claims_from_extra_data, roles_from_claims


def test_groups_and_realm_roles_map_to_portal_roles():
    r = roles_from_claims({"groups": ["/tenants/acme/leads", "/tenants/globex/members",
                                      "/other/group"], "roles": ["platform-admin", "x"]})
    assert r.tenants == (("acme", "lead"), ("globex", "member"))
    assert r.platform == {"platform_admin"}


def test_lead_wins_over_member_in_the_same_tenant():
    r = roles_from_claims({"groups": ["/tenants/acme/members", "/tenants/acme/leads"]})
    assert r.tenants == (("acme", "lead"),)


def test_patterns_and_claim_names_are_settings():
    r = roles_from_claims({"grp": ["team-acme-owners"], "realm": ["money"]}, groups_claim="grp",
                          roles_claim="realm", lead_pattern="team-{slug}-owners",
                          finance_role="money")
    assert r.tenants == (("acme", "lead"),) and r.platform == {"finance"}


def test_nothing_in_the_claims_means_no_roles():
    r = roles_from_claims({})
    assert r.tenants == () and r.platform == frozenset()


def test_group_paths_must_match_exactly():
    r = roles_from_claims({"groups": ["/tenants/acme/leads/extra", "tenants/acme/leads",
                                      "/tenants/Acme/leads"]})
    assert r.tenants == ()


def test_extra_data_merges_id_token_and_userinfo():
    claims = claims_from_extra_data({"id_token": {"sub": "1", "groups": ["a"]},
                                     "userinfo": {"groups": ["b"]}})
    assert claims == {"sub": "1", "groups": ["b"]}
    assert claims_from_extra_data({"sub": "2"}) == {"sub": "2"}
