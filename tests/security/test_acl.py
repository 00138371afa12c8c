"""The ACL model and Kafka's authorization rules, as tables of cases.

ACLs are written compactly: ``"TOPIC LITERAL orders User:alice * READ ALLOW"`` (resource
type, pattern type, resource name, principal, host, operation, permission). The decision
tables cover every implied-operation rule for ALLOW and DENY, DENY over ALLOW across
patterns, ``User:*`` and host matching, LITERAL / PREFIXED / wildcard names, the no-ACL
default, super users and authorize_by_resource_type (KIP-679); a Hypothesis test checks the
indexed decision (bisecting prefixes) against a brute-force model of Kafka's rules.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semel.broker.security import (
    ANONYMOUS,
    AclOperation,
    AclPermissionType,
    PatternType,
    Principal,
    ResourceType,
)
from semel.broker.security.acl import AclBinding, AclBindingFilter, from_code, validate_new_acl
from semel.broker.security.authorizer import (
    AclIndex,
    Authorizer,
    decide,
    decide_by_resource_type,
    parse_super_users,
)
from semel.protocol.errors import Error, KafkaError

Op = AclOperation
ALICE = "User:alice"
HOST = "10.0.0.1"


def acl(text: str) -> AclBinding:
    rtype, pattern, name, principal, host, op, perm = text.split()
    return AclBinding(
        ResourceType[rtype],
        name,
        PatternType[pattern],
        principal,
        host,
        AclOperation[op],
        AclPermissionType[perm],
    )


def allowed(
    acls: list[str],
    op: AclOperation,
    name: str = "orders",
    *,
    rtype: ResourceType = ResourceType.TOPIC,
    principal: str = ALICE,
    host: str = HOST,
    allow_everyone: bool = False,
    super_users: frozenset[str] = frozenset(),
) -> bool:
    index = AclIndex(acl(a) for a in acls)
    return decide(index, super_users, allow_everyone, principal, host, op, rtype, name)[0]


CONCRETE_OPS = [op for op in AclOperation if op not in (Op.UNKNOWN, Op.ANY)]
OPS_BUT_ALL = [op for op in CONCRETE_OPS if op != Op.ALL]

# Kafka's AuthorizerTest.testAclInheritance: what an ALLOW of each operation allows
ALLOW_IMPLIES = {
    Op.ALL: set(CONCRETE_OPS),
    Op.READ: {Op.READ, Op.DESCRIBE},
    Op.WRITE: {Op.WRITE, Op.DESCRIBE},
    Op.DELETE: {Op.DELETE, Op.DESCRIBE},
    Op.ALTER: {Op.ALTER, Op.DESCRIBE},
    Op.ALTER_CONFIGS: {Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS},
    Op.DESCRIBE: {Op.DESCRIBE},
    Op.DESCRIBE_CONFIGS: {Op.DESCRIBE_CONFIGS},
    Op.CREATE: {Op.CREATE},
    Op.CLUSTER_ACTION: {Op.CLUSTER_ACTION},
    Op.IDEMPOTENT_WRITE: {Op.IDEMPOTENT_WRITE},
    Op.CREATE_TOKENS: {Op.CREATE_TOKENS},
    Op.DESCRIBE_TOKENS: {Op.DESCRIBE_TOKENS},
    Op.TWO_PHASE_COMMIT: {Op.TWO_PHASE_COMMIT},
}


@pytest.mark.parametrize("granted", list(ALLOW_IMPLIES))
def test_allow_implies_exactly_kafkas_operations(granted):
    acls = [f"TOPIC LITERAL orders {ALICE} * {granted.name} ALLOW"]
    got = {op for op in CONCRETE_OPS if allowed(acls, op)}
    assert got == ALLOW_IMPLIES[granted]


@pytest.mark.parametrize("denied", CONCRETE_OPS)
def test_deny_denies_only_its_own_operation_and_all_denies_everything(denied):
    # an ALLOW of ALL, then a DENY: DENY READ leaves DESCRIBE allowed, DENY ALL nothing
    acls = [
        f"TOPIC LITERAL orders {ALICE} * ALL ALLOW",
        f"TOPIC LITERAL orders {ALICE} * {denied.name} DENY",
    ]
    got = {op for op in CONCRETE_OPS if allowed(acls, op)}
    expected = set() if denied == Op.ALL else set(CONCRETE_OPS) - {denied}
    assert got == expected


@pytest.mark.parametrize(
    "deny, op",
    [("READ", Op.DESCRIBE), ("WRITE", Op.DESCRIBE), ("ALTER_CONFIGS", Op.DESCRIBE_CONFIGS)],
)
def test_deny_of_an_implying_operation_does_not_deny_the_implied_one(deny, op):
    acls = [
        f"TOPIC LITERAL orders {ALICE} * {deny} DENY",
        f"TOPIC LITERAL orders {ALICE} * {op.name} ALLOW",
    ]
    assert allowed(acls, op)


DENY_WINS = [
    # (ACLs, name asked for): each has an ALLOW and a DENY that both apply
    (
        [
            "TOPIC LITERAL orders User:alice * READ ALLOW",
            "TOPIC LITERAL orders User:alice * READ DENY",
        ],
        "orders",
    ),
    (
        [
            "TOPIC LITERAL orders User:alice * READ ALLOW",
            "TOPIC PREFIXED ord User:alice * READ DENY",
        ],
        "orders",
    ),
    (
        [
            "TOPIC PREFIXED ord User:alice * READ ALLOW",
            "TOPIC LITERAL orders User:alice * READ DENY",
        ],
        "orders",
    ),
    (
        ["TOPIC LITERAL * User:alice * READ ALLOW", "TOPIC LITERAL orders User:alice * READ DENY"],
        "orders",
    ),
    (
        ["TOPIC LITERAL orders User:alice * READ ALLOW", "TOPIC LITERAL * User:alice * READ DENY"],
        "orders",
    ),
    (
        ["TOPIC LITERAL orders User:alice * READ ALLOW", "TOPIC LITERAL orders User:* * READ DENY"],
        "orders",
    ),
    (
        [
            "TOPIC LITERAL orders User:* * READ ALLOW",
            "TOPIC PREFIXED o User:alice 10.0.0.1 ALL DENY",
        ],
        "orders",
    ),
    (
        [
            "TOPIC PREFIXED o User:alice * READ ALLOW",
            "TOPIC PREFIXED or User:alice * READ DENY",
            "TOPIC PREFIXED orde User:alice * READ ALLOW",
        ],
        "orders",
    ),
]


@pytest.mark.parametrize("acls, name", DENY_WINS)
def test_deny_wins_over_allow(acls, name):
    assert not allowed(acls, Op.READ, name)
    allows_only = [a for a in acls if a.endswith("ALLOW")]
    assert allowed(allows_only, Op.READ, name)


MATCHING = [
    # (ACL, resource name, principal, host, applies)
    ("TOPIC LITERAL orders User:alice * READ ALLOW", "orders", ALICE, HOST, True),
    ("TOPIC LITERAL orders User:alice * READ ALLOW", "orders2", ALICE, HOST, False),
    ("TOPIC LITERAL orders User:alice * READ ALLOW", "order", ALICE, HOST, False),
    ("TOPIC LITERAL orders User:alice * READ ALLOW", "orders", "User:bob", HOST, False),
    ("TOPIC LITERAL orders User:alice * READ ALLOW", "orders", "Group:alice", HOST, False),
    ("TOPIC LITERAL orders User:* * READ ALLOW", "orders", "User:bob", HOST, True),
    ("TOPIC LITERAL orders User:* * READ ALLOW", "orders", "Group:ops", HOST, True),
    ("TOPIC LITERAL orders Group:* * READ ALLOW", "orders", "Group:ops", HOST, False),
    ("TOPIC LITERAL orders User:alice 10.0.0.1 READ ALLOW", "orders", ALICE, "10.0.0.1", True),
    ("TOPIC LITERAL orders User:alice 10.0.0.1 READ ALLOW", "orders", ALICE, "10.0.0.2", False),
    ("TOPIC LITERAL orders User:alice * READ ALLOW", "orders", ALICE, "::1", True),
    ("TOPIC PREFIXED ord User:alice * READ ALLOW", "orders", ALICE, HOST, True),
    ("TOPIC PREFIXED ord User:alice * READ ALLOW", "ord", ALICE, HOST, True),
    ("TOPIC PREFIXED ord User:alice * READ ALLOW", "or", ALICE, HOST, False),
    ("TOPIC PREFIXED ord User:alice * READ ALLOW", "xorders", ALICE, HOST, False),
    ("TOPIC PREFIXED orders-eu User:alice * READ ALLOW", "orders", ALICE, HOST, False),
    ("TOPIC LITERAL * User:alice * READ ALLOW", "anything", ALICE, HOST, True),
    ("TOPIC LITERAL * User:alice * READ ALLOW", "*", ALICE, HOST, True),
    ("TOPIC PREFIXED * User:alice * READ ALLOW", "anything", ALICE, HOST, False),
    ("TOPIC PREFIXED * User:alice * READ ALLOW", "*x", ALICE, HOST, True),
    ("GROUP LITERAL orders User:alice * READ ALLOW", "orders", ALICE, HOST, False),
    ("GROUP LITERAL * User:alice * READ ALLOW", "orders", ALICE, HOST, False),
]


@pytest.mark.parametrize("text, name, principal, host, applies", MATCHING)
def test_which_acls_apply(text, name, principal, host, applies):
    assert allowed([text], Op.READ, name, principal=principal, host=host) is applies


def test_prefix_scan_finds_every_prefix_among_neighbours():
    # names that sort between the prefixes of "orders-eu-1" must not hide them
    acls = [
        "TOPIC PREFIXED o User:alice * READ ALLOW",
        "TOPIC PREFIXED oa User:alice * WRITE ALLOW",
        "TOPIC PREFIXED orders User:alice * DELETE ALLOW",
        "TOPIC PREFIXED orders-a User:alice * ALTER ALLOW",
        "TOPIC PREFIXED orders-eu User:alice * CREATE ALLOW",
        "TOPIC PREFIXED orders-eu-1-x User:alice * ALTER_CONFIGS ALLOW",
        "TOPIC PREFIXED orders-eu-2 User:alice * CLUSTER_ACTION ALLOW",
        "TOPIC PREFIXED p User:alice * IDEMPOTENT_WRITE ALLOW",
    ]
    got = {op for op in OPS_BUT_ALL if allowed(acls, op, "orders-eu-1")}
    assert got == {Op.READ, Op.DELETE, Op.CREATE, Op.DESCRIBE}


@pytest.mark.parametrize(
    "acls, allow_everyone, expected",
    [
        ([], False, False),
        ([], True, True),
        # ACLs on another resource or type leave the no-ACL rule in place
        (["TOPIC LITERAL payments User:bob * READ ALLOW"], True, True),
        (["GROUP LITERAL orders User:bob * READ ALLOW"], True, True),
        # an ACL that names the resource, even for someone else, ends "everyone"
        (["TOPIC LITERAL orders User:bob * READ ALLOW"], True, False),
        (["TOPIC PREFIXED or User:bob * WRITE ALLOW"], True, False),
        (["TOPIC LITERAL * User:bob 1.2.3.4 READ ALLOW"], True, False),
        (["TOPIC LITERAL orders User:alice 1.2.3.4 READ ALLOW"], True, False),
    ],
)
def test_no_acl_found_rule(acls, allow_everyone, expected):
    assert allowed(acls, Op.READ, allow_everyone=allow_everyone) is expected


def test_super_users_pass_every_check_even_a_deny():
    acls = [
        "TOPIC LITERAL orders User:admin * ALL DENY",
        "CLUSTER LITERAL kafka-cluster User:* * ALL DENY",
    ]
    supers = frozenset({"User:admin"})
    for op in CONCRETE_OPS:
        assert allowed(acls, op, principal="User:admin", super_users=supers)
        assert allowed(
            acls,
            op,
            "kafka-cluster",
            rtype=ResourceType.CLUSTER,
            principal="User:admin",
            super_users=supers,
        )
    assert not allowed(acls, Op.READ, principal="User:ops", super_users=supers)


def test_decide_names_the_rule():
    index = AclIndex([acl("TOPIC LITERAL orders User:alice * READ DENY")])
    assert decide(
        index, frozenset(), False, ALICE, HOST, Op.READ, ResourceType.TOPIC, "orders"
    ) == (False, acl("TOPIC LITERAL orders User:alice * READ DENY"))
    assert decide(
        index, frozenset(), False, ALICE, HOST, Op.WRITE, ResourceType.TOPIC, "orders"
    ) == (False, "DefaultDeny")
    assert decide(index, frozenset(), True, ALICE, HOST, Op.WRITE, ResourceType.TOPIC, "other") == (
        True,
        "DefaultAllow",
    )
    assert decide(
        index, frozenset({ALICE}), False, ALICE, HOST, Op.READ, ResourceType.TOPIC, "orders"
    ) == (True, "SuperUser")


def test_authorizer_takes_principal_objects():
    authorizer = Authorizer([acl("TOPIC LITERAL t User:ANONYMOUS * WRITE ALLOW")])
    assert authorizer.authorize(ANONYMOUS, HOST, Op.WRITE, ResourceType.TOPIC, "t")
    assert not authorizer.authorize(Principal("User", "x"), HOST, Op.WRITE, ResourceType.TOPIC, "t")


def test_authorized_operations_bit_field():
    authorizer = Authorizer(
        [
            acl("TOPIC LITERAL t User:alice * READ ALLOW"),
            acl("TOPIC LITERAL t User:alice * ALTER_CONFIGS ALLOW"),
        ]
    )
    bits = authorizer.authorized_operations(ALICE, HOST, ResourceType.TOPIC, "t")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE) | (1 << Op.ALTER_CONFIGS) | (
        1 << Op.DESCRIBE_CONFIGS
    )
    assert authorizer.authorized_operations(ALICE, HOST, ResourceType.TOPIC, "u") == 0


# --- authorize_by_resource_type (Kafka's AuthorizerTest.testAuthorizeByResourceType*) ----

BY_TYPE = [
    # (ACLs, operation, allow_everyone, expected)
    ([], Op.WRITE, False, False),
    ([], Op.WRITE, True, True),
    (["TOPIC LITERAL t User:alice * WRITE ALLOW"], Op.WRITE, False, True),
    (["TOPIC LITERAL t User:alice * WRITE ALLOW"], Op.READ, False, False),
    (["TOPIC LITERAL t User:alice * ALL ALLOW"], Op.WRITE, False, True),
    (["TOPIC LITERAL t User:* * WRITE ALLOW"], Op.WRITE, False, True),
    (["TOPIC LITERAL t User:bob * WRITE ALLOW"], Op.WRITE, False, False),
    (["TOPIC LITERAL t User:alice 1.2.3.4 WRITE ALLOW"], Op.WRITE, False, False),
    (["GROUP LITERAL t User:alice * WRITE ALLOW"], Op.WRITE, False, False),
    # implications do not count: READ does not make "DESCRIBE some topic"
    (["TOPIC LITERAL t User:alice * READ ALLOW"], Op.DESCRIBE, False, False),
    (
        ["TOPIC LITERAL t User:alice * WRITE ALLOW", "TOPIC LITERAL t User:alice * WRITE DENY"],
        Op.WRITE,
        False,
        False,
    ),
    (
        ["TOPIC LITERAL t User:alice * WRITE ALLOW", "TOPIC LITERAL u User:alice * WRITE DENY"],
        Op.WRITE,
        False,
        True,
    ),
    (
        ["TOPIC LITERAL foo User:alice * WRITE ALLOW", "TOPIC PREFIXED f User:alice * WRITE DENY"],
        Op.WRITE,
        False,
        False,
    ),
    (
        [
            "TOPIC PREFIXED foo User:alice * WRITE ALLOW",
            "TOPIC LITERAL foo User:alice * WRITE DENY",
        ],
        Op.WRITE,
        False,
        True,
    ),
    (
        [
            "TOPIC PREFIXED foo User:alice * WRITE ALLOW",
            "TOPIC PREFIXED fo User:alice * WRITE DENY",
        ],
        Op.WRITE,
        False,
        False,
    ),
    (
        [
            "TOPIC PREFIXED foo User:alice * WRITE ALLOW",
            "TOPIC PREFIXED foob User:alice * WRITE DENY",
        ],
        Op.WRITE,
        False,
        True,
    ),
    (["TOPIC LITERAL * User:alice * WRITE ALLOW"], Op.WRITE, False, True),
    (
        ["TOPIC LITERAL * User:alice * WRITE ALLOW", "TOPIC PREFIXED a User:alice * WRITE DENY"],
        Op.WRITE,
        False,
        True,
    ),
    (
        ["TOPIC LITERAL t User:alice * WRITE ALLOW", "TOPIC LITERAL * User:* * WRITE DENY"],
        Op.WRITE,
        False,
        False,
    ),
    (
        ["TOPIC LITERAL * User:alice * WRITE ALLOW", "TOPIC LITERAL * User:alice * ALL DENY"],
        Op.WRITE,
        False,
        False,
    ),
    (
        ["TOPIC LITERAL t User:alice * WRITE ALLOW", "TOPIC LITERAL * User:bob * WRITE DENY"],
        Op.WRITE,
        False,
        True,
    ),
    # allow.everyone applies through the "some unnamed topic" check
    (["TOPIC LITERAL t User:bob * WRITE ALLOW"], Op.WRITE, True, True),
    (["TOPIC PREFIXED h User:bob * WRITE ALLOW"], Op.WRITE, True, False),
]


@pytest.mark.parametrize("acls, op, allow_everyone, expected", BY_TYPE)
def test_authorize_by_resource_type(acls, op, allow_everyone, expected):
    index = AclIndex(acl(a) for a in acls)
    got = decide_by_resource_type(
        index, frozenset(), allow_everyone, ALICE, HOST, op, ResourceType.TOPIC
    )
    assert got is expected


def test_authorize_by_resource_type_super_user_and_bad_arguments():
    index = AclIndex([acl("TOPIC LITERAL * User:* * ALL DENY")])
    assert decide_by_resource_type(
        index, frozenset({ALICE}), False, ALICE, HOST, Op.WRITE, ResourceType.TOPIC
    )
    with pytest.raises(ValueError):
        decide_by_resource_type(index, frozenset(), False, ALICE, HOST, Op.ANY, ResourceType.TOPIC)
    with pytest.raises(ValueError):
        decide_by_resource_type(index, frozenset(), False, ALICE, HOST, Op.WRITE, ResourceType.ANY)


# --- filters (Kafka's ResourcePatternFilterTest / AclBindingFilter) ---------------------


def rfilter(rtype: str, name: str | None, pattern: str) -> AclBindingFilter:
    return AclBindingFilter(ResourceType[rtype], name, PatternType[pattern])


FILTERS = [
    # (filter, ACL, matches)
    (rfilter("ANY", None, "ANY"), "TOPIC LITERAL t User:a * READ ALLOW", True),
    (rfilter("ANY", None, "ANY"), "GROUP PREFIXED g User:a * READ DENY", True),
    (rfilter("TOPIC", None, "ANY"), "GROUP LITERAL t User:a * READ ALLOW", False),
    (rfilter("TOPIC", "t", "LITERAL"), "TOPIC LITERAL t User:a * READ ALLOW", True),
    (rfilter("TOPIC", "t", "LITERAL"), "TOPIC PREFIXED t User:a * READ ALLOW", False),
    (rfilter("TOPIC", "t", "LITERAL"), "TOPIC LITERAL * User:a * READ ALLOW", False),
    (rfilter("TOPIC", "t", "PREFIXED"), "TOPIC PREFIXED t User:a * READ ALLOW", True),
    (rfilter("TOPIC", "tx", "PREFIXED"), "TOPIC PREFIXED t User:a * READ ALLOW", False),
    (rfilter("TOPIC", "t", "ANY"), "TOPIC PREFIXED t User:a * READ ALLOW", True),
    (rfilter("TOPIC", "t", "ANY"), "TOPIC LITERAL t User:a * READ ALLOW", True),
    (rfilter("TOPIC", "tx", "ANY"), "TOPIC PREFIXED t User:a * READ ALLOW", False),
    (rfilter("TOPIC", "tx", "ANY"), "TOPIC LITERAL * User:a * READ ALLOW", False),
    (rfilter("TOPIC", "orders", "MATCH"), "TOPIC LITERAL orders User:a * READ ALLOW", True),
    (rfilter("TOPIC", "orders", "MATCH"), "TOPIC LITERAL * User:a * READ ALLOW", True),
    (rfilter("TOPIC", "orders", "MATCH"), "TOPIC PREFIXED ord User:a * READ ALLOW", True),
    (rfilter("TOPIC", "orders", "MATCH"), "TOPIC PREFIXED orders User:a * READ ALLOW", True),
    (rfilter("TOPIC", "orders", "MATCH"), "TOPIC PREFIXED orders2 User:a * READ ALLOW", False),
    (rfilter("TOPIC", "orders", "MATCH"), "TOPIC LITERAL order User:a * READ ALLOW", False),
    (rfilter("TOPIC", "orders", "MATCH"), "TOPIC PREFIXED * User:a * READ ALLOW", False),
    (rfilter("TOPIC", None, "MATCH"), "TOPIC PREFIXED x User:a * READ ALLOW", True),
    (rfilter("ANY", "orders", "MATCH"), "GROUP LITERAL * User:a * READ ALLOW", True),
    (AclBindingFilter(principal="User:a"), "TOPIC LITERAL t User:a * READ ALLOW", True),
    (AclBindingFilter(principal="User:a"), "TOPIC LITERAL t User:* * READ ALLOW", False),
    (AclBindingFilter(host="*"), "TOPIC LITERAL t User:a 1.1.1.1 READ ALLOW", False),
    (AclBindingFilter(host="1.1.1.1"), "TOPIC LITERAL t User:a 1.1.1.1 READ ALLOW", True),
    (AclBindingFilter(operation=Op.READ), "TOPIC LITERAL t User:a * ALL ALLOW", False),
    (AclBindingFilter(operation=Op.ALL), "TOPIC LITERAL t User:a * ALL ALLOW", True),
    (
        AclBindingFilter(permission_type=AclPermissionType.DENY),
        "TOPIC LITERAL t User:a * READ ALLOW",
        False,
    ),
    (
        AclBindingFilter(permission_type=AclPermissionType.DENY),
        "TOPIC LITERAL t User:a * READ DENY",
        True,
    ),
]


@pytest.mark.parametrize("acl_filter, text, matches", FILTERS)
def test_filter_matches(acl_filter, text, matches):
    assert acl_filter.matches(acl(text)) is matches


@pytest.mark.parametrize(
    "acl_filter, reason",
    [
        (AclBindingFilter(), None),
        (AclBindingFilter(resource_type=ResourceType.UNKNOWN), "Unknown patternFilter."),
        (AclBindingFilter(pattern_type=PatternType.UNKNOWN), "Unknown patternFilter."),
        (AclBindingFilter(operation=Op.UNKNOWN), "Unknown entryFilter."),
        (AclBindingFilter(permission_type=AclPermissionType.UNKNOWN), "Unknown entryFilter."),
    ],
)
def test_filter_unknown_reason(acl_filter, reason):
    assert acl_filter.unknown_reason() == reason


# --- validation (AclApis + AclControlManager.validateNewAcl) ---------------------------

INVALID = [
    (
        "CLUSTER LITERAL my-cluster User:a * ALTER ALLOW",
        "The only valid name for the CLUSTER resource is kafka-cluster",
    ),
    (
        "CLUSTER PREFIXED kafka User:a * ALTER ALLOW",
        "The only valid name for the CLUSTER resource is kafka-cluster",
    ),
    ("ANY LITERAL t User:a * READ ALLOW", "Invalid resourceType ANY"),
    ("UNKNOWN LITERAL t User:a * READ ALLOW", "Invalid resourceType UNKNOWN"),
    ("TOPIC MATCH t User:a * READ ALLOW", "Invalid patternType MATCH"),
    ("TOPIC ANY t User:a * READ ALLOW", "Invalid patternType ANY"),
    ("TOPIC UNKNOWN t User:a * READ ALLOW", "Invalid patternType UNKNOWN"),
    ("TOPIC LITERAL t User:a * ANY ALLOW", "Invalid operation ANY"),
    ("TOPIC LITERAL t User:a * UNKNOWN ALLOW", "Invalid operation UNKNOWN"),
    ("TOPIC LITERAL t User:a * READ ANY", "Invalid permissionType ANY"),
    ("TOPIC LITERAL t User:a * READ UNKNOWN", "Invalid permissionType UNKNOWN"),
    (
        "TOPIC LITERAL t alice * READ ALLOW",
        (
            "Could not parse principal from `alice` (no colon is present separating the principal "
            "type from the principal name)"
        ),
    ),
]


@pytest.mark.parametrize("text, message", INVALID)
def test_validate_new_acl_refuses_with_kafkas_message(text, message):
    with pytest.raises(KafkaError) as e:
        validate_new_acl(acl(text))
    assert e.value.code == Error.INVALID_REQUEST and e.value.message == message


def test_validate_new_acl_empty_name():
    binding = acl("TOPIC LITERAL t User:a * READ ALLOW")._replace(resource_name="")
    with pytest.raises(KafkaError, match="Invalid empty resource name"):
        validate_new_acl(binding)


@pytest.mark.parametrize(
    "text",
    [
        "CLUSTER LITERAL kafka-cluster User:a * ALTER ALLOW",
        "TOPIC PREFIXED * User:* * READ DENY",
        "TRANSACTIONAL_ID LITERAL tx Group:ops 10.1.1.1 WRITE ALLOW",
        "GROUP LITERAL g :anon * READ ALLOW",
        "USER LITERAL User:bob User:a * CREATE_TOKENS ALLOW",
    ],
)
def test_validate_new_acl_accepts(text):
    validate_new_acl(acl(text))


def test_from_code_maps_unknown_codes_to_unknown():
    assert from_code(AclOperation, 3) is Op.READ
    assert from_code(AclOperation, 99) is Op.UNKNOWN
    assert from_code(ResourceType, -1) is ResourceType.UNKNOWN


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", frozenset()),
        ("User:admin", frozenset({"User:admin"})),
        (" User:admin ; User:ops;;", frozenset({"User:admin", "User:ops"})),
    ],
)
def test_parse_super_users(text, expected):
    assert parse_super_users(text) == expected


def test_parse_super_users_names_a_bad_entry():
    with pytest.raises(ValueError, match="'admin' is not a principal"):
        parse_super_users("User:ops;admin")


# --- the indexed decision against a brute-force model ---------------------------------

NAMES = st.text(alphabet="ab*", min_size=1, max_size=4)
PRINCIPALS = st.sampled_from(["User:a", "User:b", "User:*", "Group:a"])
HOSTS = st.sampled_from(["*", "1.1.1.1", "2.2.2.2"])
OPS = st.sampled_from(
    [Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS]
)
BINDINGS = st.builds(
    AclBinding,
    st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
    NAMES,
    st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    PRINCIPALS,
    HOSTS,
    OPS,
    st.sampled_from([AclPermissionType.ALLOW, AclPermissionType.DENY]),
)


def model(acls, supers, allow_everyone, principal, host, op, rtype, name) -> bool:
    """Kafka's rules, one ACL at a time, no index."""
    if principal in supers:
        return True
    applicable = [
        b
        for b in acls
        if b.resource_type == rtype
        and (
            (b.pattern_type == PatternType.LITERAL and b.resource_name in (name, "*"))
            or (b.pattern_type == PatternType.PREFIXED and name.startswith(b.resource_name))
        )
    ]
    matching = [
        b for b in applicable if b.principal in (principal, "User:*") and b.host in (host, "*")
    ]
    if any(
        b.permission_type == AclPermissionType.DENY and b.operation in (op, Op.ALL)
        for b in matching
    ):
        return False
    implied = (
        {op}
        | ({Op.READ, Op.WRITE, Op.DELETE, Op.ALTER} if op == Op.DESCRIBE else set())
        | ({Op.ALTER_CONFIGS} if op == Op.DESCRIBE_CONFIGS else set())
    )
    if any(
        b.permission_type == AclPermissionType.ALLOW and b.operation in implied | {Op.ALL}
        for b in matching
    ):
        return True
    return allow_everyone and not applicable


