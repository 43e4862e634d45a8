"""Type stubs for the PyO3 module ironlock._native (checked by mypy.stubtest in the tests)."""

from datetime import timedelta
from types import TracebackType
from typing import (
    Any,
    Awaitable,
    Dict,
    Generator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypedDict,
    Union,
    final,
)

from typing_extensions import disjoint_base

from .exceptions import NodeReport

_Seconds = Union[float, int, timedelta]
_Resources = Union[str, Sequence[str]]
_Address = Union[str, Tuple[str, int]]

class _SentinelNode(TypedDict, total=False):
    """A Sentinel-managed master: its sentinels, its name (``service_name``, or
    ``master_name``), the data nodes' login and database, and the sentinels' own login (which
    must equal the manager's ``sentinel_username`` / ``sentinel_password`` when both are given)."""

    sentinels: Sequence[_Address]
    service_name: str
    master_name: str
    username: str
    password: str
    db: int
    ssl: bool
    sentinel_username: str
    sentinel_password: str

class _ClusterNode(TypedDict, total=False):
    """A Redis Cluster: its seed nodes and its nodes' login."""

    cluster: Sequence[_Address]
    username: str
    password: str
    ssl: bool

# A node: a URL; a mapping with redis-py's keywords (host, port, username, password, db, ssl,
# unix_socket_path), a _SentinelNode or a _ClusterNode; or a redis-py client (redis.Redis,
# redis.asyncio.Redis, Sentinel.master_for(), redis.cluster.RedisCluster).
_Node = Union[str, _SentinelNode, _ClusterNode, Mapping[str, Any], Any]
_Nodes = Union[None, str, Sequence[_Node]]

__all__ = [
    "AsyncCampaign",
    "AsyncElection",
    "AsyncLeadership",
    "AsyncLock",
    "AsyncLockManager",
    "AsyncLostFlag",
    "AsyncObserver",
    "Election",
    "ElectionBase",
    "KeepAlive",
    "Leader",
    "Leadership",
    "LeadershipBase",
    "Lock",
    "LockBase",
    "LockManager",
    "ManagerBase",
    "LostFlag",
    "MAX_ELECTION_VALUE_LEN",
    "Observer",
    "SETTINGS",
    "__version__",
    "drain_requests",
]

__version__: str
SETTINGS: List[str]
#: The longest value a candidate may advertise, in bytes (UTF-8).
MAX_ELECTION_VALUE_LEN: int

def drain_requests() -> None: ...

@disjoint_base
class ManagerBase:
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def quorum(self) -> int: ...
    @property
    def nodes(self) -> List[str]: ...
    def stats(self) -> Dict[str, Any]: ...
    def _connected(self) -> Awaitable[None]: ...

class LockManager(ManagerBase):
    def __new__(
        cls,
        nodes: _Nodes = None,
        *,
        retry_count: int = ...,
        retry_delay: _Seconds = ...,
        retry_jitter: _Seconds = ...,
        drift_factor: float = ...,
        drift_constant: _Seconds = ...,
        node_timeout: _Seconds = ...,
        connect_timeout: _Seconds = ...,
        max_ttl: _Seconds = ...,
        restart_quarantine: bool = ...,
        replica_acks: int = ...,
        reseat: bool = ...,
        key_prefix: str = ...,
        min_validity: _Seconds = ...,
        max_extensions: Optional[int] = ...,
        extension_threshold: Optional[_Seconds] = ...,
        fair: bool = ...,
        queue_timeout: Optional[_Seconds] = ...,
        ssl_ca_certs: Optional[str] = ...,
        ssl_ca_data: Optional[str] = ...,
        ssl_certfile: Optional[str] = ...,
        ssl_keyfile: Optional[str] = ...,
        ssl_server_hostname: Optional[str] = ...,
        sentinel_username: str = ...,
        sentinel_password: str = ...,
    ) -> LockManager: ...
    def acquire(
        self,
        resources: _Resources,
        ttl: _Seconds,
        *,
        wait: Optional[_Seconds] = None,
        fencing: Optional[bool] = None,
        retry_count: Optional[int] = None,
        fair: Optional[bool] = None,
        min_hold: Optional[_Seconds] = None,
    ) -> Lock: ...
    def acquire_permit(
        self,
        resource: str,
        limit: int,
        ttl: _Seconds,
        *,
        wait: Optional[_Seconds] = None,
        fencing: Optional[bool] = None,
        retry_count: Optional[int] = None,
        fair: Optional[bool] = None,
    ) -> Lock: ...
    def acquire_read(
        self,
        resource: str,
        ttl: _Seconds,
        *,
        wait: Optional[_Seconds] = None,
        fencing: Optional[bool] = None,
        retry_count: Optional[int] = None,
        fair: Optional[bool] = None,
        min_hold: Optional[_Seconds] = None,
    ) -> Lock: ...
    def acquire_write(
        self,
        resource: str,
        ttl: _Seconds,
        *,
        wait: Optional[_Seconds] = None,
        fencing: Optional[bool] = None,
        retry_count: Optional[int] = None,
        fair: Optional[bool] = None,
        min_hold: Optional[_Seconds] = None,
    ) -> Lock: ...
    def release_token(self, resources: _Resources, token: str) -> bool: ...
    def inspect(self, resource: str) -> List[Dict[str, Any]]: ...
    def election(self, name: str) -> Election: ...

