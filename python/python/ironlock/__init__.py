"""ironlock: the Redlock distributed lock over N independent Redis masters, from one Rust core.

    import ironlock

    manager = ironlock.LockManager(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002",
                                    "redis://127.0.0.1:7003"])
    with manager.lock("invoice:42", ttl=10.0, wait=5.0) as lock:
        ...  # keep the work shorter than lock.remaining

Restart quarantine: a node that has been up for less than ``max_ttl`` + drift + 1 s (``max_ttl``
is 60 s by default, so about a minute) does not count toward the quorum, because a node that
restarted without persistence forgot its locks. On freshly started redis-server nodes the first
acquires therefore fail with ``QuorumUnavailableError`` ("... nodes are in restart quarantine").
Nodes that have been up for a minute, as in production, are unaffected. For tests on fresh nodes
pass ``restart_quarantine=False`` (ironlock reads no environment variable for it; the examples
use ``IRONLOCK_QUARANTINE=off`` as their own switch).

Leader election: ``manager.election("scheduler")`` gives ``campaign()`` (wait in line until
leading; the leadership's ``term`` grows with every new leader), ``leader()`` and ``observe()``.

Blocking calls release the GIL and honour Ctrl-C; ``AsyncLockManager`` offers the same as
coroutines. The package README (the PyPI page) has the rules on threads, fork and errors.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional, TypeVar

import multiprocessing.util as _mp_util

from ._native import AsyncLock, AsyncLostFlag, KeepAlive, Lock, LockBase, LostFlag
from ._native import (
    MAX_ELECTION_VALUE_LEN,
    AsyncCampaign,
    AsyncElection,
    AsyncLeadership,
    AsyncObserver,
    Election,
    ElectionBase,
    Leader,
    Leadership,
    LeadershipBase,
    Observer,
)
from ._native import __version__, drain_requests as _drain_requests
from ._sync import (
    DistributedLock,
    LockManager,
    Resources,
    RwLock,
    RwLockSide,
    Seconds,
    Semaphore,
)
from ._async import (
    AsyncDistributedLock,
    AsyncLockManager,
    AsyncRwLock,
    AsyncRwLockSide,
    AsyncSemaphore,
)
from .exceptions import (
    ArgumentTypeError,
    ForkedLockError,
    InternalError,
    InvalidArgumentError,
    IronlockConnectionError,
    IronlockError,
    LockContendedError,
    LockLostError,
    NodeReport,
    QuorumUnavailableError,
)

__all__ = [
    "__version__",
    "LockManager",
    "AsyncLockManager",
    "DistributedLock",
    "AsyncDistributedLock",
    "Semaphore",
    "AsyncSemaphore",
    "RwLock",
    "AsyncRwLock",
    "RwLockSide",
    "AsyncRwLockSide",
    "Lock",
    "AsyncLock",
    "LockBase",
    "LostFlag",
    "AsyncLostFlag",
    "KeepAlive",
    "Election",
    "AsyncElection",
    "ElectionBase",
    "AsyncCampaign",
    "Leadership",
    "AsyncLeadership",
    "LeadershipBase",
    "Leader",
    "Observer",
    "AsyncObserver",
    "MAX_ELECTION_VALUE_LEN",
    "synchronize",
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

F = TypeVar("F", bound=Callable[..., Any])


def synchronize(
    manager: LockManager | AsyncLockManager,
    resources: Resources,
    ttl: Seconds,
    *,
    wait: Optional[Seconds] = None,
    fencing: bool = False,
    fair: Optional[bool] = None,
    min_hold: Optional[Seconds] = None,
) -> Callable[[F], F]:
    """Decorator: run the function while holding the lock, extended in the background
    (``manager.using``). Each call waits until the lock is acquired (up to ``wait`` seconds when
    given). Sync functions need a ``LockManager``, ``async def`` functions an
    ``AsyncLockManager``; a call raises ``LockLostError`` if the lock was lost while it ran."""

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):
            if not isinstance(manager, AsyncLockManager):
                raise TypeError("synchronize: an async function needs an AsyncLockManager")
            amanager = manager

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                async with amanager.using(
                    resources, ttl, wait=wait, fencing=fencing, fair=fair, min_hold=min_hold
                ):
                    return await fn(*args, **kwargs)

            return run_async  # type: ignore[return-value]
        if not isinstance(manager, LockManager):
            raise TypeError("synchronize: a plain function needs a LockManager")
        smanager = manager

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with smanager.using(
                resources, ttl, wait=wait, fencing=fencing, fair=fair, min_hold=min_hold
            ):
                return fn(*args, **kwargs)

        return run  # type: ignore[return-value]

    return decorate


class _ChildExit:
    """Registered with ``multiprocessing.util.register_after_fork`` (which needs an object)."""


def _drain_at_child_exit(_: _ChildExit) -> None:
    # A multiprocessing child ends with os._exit, which skips atexit: a release that returned
    # at a quorum would lose the deletes still on their way to the other nodes.
    _mp_util.Finalize(None, _drain_requests, exitpriority=0)


_CHILD_EXIT = _ChildExit()
_mp_util.register_after_fork(_CHILD_EXIT, _drain_at_child_exit)