@settings(max_examples=600, deadline=None)
@given(
    st.lists(BINDINGS, max_size=25),
    st.booleans(),
    PRINCIPALS,
    HOSTS,
    OPS,
    st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
    st.booleans(),
    st.data(),
)
def test_decide_agrees_with_the_model(
    acls, allow_everyone, principal, host, op, rtype, super_a, data
):
    # ask mostly about names near the ACLs' (one of them, extended or cut short)
    near = [b.resource_name for b in acls] or ["a"]
    name = data.draw(
        st.one_of(
            NAMES,
            st.builds(lambda n, tail: n + tail, st.sampled_from(near), NAMES),
            st.builds(lambda n, k: n[:k] or n, st.sampled_from(near), st.integers(1, 3)),
        )
    )
    supers = frozenset({"User:a"}) if super_a else frozenset()
    index = AclIndex(acls)
    got = decide(index, supers, allow_everyone, principal, host, op, rtype, name)[0]
    assert got == model(acls, supers, allow_everyone, principal, host, op, rtype, name)


@settings(max_examples=1000, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(alphabet="ab*", min_size=1, max_size=4),
            st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
        ),
        max_size=30,
    ),
    st.text(alphabet="ab*", min_size=1, max_size=5),
)
def test_prefix_scan_finds_exactly_the_applicable_patterns(patterns, name):
    acls = [
        AclBinding(ResourceType.TOPIC, n, p, "User:a", "*", Op.READ, AclPermissionType.ALLOW)
        for n, p in patterns
    ]
    section = AclIndex(acls).sections.get(ResourceType.TOPIC)
    found = set()
    if section is not None:
        for by_principal in section.matching(name):
            found.update(rule[3] for rules in by_principal.values() for rule in rules)
    expected = {
        b
        for b in acls
        if (b.pattern_type == PatternType.LITERAL and b.resource_name in (name, "*"))
        or (b.pattern_type == PatternType.PREFIXED and name.startswith(b.resource_name))
    }
    assert found == expected