class AsyncLockManager(ManagerBase):
    def __new__(
        cls,
        nodes: _Nodes = None,
        *,
        retry_count: int = ...,
        retry_delay: _Seconds = ...,
        retry_jitter: _Seconds = ...,
        drift_factor: float = ...,
        drift_constant: _Seconds = ...,
        node_timeout: _Seconds = ...,
        connect_timeout: _Seconds = ...,
        max_ttl: _Seconds = ...,
        restart_quarantine: bool = ...,
        replica_acks: int = ...,
        reseat: bool = ...,
        key_prefix: str = ...,
        min_validity: _Seconds = ...,
        max_extensions: Optional[int] = ...,
        extension_threshold: Optional[_Seconds] = ...,
        fair: bool = ...,
        queue_timeout: Optional[_Seconds] = ...,
        ssl_ca_certs: Optional[str] = ...,
        ssl_ca_data: Optional[str] = ...,
        ssl_certfile: Optional[str] = ...,
        ssl_keyfile: Optional[str] = ...,
        ssl_server_hostname: Optional[str] = ...,
        sentinel_username: str = ...,
        sentinel_password: str = ...,
    ) -> AsyncLockManager: ...
    def acquire(
        self,
        resources: _Resources,
        ttl: _Seconds,
        *,
        wait: Optional[_Seconds] = None,
        fencing: Optional[bool] = None,
        retry_count: Optional[int] = None,
        fair: Optional[bool] = None,
        min_hold: Optional[_Seconds] = None,
    ) -> Awaitable[AsyncLock]: ...
    def acquire_permit(
        self,
        resource: str,
        limit: int,
        ttl: _Seconds,
        *,
        wait: Optional[_Seconds] = None,
        fencing: Optional[bool] = None,
        retry_count: Optional[int] = None,
        fair: Optional[bool] = None,
    ) -> Awaitable[AsyncLock]: ...
    def acquire_read(
        self,
        resource: str,
        ttl: _Seconds,
        *,
        wait: Optional[_Seconds] = None,
        fencing: Optional[bool] = None,
        retry_count: Optional[int] = None,
        fair: Optional[bool] = None,
        min_hold: Optional[_Seconds] = None,
    ) -> Awaitable[AsyncLock]: ...
    def acquire_write(
        self,
        resource: str,
        ttl: _Seconds,
        *,
        wait: Optional[_Seconds] = None,
        fencing: Optional[bool] = None,
        retry_count: Optional[int] = None,
        fair: Optional[bool] = None,
        min_hold: Optional[_Seconds] = None,
    ) -> Awaitable[AsyncLock]: ...
    def release_token(self, resources: _Resources, token: str) -> Awaitable[bool]: ...
    def inspect(self, resource: str) -> Awaitable[List[Dict[str, Any]]]: ...
    def election(self, name: str) -> AsyncElection: ...

@disjoint_base
class LockBase:
    @property
    def valid(self) -> bool: ...
    @property
    def remaining(self) -> float: ...
    @property
    def ttl(self) -> float: ...
    @property
    def fence(self) -> Optional[int]: ...
    @property
    def token(self) -> str: ...
    @property
    def resources(self) -> List[str]: ...
    @property
    def report(self) -> List[NodeReport]: ...
    @property
    def elapsed(self) -> float: ...
    @property
    def rounds(self) -> int: ...
    @property
    def extensions(self) -> int: ...
    @property
    def released(self) -> bool: ...
    @property
    def access(self) -> Optional[Literal["read", "write"]]: ...
    @property
    def pid(self) -> int: ...

