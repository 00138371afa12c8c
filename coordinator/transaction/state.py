"""Transaction states of the transaction coordinator, as Kafka's ``TransactionState``.

The id is what ``__transaction_state`` stores (TransactionLogValue.TransactionStatus, int8);
the name is what DescribeTransactions / ListTransactions show and filter on.

``VALID_PREVIOUS[state]`` is the one transition table: a transition into ``state`` is legal
only from the states listed (Kafka 4.x, transaction version 2 included: an abort may start
from EMPTY / COMPLETE_* because a TV2 client may not know whether its transaction started).

  EMPTY               <- EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT          (InitProducerId)
  ONGOING             <- ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT (AddPartitions)
  PREPARE_COMMIT      <- ONGOING                                         (EndTxn commit)
  PREPARE_ABORT       <- ONGOING, PREPARE_EPOCH_FENCE, EMPTY, COMPLETE_* (EndTxn abort, fence)
  COMPLETE_COMMIT     <- PREPARE_COMMIT                                  (markers written)
  COMPLETE_ABORT      <- PREPARE_ABORT                                   (markers written)
  DEAD                <- EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT          (id expiration)
  PREPARE_EPOCH_FENCE <- ONGOING                          (fencing a producer mid-transaction)

Only EMPTY and COMPLETE_* may expire (``expiration_allowed``).
"""

from __future__ import annotations

from enum import IntEnum


class TransactionState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def state_name(self) -> str:
        """Kafka's display name ("PrepareCommit"), used by the admin APIs."""
        return _NAMES[self]

    @property
    def expiration_allowed(self) -> bool:
        return self in _EXPIRABLE

    @property
    def valid_previous_states(self) -> frozenset[TransactionState]:
        return VALID_PREVIOUS[self]

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        return _BY_NAME.get(name)


S = TransactionState

_NAMES = {
    S.EMPTY: "Empty",
    S.ONGOING: "Ongoing",
    S.PREPARE_COMMIT: "PrepareCommit",
    S.PREPARE_ABORT: "PrepareAbort",
    S.COMPLETE_COMMIT: "CompleteCommit",
    S.COMPLETE_ABORT: "CompleteAbort",
    S.DEAD: "Dead",
    S.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}
_EXPIRABLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})

VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY,
                                S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


def can_transition(from_state: TransactionState, to_state: TransactionState) -> bool:
    return from_state in VALID_PREVIOUS[to_state]
