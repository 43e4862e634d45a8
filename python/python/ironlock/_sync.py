"""The blocking API: LockManager and the lock objects its ``lock()`` / ``using()`` return."""

from __future__ import annotations

import threading
from types import TracebackType
from datetime import timedelta
from typing import Any, Dict, Generic, List, Literal, Optional, Sequence, Type, TypeVar, Union

from . import _native
from .exceptions import (
    ArgumentTypeError,
    LockContendedError,
    LockLostError,
    QuorumUnavailableError,
)

Resources = Union[str, Sequence[str]]
#: A duration: float seconds (an int too) or a ``datetime.timedelta``.
Seconds = Union[float, timedelta]
#: The side of a read-write lock.
Access = Literal["read", "write"]


def _wait_for(blocking: bool, timeout: Optional[float], default: Any) -> Dict[str, Any]:
    """threading.Lock.acquire's (blocking, timeout) as acquire keywords.

    ``timeout=-1`` (the default, as ``threading.Lock``) waits until acquired, or up to the
    ``wait`` given to ``manager.lock()`` when there was one; ``timeout=None`` uses that
    ``wait`` (or, without one, the manager's retry settings); a number bounds the wait."""
    if not blocking:
        if timeout is not None and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        return {"retry_count": 0}
    if timeout is None:
        return {"wait": default}
    if timeout == -1:
        return {"wait": default} if default is not None else {"retry_count": 2**32 - 1}
    return {"wait": timeout}


def _extended_ttl(lock: Any, additional_time: Seconds, replace_ttl: bool) -> float:
    """redis-py's ``extend(additional_time, replace_ttl=False)``: the new ttl is the time left
    plus ``additional_time`` (seconds or a timedelta), or ``additional_time`` itself when
    ``replace_ttl``."""
    if lock is None:
        raise RuntimeError("cannot extend an unlocked lock")
    if isinstance(additional_time, timedelta):
        additional_time = additional_time.total_seconds()
    if isinstance(additional_time, bool) or not isinstance(additional_time, (int, float)):
        raise ArgumentTypeError(
            f"additional_time: expected a number of seconds or a timedelta, got "
            f"{type(additional_time).__name__}"
        )
    return float(additional_time) if replace_ttl else lock.remaining + float(additional_time)

M = TypeVar("M")
L = TypeVar("L", bound=_native.LockBase)


class _LockSpec(Generic[M, L]):
    """What the blocking and the asyncio lock objects share: what to lock, and the held lock."""

    def __init__(
        self,
        manager: M,
        resources: Resources,
        ttl: Seconds,
        *,
        wait: Optional[Seconds] = None,
        fencing: bool = False,
        fair: Optional[bool] = None,
        min_hold: Optional[Seconds] = None,
        auto_extend: bool = False,
    ) -> None:
        self._manager = manager
        self._resources = resources
        self._ttl = ttl
        self._wait = wait
        self._fencing = fencing
        self._fair = fair
        self._min_hold = min_hold
        self._auto_extend = auto_extend
        self._lock: Optional[L] = None
        self._keeper: Optional[_native.KeepAlive] = None

    def _names(self) -> List[str]:
        return [self._resources] if isinstance(self._resources, str) else list(self._resources)

    def owned(self) -> bool:
        """True while this object holds the lock and its validity lasts."""
        lock = self._lock
        return lock is not None and lock.valid

    @property
    def lock(self) -> Optional[L]:
        """The held lock (fence, token, remaining, lost, …), or None."""
        return self._lock

    def __repr__(self) -> str:
        return (
            f"<ironlock.{type(self).__name__} resources={self._resources!r} ttl={self._ttl!r} "
            f"owned={self.owned()}>"
        )


def _quorum_holds(holders: List[Dict[str, Any]], quorum: int) -> bool:
    return sum(1 for h in holders if h["token"] is not None) >= quorum


