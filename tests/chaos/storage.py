"""The protected resource of the chaos suite, after Kleppmann's storage example: a small storage
service in its own process that holds one counter and accepts a write only with a fence larger
than the last one it accepted (`fenced`), or any write (`unfenced`, the control).

Line protocol on a loopback TCP port: `READ` -> value; `WRITE value fence` -> `OK` | `REJECT`;
`STATS` -> JSON {value, accepted, rejected, last_fence}. Started by run.py:
    python3 storage.py PORTFILE fenced|unfenced
(writes its port to PORTFILE once listening; exits when its stdin closes).
"""

import json
import socketserver
import sys
import threading

state = {"value": 0, "accepted": 0, "rejected": 0, "last_fence": 0}
lock = threading.Lock()
FENCED = sys.argv[2] == "fenced"


class Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        for raw in self.rfile:
            parts = raw.decode().split()
            with lock:
                if parts[:1] == ["READ"]:
                    reply = str(state["value"])
                elif parts[:1] == ["WRITE"] and len(parts) == 3:
                    value, fence = int(parts[1]), int(parts[2])
                    if FENCED and fence <= state["last_fence"]:
                        state["rejected"] += 1
                        reply = "REJECT"
                    else:
                        state["value"] = value
                        state["accepted"] += 1
                        state["last_fence"] = max(state["last_fence"], fence)
                        reply = "OK"
                elif parts[:1] == ["STATS"]:
                    reply = json.dumps(state)
                else:
                    reply = "ERR"
            self.wfile.write((reply + "\n").encode())


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main() -> int:
    srv = Server(("127.0.0.1", 0), Handler)
    with open(sys.argv[1], "w") as f:
        f.write(str(srv.server_address[1]))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    sys.stdin.read()  # until the orchestrator closes our stdin (or dies)
    srv.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
