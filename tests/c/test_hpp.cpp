// include/ironlock.hpp (C++17 RAII wrapper) against real nodes: RAII release, chrono durations,
// exceptions carrying the status and the report, the loss rule, moves, auto-extension,
// semaphores, read-write locks, fair locks, bad input.
#include <ironlock.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness.h"

namespace {

int passes = 0;
int failures = 0;

void check(bool ok, const char *what) {
    if (ok) {
        ++passes;
    } else {
        ++failures;
        std::fprintf(stderr, "test_hpp: %s failed\n", what);
    }
}

std::string name(const char *what) {
    return std::string("hpp:") + what + ":" +
           std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

}  // namespace

int main() {
    using namespace std::chrono_literals;
    harness h;
    if (harness_start(&h, 3) != 0) return 1;
    {
        ironlock::config cfg;
        for (int i = 0; i < h.nodes; ++i) cfg.node(h.urls[i]);
        cfg.restart_quarantine(false).connect_timeout(5s).node_timeout(500ms).retry_delay(20ms);
        ironlock::manager m(cfg);

        // A lock with a fencing token; a second try-lock is CONTENDED, with the report.
        const std::string r = name("a");
        ironlock::lock held = m.acquire({r}, 5s, {std::nullopt, std::nullopt, true, std::nullopt});
        check(held.fence().has_value() && *held.fence() > 0, "fence");
        check(held.valid() && held.validity() > 4s && held.validity() <= 5s, "validity");
        check(held.token().size() == IRONLOCK_TOKEN_LEN, "token");
        try {
            m.acquire({r}, 5s, {std::nullopt, 0u, false, std::nullopt});
            check(false, "contended acquire throws");
        } catch (const ironlock::error &e) {
            check(e.status() == IRONLOCK_CONTENDED, "status CONTENDED");
            check(std::string(e.code()) == "CONTENDED", "code()");
            check(e.report().size() == 3 && e.rounds() == 1, "report and rounds");
            check(std::string(e.what()).find("held by another client") != std::string::npos, "what()");
        }
        held.extend(3s);
        check(held.validity() <= 3s, "extend with chrono");
        check(m.stat("granted") == 1 && m.stat("contended") == 1 && m.stat("extensions") == 1, "stat()");
        check(m.stats_json().find("\"rounds\":2,") != std::string::npos, "stats_json()");
        try {
            (void)m.stat("nope");
            check(false, "an unknown stat throws");
        } catch (const ironlock::error &e) {
            check(e.status() == IRONLOCK_INVALID_ARGUMENT, "unknown stat: INVALID_ARGUMENT");
        }

        // RAII: a lock that goes out of scope is released; moves transfer ownership.
        {
            std::vector<ironlock::lock> owners;
            owners.push_back(std::move(held));
        }
        ironlock::lock again = m.acquire({r}, 5s, {std::nullopt, 0u, false, std::nullopt});
        check(again.valid(), "released by the destructor");
        again.finish();

        // The loss rule: keys deleted behind the holder's back make finish() throw LOST.
        const std::string r2 = name("lost");
        ironlock::lock doomed = m.acquire({r2}, 5s);
        std::this_thread::sleep_for(100ms);  // every node holds the key by now
        char reply[256];
        for (int i = 0; i < 2; ++i) {
            const std::string cmd = "cmd " + std::to_string(i) + " DEL " + r2;
            harness_send(&h, cmd.c_str(), reply, sizeof reply);
        }
        try {
            doomed.finish();
            check(false, "finish throws LOST");
        } catch (const ironlock::error &e) {
            check(e.status() == IRONLOCK_LOST, "status LOST");
        }

        // Auto-extension keeps a 1 s lock valid for 1.5 s.
        ironlock::lock kept = m.acquire({name("kept")}, 1s);
        kept.auto_extend();
        std::this_thread::sleep_for(1500ms);
        check(kept.valid() && !kept.lost(), "auto-extended");
        check(kept.release(), "release() says a quorum held it");

        // A semaphore of 2: two permits, the third throws CONTENDED.
        {
            const std::string sem = name("sem");
            ironlock::lock p1 = m.acquire_permit(sem, 2, 5s);
            ironlock::lock p2 = m.acquire_permit(sem, 2, 5s);
            check(p1.access() == IRONLOCK_ACCESS_NONE, "a permit: access() NONE");
            try {
                m.acquire_permit(sem, 2, 5s, ironlock::acquire_options{std::nullopt, 0, false, std::nullopt});
                check(false, "a third permit throws");
            } catch (const ironlock::error &e) {
                check(e.status() == IRONLOCK_CONTENDED, "third permit: CONTENDED");
            }
            check(p1.release() && p2.release(), "permits released");
        }

        // A read-write lock: readers share, a writer and a plain lock are refused while they
        // hold; then the writer excludes readers. access() tells the sides apart.
        {
            const std::string rw = name("rw");
            const ironlock::acquire_options once{std::nullopt, 0u, false, std::nullopt};
            ironlock::lock r1 = m.acquire_read(rw, 5s);
            ironlock::lock r2 = m.acquire_read(rw, 5s, once);
            check(r1.access() == IRONLOCK_ACCESS_READ && r2.access() == IRONLOCK_ACCESS_READ, "readers: access() READ");
            check(r1.token() != r2.token(), "readers: two tokens");
            check(again.access() == IRONLOCK_ACCESS_NONE, "a plain lock: access() NONE");
            try {
                m.acquire_write(rw, 5s, once);
                check(false, "a writer while readers hold throws");
            } catch (const ironlock::error &e) {
                check(e.status() == IRONLOCK_CONTENDED, "writer behind readers: CONTENDED");
                check(std::string(e.what()).find("could not acquire the write lock of [\"" + rw + "\"]") != std::string::npos,
                      "writer behind readers: what()");
            }
            try {
                m.acquire({rw}, 5s, once);
                check(false, "a plain lock while readers hold throws");
            } catch (const ironlock::error &e) {
                check(e.status() == IRONLOCK_CONTENDED, "plain lock behind readers: CONTENDED");
            }
            check(r1.release() && r2.release(), "readers released");
            ironlock::lock w = m.acquire_write(rw, 5s, {std::nullopt, 0u, true, std::nullopt});
            check(w.access() == IRONLOCK_ACCESS_WRITE && w.fence().has_value(), "writer: access() WRITE, fenced");
            try {
                m.acquire_read(rw, 5s, once);
                check(false, "a reader while a writer holds throws");
            } catch (const ironlock::error &e) {
                check(e.status() == IRONLOCK_CONTENDED, "reader behind a writer: CONTENDED");
                check(std::string(e.what()).find("a writer") != std::string::npos, "reader behind a writer: what()");
            }
            w.finish();
            ironlock::lock r3 = m.acquire_read(rw, 5s, once);
            check(r3.release(), "a reader once the writer finished");
        }

        // A fair try-lock behind a holder: CONTENDED, and nothing left in line.
        {
            const std::string r = name("fair");
            ironlock::lock holder = m.acquire({r}, 5s);
            ironlock::acquire_options fair{std::nullopt, 0, false, true};
            try {
                m.acquire({r}, 5s, fair);
                check(false, "a fair try-lock behind a holder throws");
            } catch (const ironlock::error &e) {
                check(e.status() == IRONLOCK_CONTENDED, "fair try-lock: CONTENDED");
            }
            check(holder.release(), "holder released");
            ironlock::lock next = m.acquire({r}, 5s, fair);
            check(next.release(), "a fair acquire of a free lock");
        }

        // Bad input throws INVALID_ARGUMENT naming the argument.
        try {
            ironlock::manager bad(ironlock::config{}.node("not a url"));
            check(false, "bad node throws");
        } catch (const ironlock::error &e) {
            check(e.status() == IRONLOCK_INVALID_ARGUMENT, "status INVALID_ARGUMENT");
            check(std::string(e.what()).find("nodes[0]") != std::string::npos, "names nodes[0]");
        }
        try {
            // Per-node TLS for a node that does not exist: refused when the manager starts.
            ironlock::manager bad(ironlock::config{}
                                      .node("rediss://127.0.0.1:6390")
                                      .tls_server_name("redis-a.ironlock.test")
                                      .node_tls(1, std::nullopt, std::nullopt, std::nullopt, "b.test"));
            check(false, "node_tls of a missing node throws");
        } catch (const ironlock::error &e) {
            check(e.status() == IRONLOCK_INVALID_ARGUMENT, "node_tls: INVALID_ARGUMENT");
            check(std::string(e.what()).find("node_tls[1]") != std::string::npos, "names node_tls[1]");
        }
        try {
            m.acquire({}, 1s);
            check(false, "no resources throws");
        } catch (const ironlock::error &e) {
            check(e.status() == IRONLOCK_INVALID_ARGUMENT, "empty resources");
        }
        // Bad durations and names are refused naming the argument, never passed on as another
        // value (a negative wait is not "no deadline", a NUL byte does not cut the name short).
        auto refused = [](const char *what, const char *arg, auto &&call) {
            try {
                call();
                check(false, what);
            } catch (const ironlock::error &e) {
                check(e.status() == IRONLOCK_INVALID_ARGUMENT &&
                          std::string(e.what()).rfind(std::string(arg) + ":", 0) == 0,
                      what);
            }
        };
        refused("negative queue_timeout", "queue_timeout", [] { ironlock::config{}.queue_timeout(-5ms); });
        refused("NaN retry_delay", "retry_delay",
                [] { ironlock::config{}.retry_delay(std::chrono::duration<double>(std::nan(""))); });
        refused("infinite node_timeout", "node_timeout", [] {
            ironlock::config{}.node_timeout(std::chrono::duration<double>(std::numeric_limits<double>::infinity()));
        });
        refused("sub-millisecond connect_timeout", "connect_timeout",
                [] { ironlock::config{}.connect_timeout(500us); });
        refused("negative ttl", "ttl", [&] { m.acquire({name("neg")}, -1s); });
        refused("negative wait", "wait",
                [&] { m.acquire({name("wait")}, 1s, {std::chrono::milliseconds(-1000), std::nullopt, false, std::nullopt}); });
        refused("zero wait", "wait",
                [&] { m.acquire({name("wait0")}, 1s, {0ms, std::nullopt, false, std::nullopt}); });
        refused("NUL in a resource", "resources[1]",
                [&] { m.acquire({name("ok"), std::string("cpp-a\0evil", 10)}, 1s); });
        refused("NUL in a semaphore name", "resource",
                [&] { m.acquire_permit(std::string("cpp-a\0evil", 10), 2, 1s); });
        refused("NUL in a read-write lock's name", "resource",
                [&] { m.acquire_write(std::string("cpp-a\0evil", 10), 1s); });
        refused("fair read", "fair",
                [&] { m.acquire_read(name("rw-fair"), 1s, {std::nullopt, std::nullopt, false, true}); });
        refused("fair write", "fair",
                [&] { m.acquire_write(name("rw-fair"), 1s, {std::nullopt, std::nullopt, false, true}); });
        refused("negative ttl of a read", "ttl", [&] { m.acquire_read(name("rw-neg"), -1s); });
        refused("NUL in a node URL", "nodes",
                [] { ironlock::config{}.node(std::string("redis://127.0.0.1:6379\0x", 24)); });
    }
    harness_stop(&h);
    std::printf("test_hpp: %d checks passed, %d failed\n", passes, failures);
    return failures ? 1 : 0;
}