class DistributedLock(_LockSpec["LockManager", _native.Lock]):
    """A distributed lock shaped like ``threading.Lock`` (and redis-py's ``Lock``).

    ``with`` acquires and releases. Like ``with threading.Lock()`` it waits until the lock is
    acquired (a release elsewhere wakes it at once; Ctrl-C interrupts the wait), or, when
    ``manager.lock()`` was given ``wait=`` seconds, up to that long and then raises
    ``LockContendedError`` (held elsewhere) or ``QuorumUnavailableError``. Leaving the block
    raises ``LockLostError`` if the lock was lost meanwhile. ``acquire(blocking=True,
    timeout=-1) -> bool`` waits the same way and returns False instead of raising when the
    lock was not acquired in time. With ``auto_extend`` (what
    ``manager.using()`` returns) the lock is extended in the background while held, and
    ``lock.lost`` is set the moment it is lost.

    The object may be shared by threads like ``threading.Lock``: a second acquirer waits until
    the holder releases. It is not reentrant.
    """

    def __init__(
        self, manager: "LockManager", resources: Resources, ttl: Seconds, **how: Any
    ) -> None:
        super().__init__(manager, resources, ttl, **how)
        self._guard = threading.Lock()

    def _take(self, **how: Any) -> _native.Lock:
        lock = self._manager.acquire(
            self._resources, self._ttl, fencing=self._fencing, fair=self._fair,
            min_hold=self._min_hold, **how
        )
        keeper = lock.keep_alive() if self._auto_extend else None
        with self._guard:
            self._lock, self._keeper = lock, keeper
        return lock

    def acquire(self, blocking: bool = True, timeout: Optional[float] = -1) -> bool:
        """Takes the lock, as ``threading.Lock.acquire``: by default waits until acquired (a
        release wakes it at once), or up to the ``wait`` given to ``manager.lock()``.
        ``blocking=False`` tries once; ``timeout`` (seconds) bounds the wait; None uses the
        ``wait`` given to ``manager.lock()`` (else the manager's retry settings). False when
        the lock was not acquired in time."""
        try:
            self._take(**_wait_for(blocking, timeout, self._wait))
        except (LockContendedError, QuorumUnavailableError):
            return False
        return True

    def release(self) -> None:
        """Releases the lock; raises ``LockLostError`` if it had been lost before (its keys are
        deleted wherever they still hold its token either way), ``RuntimeError`` if not held.
        A lock already released through the object ``with`` gave (``lock.release()``) is not
        released twice."""
        with self._guard:
            lock, keeper = self._lock, self._keeper
            self._lock = self._keeper = None
        if lock is None:
            raise RuntimeError("release unlocked lock")
        if keeper is not None:
            keeper.stop()
        # Released already: by the user through the object `with` gave (nothing to do), or by
        # auto-extension because it was lost (the loss rule still reports it).
        if not lock.released or lock.lost.is_set():
            lock.finish()

    def extend(self, additional_time: Seconds, replace_ttl: bool = False) -> bool:
        """As redis-py's ``Lock.extend``: adds ``additional_time`` seconds to the time left
        (``replace_ttl=True``: sets the ttl to it), on a quorum. Raises ``RuntimeError`` when
        not held, ``LockLostError`` when the lock was lost. Returns True."""
        self._lock_held().extend(_extended_ttl(self._lock, additional_time, replace_ttl))
        return True

    def _lock_held(self) -> _native.Lock:
        lock = self._lock
        if lock is None or lock.released:
            raise RuntimeError("cannot extend an unlocked lock")
        return lock

    def locked(self) -> bool:
        """True if this object holds the lock, or a quorum of nodes hold a key of one of its
        resources (for any owner)."""
        if self.owned():
            return True
        quorum = self._manager.quorum
        return any(_quorum_holds(self._manager.inspect(n), quorum) for n in self._names())

    def __enter__(self) -> _native.Lock:
        # As `with threading.Lock()`: wait until acquired, unless `wait=` bounds it.
        return self._take(**_wait_for(True, -1, self._wait))

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._lock is None:
            return  # released inside the block: nothing left to do
        try:
            self.release()
        except LockLostError:
            if exc is None:
                raise


class Semaphore:
    """At most ``limit`` holders of ``resource`` at once, across the quorum (a counting semaphore).

    ``with manager.semaphore("partner-api", 3, ttl=10.0, wait=5.0) as permit:`` takes one
    permit (a ``Lock``: extend, keep_alive, fence, report) and releases it on exit, raising
    ``LockLostError`` there if it was lost meanwhile. A permit needs
    floor(limit * N / (limit + 1)) + 1 admitting nodes. One ``with`` at a time per object (make
    one per use, as with ``lock()``)."""

    def __init__(
        self, manager: "LockManager", resource: str, limit: int, ttl: Seconds, *,
        wait: Optional[Seconds] = None, fencing: bool = False, fair: Optional[bool] = None,
    ) -> None:
        self._manager, self._resource, self._limit, self._ttl = manager, resource, limit, ttl
        self._wait, self._fencing, self._fair = wait, fencing, fair
        self._permit: Optional[_native.Lock] = None

    def acquire(self) -> _native.Lock:
        """Takes one permit; raises ``LockContendedError`` when every permit stays held."""
        return self._manager.acquire_permit(
            self._resource, self._limit, self._ttl, wait=self._wait, fencing=self._fencing,
            fair=self._fair,
        )

    def __enter__(self) -> _native.Lock:
        self._permit = self.acquire()
        return self._permit

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        permit, self._permit = self._permit, None
        if permit is None or permit.released:
            return
        try:
            permit.finish()
        except LockLostError:
            if exc is None:
                raise

    def __repr__(self) -> str:
        return f"<ironlock.Semaphore {self._resource!r} limit={self._limit}>"