@final
class Lock(LockBase):
    def extend(self, ttl: Optional[_Seconds] = None) -> None: ...
    def release(self) -> bool: ...
    def finish(self) -> None: ...
    def keep_alive(self) -> KeepAlive: ...
    @property
    def lost(self) -> LostFlag: ...

@final
class AsyncLock(LockBase):
    def extend(self, ttl: Optional[_Seconds] = None) -> Awaitable[None]: ...
    def release(self) -> Awaitable[bool]: ...
    def finish(self) -> Awaitable[None]: ...
    def keep_alive(self) -> KeepAlive: ...
    @property
    def lost(self) -> AsyncLostFlag: ...

@final
class LostFlag:
    def is_set(self) -> bool: ...
    def wait(self, timeout: Optional[_Seconds] = None) -> bool: ...

@final
class AsyncLostFlag:
    def is_set(self) -> bool: ...
    def wait(self) -> Awaitable[bool]: ...

@final
class KeepAlive:
    def stop(self) -> None: ...
    @property
    def running(self) -> bool: ...
    def __enter__(self) -> KeepAlive: ...
    def __exit__(
        self,
        t: Optional[Type[BaseException]],
        v: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@disjoint_base
class ElectionBase:
    @property
    def name(self) -> str: ...

@final
class Election(ElectionBase):
    def campaign(
        self, value: str = "", ttl: _Seconds = 30.0, *, wait: Optional[_Seconds] = None
    ) -> Leadership: ...
    def leader(self) -> Optional[Leader]: ...
    def observe(self) -> Observer: ...

@final
class AsyncElection(ElectionBase):
    def campaign(
        self, value: str = "", ttl: _Seconds = 30.0, *, wait: Optional[_Seconds] = None
    ) -> AsyncCampaign: ...
    def leader(self) -> Awaitable[Optional[Leader]]: ...
    def observe(self) -> AsyncObserver: ...

@final
class AsyncCampaign:
    def __await__(self) -> Generator[Any, Any, AsyncLeadership]: ...
    def __aenter__(self) -> Awaitable[AsyncLeadership]: ...
    def __aexit__(
        self,
        t: Optional[Type[BaseException]],
        v: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Awaitable[bool]: ...

@disjoint_base
class LeadershipBase:
    @property
    def name(self) -> str: ...
    @property
    def term(self) -> int: ...
    @property
    def value(self) -> str: ...
    @property
    def token(self) -> str: ...
    @property
    def validity(self) -> float: ...
    @property
    def ttl(self) -> float: ...
    @property
    def is_leader(self) -> bool: ...
    @property
    def is_lost(self) -> bool: ...
    @property
    def resigned(self) -> bool: ...
    @property
    def pid(self) -> int: ...

@final
class Leadership(LeadershipBase):
    def proclaim(self, value: str) -> None: ...
    def resign(self) -> bool: ...
    @property
    def lost(self) -> LostFlag: ...
    def __enter__(self) -> Leadership: ...
    def __exit__(
        self,
        t: Optional[Type[BaseException]],
        v: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@final
class AsyncLeadership(LeadershipBase):
    def proclaim(self, value: str) -> Awaitable[None]: ...
    def resign(self) -> Awaitable[bool]: ...
    @property
    def lost(self) -> AsyncLostFlag: ...
    def __aenter__(self) -> Awaitable[AsyncLeadership]: ...
    def __aexit__(
        self,
        t: Optional[Type[BaseException]],
        v: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Awaitable[bool]: ...

@final
class Leader:
    @property
    def value(self) -> str: ...
    @property
    def term(self) -> int: ...
    @property
    def token(self) -> str: ...
    @property
    def validity(self) -> float: ...

@final
class Observer:
    def __iter__(self) -> Observer: ...
    def __next__(self) -> Optional[Leader]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Observer: ...
    def __exit__(
        self,
        t: Optional[Type[BaseException]],
        v: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@final
class AsyncObserver:
    def __aiter__(self) -> AsyncObserver: ...
    def __anext__(self) -> Awaitable[Optional[Leader]]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __aenter__(self) -> Awaitable[AsyncObserver]: ...
    def __aexit__(
        self,
        t: Optional[Type[BaseException]],
        v: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Awaitable[bool]: ...
