"""Hypothesis drives one classic group through random joins, syncs, heartbeats, leaves,
commits, failed and successful writes and the passing of time; after every step the
group's bookkeeping must be consistent and every parked request answered at most once.
(Every transition is checked against VALID_PREVIOUS_STATES by ClassicGroup.transition_to,
which raises on an invalid one.)"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from semel.coordinator.group.classic_group import COMPLETING_REBALANCE, EMPTY, STABLE
from semel.protocol.errors import Error
from tests.coordinator.group_harness import RANGE, SUBSCRIPTION, Harness

PROTOCOL_SETS = [RANGE, [("roundrobin", SUBSCRIPTION)] + RANGE, [("sticky", SUBSCRIPTION)]]
GROUP = "g"


class ClassicGroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(initial_rebalance_delay_ms=100)
        self.known: list[str] = []  # member ids handed out
        self.replies: list = []

    def _track(self, reply):
        self.replies.append(reply)
        if reply.done and reply.value.member_id and reply.value.member_id not in self.known:
            self.known.append(reply.value.member_id)
        return reply

    def _member(self, data) -> str:
        return data.draw(st.sampled_from(self.known)) if self.known else "unknown"

    @property
    def group(self):
        return self.h.groups.get(GROUP)

    @rule(protocols=st.sampled_from(PROTOCOL_SETS), instance=st.sampled_from([None, "i1", "i2"]),
          version=st.sampled_from([3, 4, 9]))
    def join_new(self, protocols, instance, version):
        self._track(self.h.join(GROUP, protocols=protocols, instance_id=instance,
                                version=version, session_ms=3000, rebalance_ms=5000))

    @rule(data=st.data(), protocols=st.sampled_from(PROTOCOL_SETS))
    def rejoin(self, data, protocols):
        member = self._member(data)
        group = self.group
        instance = None
        if group is not None and group.has_member(member):
            instance = group.member(member).group_instance_id
        self._track(self.h.join(GROUP, member, protocols=protocols, instance_id=instance,
                                session_ms=3000, rebalance_ms=5000))

    @rule(data=st.data())
    def sync(self, data):
        group = self.group
        member = self._member(data)
        generation = group.generation_id if group is not None else 0
        assignment = {m: b"a" for m in group.members} if group is not None else {}
        instance = None
        if group is not None and group.has_member(member):
            instance = group.member(member).group_instance_id
        self.replies.append(self.h.sync(GROUP, member, generation, assignment,
                                        instance_id=instance, protocol_name=None))

    @rule(data=st.data(), stale=st.booleans())
    def heartbeat(self, data, stale):
        group = self.group
        generation = (group.generation_id if group is not None else 0) - int(stale)
        error = self.h.heartbeat(GROUP, self._member(data), generation)
        assert error in (Error.NONE, Error.REBALANCE_IN_PROGRESS, Error.UNKNOWN_MEMBER_ID,
                         Error.ILLEGAL_GENERATION, Error.FENCED_INSTANCE_ID)

    @rule(data=st.data())
    def leave(self, data):
        self.h.leave(GROUP, (self._member(data), None))

    @rule(data=st.data())
    def commit(self, data):
        group = self.group
        generation = group.generation_id if group is not None else -1
        self.replies.append(self.h.commit(GROUP, {("t", 0): 1}, generation=generation,
                                          member_id=self._member(data)))

    @rule(fail=st.booleans())
    def complete_writes(self, fail):
        self.h.flush(Error.KAFKA_STORAGE_ERROR if fail else Error.NONE)

    @rule(ms=st.sampled_from([0, 50, 100, 1000, 3000, 5000]))
    def advance(self, ms):
        self.h.advance(ms)
        for reply in self.replies:
            if reply.done and getattr(reply.values[0], "member_id", None):
                member_id = reply.values[0].member_id
                if member_id not in self.known:
                    self.known.append(member_id)

    @invariant()
    def replies_answered_at_most_once(self):
        for reply in self.replies:
            assert len(reply.values) <= 1, reply.values

    @invariant()
    def bookkeeping_is_consistent(self):
        group = self.group
        if group is None:
            return
        members = group.members
        assert group.num_awaiting_join == sum(m.is_awaiting_join for m in members.values())
        if members:
            assert group.leader_id in members
        else:
            assert group.leader_id is None or group.state is not STABLE
        if group.state is EMPTY:
            assert not members
        if group.state in (STABLE, COMPLETING_REBALANCE):
            assert members
            assert group.protocol_name in group.candidate_protocols()
        for instance, member_id in group.static_members.items():
            assert members[member_id].group_instance_id == instance
        assert sum(m.is_static for m in members.values()) == len(group.static_members)
        assert group.pending_sync_members <= members.keys()
        assert not (group.pending_join_members & members.keys())
        counts: dict[str, int] = {}
        for m in members.values():
            for name, _ in m.protocols:
                counts[name] = counts.get(name, 0) + 1
        assert {k: v for k, v in group.supported_protocols.items() if v} == counts


ClassicGroupMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                                 deadline=None)
test_classic_group_state_machine = ClassicGroupMachine.TestCase