class RwLockSide:
    """One side of a read-write lock: what ``RwLock.read()`` / ``RwLock.write()`` return.

    ``with manager.rw_lock("doc").read(ttl=10.0, wait=5.0) as lock:`` takes it (a ``Lock``
    whose ``access`` is ``"read"`` or ``"write"``: extend, keep_alive, fence, report) and
    releases it on exit, raising ``LockLostError`` there if it was lost meanwhile. Without
    ``wait=`` it retries per the manager's retry settings, then raises ``LockContendedError``.
    ``acquire()`` returns the lock for you to release. One ``with`` at a time per object (make
    one per use, as with ``lock()``)."""

    def __init__(
        self, manager: "LockManager", resource: str, access: Access, ttl: Seconds, *,
        wait: Optional[Seconds] = None, fencing: bool = False, fair: Optional[bool] = None,
    ) -> None:
        if access not in ("read", "write"):
            raise ValueError(f"access: expected 'read' or 'write', got {access!r}")
        self._manager, self._resource, self._access, self._ttl = manager, resource, access, ttl
        self._wait, self._fencing, self._fair = wait, fencing, fair
        self._lock: Optional[_native.Lock] = None

    @property
    def access(self) -> Access:
        """``"read"`` or ``"write"``."""
        return self._access

    def acquire(self) -> _native.Lock:
        """Takes this side of the lock; raises ``LockContendedError`` when it stays refused (a
        read: a writer holds or waits, or a plain lock of the name holds; a write: readers,
        another writer or a plain lock hold)."""
        take = self._manager.acquire_read if self._access == "read" else self._manager.acquire_write
        return take(
            self._resource, self._ttl, wait=self._wait, fencing=self._fencing, fair=self._fair
        )

    def __enter__(self) -> _native.Lock:
        self._lock = self.acquire()
        return self._lock

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        lock, self._lock = self._lock, None
        if lock is None or lock.released:
            return
        try:
            lock.finish()
        except LockLostError:
            if exc is None:
                raise

    def __repr__(self) -> str:
        return f"<ironlock.RwLockSide {self._resource!r} access={self._access!r}>"


class RwLock:
    """A read-write lock across the quorum: ``manager.rw_lock("doc")``.

    ``read(ttl)`` is shared: any number of readers hold it at once. ``write(ttl)`` is
    exclusive: it is refused while readers, another writer or a plain lock of the same name
    hold it, and a plain lock of the name is refused while readers or a writer hold it. A
    writer that is waiting (``wait=``) holds back new readers, so writers never starve: it is
    granted once the readers there leave. Both sides are ``Lock`` objects granted by the same
    majority as a lock (extend, keep_alive, fencing, the lost flag, the report). With ``fair``
    readers and writers wait in the lock's line and are served in the order they queued
    (readers in a row together); ``min_hold`` does not apply. The object is cheap and holds
    nothing itself; each ``read()`` / ``write()`` is one use."""

    def __init__(self, manager: "LockManager", resource: str) -> None:
        self._manager, self._resource = manager, resource

    @property
    def resource(self) -> str:
        """The resource name, as given."""
        return self._resource

    def read(
        self, ttl: Seconds, *, wait: Optional[Seconds] = None, fencing: bool = False,
        fair: Optional[bool] = None,
    ) -> RwLockSide:
        """The read (shared) side: ``with rw.read(ttl=10) as lock:``. Readers share; a
        writer that holds or waits, or a plain lock of the name, refuses it. ``fair=True``
        waits in the lock's line (``None``: the manager's ``fair`` setting)."""
        return RwLockSide(
            self._manager, self._resource, "read", ttl, wait=wait, fencing=fencing, fair=fair
        )

    def write(
        self, ttl: Seconds, *, wait: Optional[Seconds] = None, fencing: bool = False,
        fair: Optional[bool] = None,
    ) -> RwLockSide:
        """The write (exclusive) side: ``with rw.write(ttl=10, wait=5) as lock:``. Readers,
        another writer or a plain lock of the name refuse it; while it waits, new readers are
        refused. ``fair=True`` waits in the lock's line."""
        return RwLockSide(
            self._manager, self._resource, "write", ttl, wait=wait, fencing=fencing, fair=fair
        )

    def __repr__(self) -> str:
        return f"<ironlock.RwLock {self._resource!r}>"


