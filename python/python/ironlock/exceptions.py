"""ironlock's exceptions: one class per error kind (the same kinds in every language), all under
IronlockError.

They are plain Python classes so that they pickle (across multiprocessing, for instance). Every
exception carries ``.code`` (the kind's stable name, as in the other languages), ``.report`` (one
``NodeReport`` per node for the round that failed, empty when no node was asked), ``.elapsed``
(seconds that round took) and ``.rounds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Iterable, List, Optional

__all__ = [
    "NodeReport",
    "IronlockError",
    "LockContendedError",
    "QuorumUnavailableError",
    "LockLostError",
    "InvalidArgumentError",
    "ArgumentTypeError",
    "ForkedLockError",
    "IronlockConnectionError",
    "InternalError",
]


@dataclass(frozen=True)
class NodeReport:
    """One node's part in a round: its URL (password redacted), vote and error text."""

    url: str
    #: "for", "against", "error", "timeout", "not_eligible", "pending" or (extend only) "reseated"
    vote: str
    error: Optional[str] = None


def _rebuild(cls: "type[IronlockError]", message: str, state: Dict[str, Any]) -> "IronlockError":
    return cls(message, **state)


class IronlockError(Exception):
    """Base class of every ironlock error."""

    code: ClassVar[str] = "INTERNAL"

    def __init__(
        self,
        message: str = "",
        *,
        report: Optional[Iterable[NodeReport]] = None,
        elapsed: Optional[float] = None,
        rounds: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.report: List[NodeReport] = list(report or ())
        self.elapsed = elapsed
        self.rounds = rounds

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> Any:
        state = {"report": self.report, "elapsed": self.elapsed, "rounds": self.rounds}
        return (_rebuild, (type(self), self.message, state))


class LockContendedError(IronlockError):
    """No quorum, and a node said another token holds a key: the lock is held elsewhere."""

    code = "CONTENDED"


class QuorumUnavailableError(IronlockError):
    """No quorum and no node said the lock is held: nodes down, timed out, quarantined after a
    restart, or the round took longer than the ttl allows."""

    code = "UNAVAILABLE"


class LockLostError(IronlockError):
    """The lock expired, was released, or was taken over (extend, or the end of a ``with``)."""

    code = "LOST"


class InvalidArgumentError(IronlockError, ValueError):
    """Bad input; the message names the argument."""

    code = "INVALID_ARGUMENT"


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong type: both a ``TypeError`` and an ``InvalidArgumentError``."""


class ForkedLockError(InvalidArgumentError, RuntimeError):
    """A lock inherited through ``fork`` was asked to extend, release or keep alive in the child.
    Only the process that acquired a lock may do that; the child acquires its own."""


class IronlockConnectionError(IronlockError, ConnectionError):
    """A node URL cannot be used at all at start (unsupported scheme, unresolvable host)."""

    code = "CONNECTION"


class InternalError(IronlockError):
    """A bug in ironlock (including a caught Rust panic). Please report it."""

    code = "INTERNAL"
