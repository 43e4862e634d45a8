"""The asyncio API: AsyncLockManager and the lock objects its ``lock()`` / ``using()`` return."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Optional, Type

from . import _native
from ._sync import Access, Resources, Seconds, _LockSpec, _extended_ttl, _quorum_holds, _wait_for
from .exceptions import LockContendedError, LockLostError, QuorumUnavailableError


class _CallFuture(asyncio.Future):  # type: ignore[type-arg]
    """The future of an ``AsyncLockManager`` call (and of an ``AsyncLock``'s): an
    ``asyncio.Future`` whose cancellation stops the call, leaving nothing behind on the nodes.
    Awaited while the event loop has nothing else to do, it starts the call and lets it finish
    on the spot (up to 1.5 ms, waiting on what the loop would wait on) instead of going around
    the loop to start it, for the reply and for the awaiting task; a call not awaited at once
    starts in the loop's next turn."""

    __slots__ = ("_ironlock",)
    _ironlock: Any  # the native call: set by the extension when it makes the future

    def cancel(self, msg: Any = None) -> bool:
        if not super().cancel(msg):
            return False
        self._ironlock.abort()
        return True

    def __await__(self) -> Any:
        if not self.done():
            self._ironlock.settle(self)
        return super().__await__()

    __iter__ = __await__


class AsyncDistributedLock(_LockSpec["AsyncLockManager", _native.AsyncLock]):
    """The asyncio twin of ``DistributedLock``: ``async with``, ``await acquire(...)``,
    ``await release()``, ``await locked()``, ``owned()``. ``async with`` waits until the lock
    is acquired (cancelling the task ends the wait, leaving no key behind), or up to the
    ``wait=`` given to ``manager.lock()``."""

    async def _take(self, **how: Any) -> _native.AsyncLock:
        lock = await self._manager.acquire(
            self._resources, self._ttl, fencing=self._fencing, fair=self._fair,
            min_hold=self._min_hold, **how
        )
        self._keeper = lock.keep_alive() if self._auto_extend else None
        self._lock = lock
        return lock

    async def acquire(self, blocking: bool = True, timeout: Optional[float] = -1) -> bool:
        """Takes the lock, as ``DistributedLock.acquire`` (by default waits until acquired);
        False when it was not acquired in time."""
        try:
            await self._take(**_wait_for(blocking, timeout, self._wait))
        except (LockContendedError, QuorumUnavailableError):
            return False
        return True

    async def release(self) -> None:
        """Releases the lock; raises ``LockLostError`` if it had been lost before,
        ``RuntimeError`` if not held."""
        lock, keeper = self._lock, self._keeper
        self._lock = self._keeper = None
        if lock is None:
            raise RuntimeError("release unlocked lock")
        if keeper is not None:
            keeper.stop()
        if not lock.released or lock.lost.is_set():
            await lock.finish()

    async def extend(self, additional_time: Seconds, replace_ttl: bool = False) -> bool:
        """As redis-py's ``Lock.extend`` (see ``DistributedLock.extend``)."""
        lock = self._lock
        if lock is None or lock.released:
            raise RuntimeError("cannot extend an unlocked lock")
        await lock.extend(_extended_ttl(lock, additional_time, replace_ttl))
        return True

    async def locked(self) -> bool:
        """True if this object holds the lock, or a quorum of nodes hold a key of one of its
        resources (for any owner)."""
        if self.owned():
            return True
        for name in self._names():
            if _quorum_holds(await self._manager.inspect(name), self._manager.quorum):
                return True
        return False

    async def __aenter__(self) -> _native.AsyncLock:
        # As `with threading.Lock()`: wait until acquired, unless `wait=` bounds it.
        return await self._take(**_wait_for(True, -1, self._wait))

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._lock is None:
            return  # released inside the block: nothing left to do
        try:
            # Release even when the block was cancelled: shield the release itself.
            await asyncio.shield(self.release())
        except LockLostError:
            if exc is None:
                raise


class AsyncSemaphore:
    """``async with manager.semaphore("api", 3, ttl=10.0) as permit:``: one of ``limit``
    permits (an ``AsyncLock``), released on exit (``LockLostError`` there if it was lost)."""

    def __init__(
        self, manager: "AsyncLockManager", resource: str, limit: int, ttl: Seconds, *,
        wait: Optional[Seconds] = None, fencing: bool = False, fair: Optional[bool] = None,
    ) -> None:
        self._manager, self._resource, self._limit, self._ttl = manager, resource, limit, ttl
        self._wait, self._fencing, self._fair = wait, fencing, fair
        self._permit: Optional[_native.AsyncLock] = None

    async def acquire(self) -> _native.AsyncLock:
        """Takes one permit; raises ``LockContendedError`` when every permit stays held."""
        return await self._manager.acquire_permit(
            self._resource, self._limit, self._ttl, wait=self._wait, fencing=self._fencing,
            fair=self._fair,
        )

    async def __aenter__(self) -> _native.AsyncLock:
        self._permit = await self.acquire()
        return self._permit

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        permit, self._permit = self._permit, None
        if permit is None or permit.released:
            return
        try:
            await asyncio.shield(permit.finish())
        except LockLostError:
            if exc is None:
                raise

    def __repr__(self) -> str:
        return f"<ironlock.AsyncSemaphore {self._resource!r} limit={self._limit}>"


class AsyncRwLockSide:
    """The asyncio twin of ``RwLockSide``: ``async with manager.rw_lock("doc").read(ttl=10.0)
    as lock:`` takes one side (an ``AsyncLock`` whose ``access`` is ``"read"`` or
    ``"write"``) and releases it on exit (``LockLostError`` there if it was lost).
    ``await acquire()`` returns the lock for you to release. Cancelling the task while it
    waits leaves no key behind."""

    def __init__(
        self, manager: "AsyncLockManager", resource: str, access: Access, ttl: Seconds, *,
        wait: Optional[Seconds] = None, fencing: bool = False, fair: Optional[bool] = None,
    ) -> None:
        if access not in ("read", "write"):
            raise ValueError(f"access: expected 'read' or 'write', got {access!r}")
        self._manager, self._resource, self._access, self._ttl = manager, resource, access, ttl
        self._wait, self._fencing, self._fair = wait, fencing, fair
        self._lock: Optional[_native.AsyncLock] = None

    @property
    def access(self) -> Access:
        """``"read"`` or ``"write"``."""
        return self._access

    async def acquire(self) -> _native.AsyncLock:
        """Takes this side of the lock; raises ``LockContendedError`` when it stays refused."""
        take = self._manager.acquire_read if self._access == "read" else self._manager.acquire_write
        return await take(
            self._resource, self._ttl, wait=self._wait, fencing=self._fencing, fair=self._fair
        )

    async def __aenter__(self) -> _native.AsyncLock:
        self._lock = await self.acquire()
        return self._lock

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        lock, self._lock = self._lock, None
        if lock is None or lock.released:
            return
        try:
            await asyncio.shield(lock.finish())
        except LockLostError:
            if exc is None:
                raise

    def __repr__(self) -> str:
        return f"<ironlock.AsyncRwLockSide {self._resource!r} access={self._access!r}>"


class AsyncRwLock:
    """The asyncio twin of ``RwLock`` (``manager.rw_lock("doc")``): ``read(ttl)`` is shared
    by any number of readers; ``write(ttl)`` excludes readers, other writers and plain locks
    of the same name, and a plain lock of the name excludes both. A waiting writer holds back
    new readers and is granted once the readers there leave. With ``fair`` readers and
    writers are served in the order they queued; ``min_hold`` does not apply."""

    def __init__(self, manager: "AsyncLockManager", resource: str) -> None:
        self._manager, self._resource = manager, resource

    @property
    def resource(self) -> str:
        """The resource name, as given."""
        return self._resource

    def read(
        self, ttl: Seconds, *, wait: Optional[Seconds] = None, fencing: bool = False,
        fair: Optional[bool] = None,
    ) -> AsyncRwLockSide:
        """The read (shared) side: ``async with rw.read(ttl=10) as lock:``; ``fair=True``
        waits in the lock's line (``None``: the manager's ``fair`` setting)."""
        return AsyncRwLockSide(
            self._manager, self._resource, "read", ttl, wait=wait, fencing=fencing, fair=fair
        )

    def write(
        self, ttl: Seconds, *, wait: Optional[Seconds] = None, fencing: bool = False,
        fair: Optional[bool] = None,
    ) -> AsyncRwLockSide:
        """The write (exclusive) side: ``async with rw.write(ttl=10, wait=5) as lock:``; while
        it waits, new readers are refused."""
        return AsyncRwLockSide(
            self._manager, self._resource, "write", ttl, wait=wait, fencing=fencing, fair=fair
        )

    def __repr__(self) -> str:
        return f"<ironlock.AsyncRwLock {self._resource!r}>"


class AsyncLockManager(_native.AsyncLockManager):
    """Takes Redlock locks over N independent Redis masters; every I/O method is a coroutine.

    Same settings and node forms as ``LockManager``. Inside a running event loop the
    constructor never blocks it: it checks the settings and the first operation connects;
    ``manager = await AsyncLockManager.connect(nodes, **settings)`` connects before returning.
    Outside a loop the constructor connects at once."""

    @classmethod
    async def connect(cls, nodes: Any = None, **settings: Any) -> "AsyncLockManager":
        """Creates the manager and connects (returns once a quorum of nodes is connected)."""
        manager = cls(nodes, **settings)
        await manager._connected()
        return manager

    def lock(
        self, resources: Resources, ttl: Seconds, *, wait: Optional[Seconds] = None,
        fencing: bool = False, fair: Optional[bool] = None, min_hold: Optional[Seconds] = None,
    ) -> AsyncDistributedLock:
        """Use as ``async with manager.lock("name", ttl=10) as lock:``; waits until acquired
        (or up to ``wait=`` seconds), as ``LockManager.lock`` (``min_hold=`` too)."""
        return AsyncDistributedLock(
            self, resources, ttl, wait=wait, fencing=fencing, fair=fair, min_hold=min_hold
        )

    def using(
        self, resources: Resources, ttl: Seconds, *, wait: Optional[Seconds] = None,
        fencing: bool = False, fair: Optional[bool] = None, min_hold: Optional[Seconds] = None,
    ) -> AsyncDistributedLock:
        """Like ``lock()``, with background auto-extension while held."""
        return AsyncDistributedLock(
            self, resources, ttl, wait=wait, fencing=fencing, fair=fair, min_hold=min_hold,
            auto_extend=True,
        )

    def semaphore(
        self, resource: str, limit: int, ttl: Seconds, *, wait: Optional[Seconds] = None,
        fencing: bool = False, fair: Optional[bool] = None,
    ) -> AsyncSemaphore:
        """A counting semaphore: ``async with manager.semaphore("api", 3, ttl=10) as permit:``."""
        return AsyncSemaphore(self, resource, limit, ttl, wait=wait, fencing=fencing, fair=fair)

    def rw_lock(self, resource: str) -> AsyncRwLock:
        """A read-write lock: ``async with manager.rw_lock("doc").read(ttl=10):`` (shared) or
        ``.write(ttl=10, wait=5)`` (exclusive; a waiting writer holds back new readers)."""
        return AsyncRwLock(self, resource)

    async def __aenter__(self) -> "AsyncLockManager":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()