class LockManager(_native.LockManager):
    """Takes Redlock locks over N independent Redis masters (blocking API).

    ``LockManager(nodes=None, *, retry_count=10, retry_delay=0.2, retry_jitter=0.1,
    drift_factor=0.01, drift_constant=0.002, node_timeout=0.05, connect_timeout=1.0,
    max_ttl=60.0, restart_quarantine=True, replica_acks=0, reseat=True, key_prefix="",
    min_validity=0.0,
    max_extensions=None, extension_threshold=None, fair=False, queue_timeout=None)`` — durations
    in float seconds or ``datetime.timedelta``. ``nodes``: a list of URLs, of mappings with
    redis-py's keywords (``host``, ``port``, ``username``, ``password``, ``db``, ``ssl``,
    ``unix_socket_path``; a Sentinel-managed master: ``sentinels`` as ``[(host, port), …]`` or
    ``["host:port", …]``, ``service_name``, and optionally ``sentinel_username`` /
    ``sentinel_password``; a Redis Cluster: ``cluster`` as seed addresses) or of redis-py
    clients (``redis.Redis``, ``Sentinel.master_for(name)``, ``redis.cluster.RedisCluster``:
    their settings are read; ironlock keeps its own connections), or one comma-separated str;
    None: ``IRONLOCK_NODES``, then ``REDIS_URL``. The constructor
    connects to every node at once and returns once a quorum is connected (a node that is down
    or unresolvable is a failing voter, not a start-up failure). Thread-safe; safe to use after
    ``os.fork()`` (the child reconnects).
    """

    def lock(
        self, resources: Resources, ttl: Seconds, *, wait: Optional[Seconds] = None,
        fencing: bool = False, fair: Optional[bool] = None, min_hold: Optional[Seconds] = None,
    ) -> DistributedLock:
        """A ``threading.Lock``-like object; use as ``with manager.lock("name", ttl=10):``.

        ``ttl``: seconds (or a ``timedelta``) the lock is valid for once granted. ``with``
        waits until the lock is acquired, as ``with threading.Lock()`` does (Ctrl-C interrupts
        it); ``wait=`` seconds bounds the wait (then ``LockContendedError`` or
        ``QuorumUnavailableError``). ``min_hold=`` seconds (at most ``ttl``): a release
        before that long after the grant leaves the lock taken until then (a job that finished
        early is not run again meanwhile by a machine whose clock or schedule is a little
        behind)."""
        return DistributedLock(
            self, resources, ttl, wait=wait, fencing=fencing, fair=fair, min_hold=min_hold
        )

    def using(
        self, resources: Resources, ttl: Seconds, *, wait: Optional[Seconds] = None,
        fencing: bool = False, fair: Optional[bool] = None, min_hold: Optional[Seconds] = None,
    ) -> DistributedLock:
        """Like ``lock()``, but the lock is extended in the background while held; its
        ``lost`` flag is set the moment it is lost, and leaving the block then raises
        ``LockLostError``."""
        return DistributedLock(
            self, resources, ttl, wait=wait, fencing=fencing, fair=fair, min_hold=min_hold,
            auto_extend=True,
        )

    def semaphore(
        self, resource: str, limit: int, ttl: Seconds, *, wait: Optional[Seconds] = None,
        fencing: bool = False, fair: Optional[bool] = None,
    ) -> Semaphore:
        """A counting semaphore: ``with manager.semaphore("api", 3, ttl=10) as permit:``."""
        return Semaphore(self, resource, limit, ttl, wait=wait, fencing=fencing, fair=fair)

    def rw_lock(self, resource: str) -> RwLock:
        """A read-write lock: ``with manager.rw_lock("doc").read(ttl=10):`` (shared with other
        readers) or ``.write(ttl=10, wait=5)`` (exclusive; a waiting writer holds back new
        readers). A plain lock of the same name excludes both."""
        return RwLock(self, resource)

    def __enter__(self) -> "LockManager":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
