"""A tiny blocking RESP2 client (stdlib only), enough for the referee and for stalling nodes."""

import socket
from typing import Any, List, Optional


class RespError(Exception):
    """An error reply from Redis."""


class Resp:
    """One connection to 127.0.0.1:port. Not thread-safe: one per thread."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def command(self, *args: Any) -> Any:
        parts: List[bytes] = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(parts))
        return self._reply()

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by redis")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by redis")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data

    def _reply(self) -> Any:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RespError("unexpected reply %r" % line)


# The protected resource of the fencing demonstration: it accepts a write only when the writer's
# fence is greater than the last one it accepted (the check every fenced storage must make).
FENCED_WRITE = (
    "local cur = tonumber(redis.call('GET', KEYS[1]) or '0') "
    "if tonumber(ARGV[1]) > cur then redis.call('SET', KEYS[1], ARGV[1]) return 1 end "
    "return 0"
)


def fenced_write(conn: Resp, key: str, fence: Optional[int]) -> int:
    """1 if the protected resource accepted the write, 0 if it rejected a stale fence."""
    return int(conn.command("EVAL", FENCED_WRITE, 1, key, fence or 0))


# The referee of a read-write lock: KEYS[1] counts the writers inside, KEYS[2] the readers;
# ARGV[1] is the side entering. Returns the conflicting holders the entrant found: for a write,
# the other writers plus the readers; for a read, the writers (0 = as it must be). Leaving is
# `DECR writers` / `DECRBY readers 1`.
RW_ENTER = (
    "if ARGV[1] == 'write' then "
    "local w = redis.call('INCR', KEYS[1]) "
    "return w - 1 + tonumber(redis.call('GET', KEYS[2]) or '0') end "
    "redis.call('INCRBY', KEYS[2], 1) "
    "return tonumber(redis.call('GET', KEYS[1]) or '0')"
)
