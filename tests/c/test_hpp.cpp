// include/ironlock.hpp (C++17 RAII wrapper) against real nodes: RAII release, chrono durations,
// exceptions carrying the status and the report, the loss rule, moves, auto-extension,
// semaphores, read-write locks, fair locks, bad input, leader elections.
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
        refused("negative ttl of a read", "ttl", [&] { m.acquire_read(name("rw-neg"), -1s); });
        refused("NUL in a node URL", "nodes",
                [] { ironlock::config{}.node(std::string("redis://127.0.0.1:6379\0x", 24)); });

        // Leader elections: the observer sees nobody, then times out; a campaign leads, the
        // nodes and the observer show it, proclaim changes the value; the destructor resigns
        // (the next candidate leads at once, with a larger term); resign ends it; abandon()
        // does not resign; bad input is refused naming the argument.
        {
            const std::string e = name("elect");
            ironlock::observer obs = m.observe(e);
            const auto first = obs.next_for(5s);
            check(first.has_value() && !first->has_value(), "observer: nobody leads at first");
            check(!obs.next_for(200ms).has_value(), "observer: no change until the timeout");
            check(!m.leader(e).has_value(), "leader(): nobody");
            std::uint64_t term_a = 0;
            {
                ironlock::leadership a = m.campaign(e, "a:1", 5s);
                term_a = a.term();
                check(a.is_leader() && !a.lost() && a.term() > 0 && a.token().size() == IRONLOCK_TOKEN_LEN,
                      "campaign: leading, with a term and a token");
                check(a.value() == "a:1" && a.validity() <= 4500ms && a.validity() > 3s,
                      "leadership: value, validity a tenth of the ttl short");
                const auto now = m.leader(e);
                check(now && now->value == "a:1" && now->term == a.term() && now->token == a.token() &&
                          now->validity > 0ms && now->validity <= 5s,
                      "leader(): the leadership");
                const auto seen = obs.next();
                check(seen && seen->term == a.term() && seen->value == "a:1", "observer: the leader");
                check(!a.wait_lost_for(50ms), "wait_lost_for: still leading");
                a.proclaim("a:2");
                check(a.value() == "a:2" && m.leader(e).value_or(ironlock::leader_info{}).value == "a:2", "proclaim");
                const auto proclaimed = obs.next_for(5s);
                check(proclaimed && *proclaimed && (*proclaimed)->value == "a:2" && (*proclaimed)->term == a.term(),
                      "observer: the proclaimed value");
                try {
                    m.campaign(e, "x", 5s, 300ms);
                    check(false, "a campaign behind a leader gives up");
                } catch (const ironlock::error &err) {
                    check(err.status() == IRONLOCK_CONTENDED, "campaign gave up: CONTENDED");
                }
                std::vector<ironlock::leadership> owners;
                owners.push_back(std::move(a));
                check(owners.back().term() == term_a, "a moved leadership");
            }
            // Resigned by the destructor: the next campaign leads within its 2 s wait (the old
            // key would have held 5 s).
            ironlock::leadership b = m.campaign(e, "b:1", 5s, 2000ms);
            check(b.term() > term_a, "after the destructor resigned: terms grow");
            b.resign();
            check(!b.is_leader() && b.wait_lost_for(1s), "resign(): no longer leader, wait_lost_for says so");
            try {
                b.proclaim("b:2");
                check(false, "proclaim after resign throws");
            } catch (const ironlock::error &err) {
                check(err.status() == IRONLOCK_LOST, "proclaim after resign: LOST");
            }
            ironlock::leadership c = m.campaign(e, "c", 1500ms);
            const std::uint64_t term_c = c.term();
            c.abandon();
            check(c.get() == nullptr && m.leader(e).value_or(ironlock::leader_info{}).term == term_c,
                  "abandon(): not resigned");
            refused("empty election name", "name", [&] { m.campaign("", "v", 1s); });
            refused("NUL in an election name", "name", [&] { m.campaign(std::string("e\0x", 3), "v", 1s); });
            refused("NUL in a leader() name", "name", [&] { m.leader(std::string("e\0x", 3)); });
            refused("too long a value", "value", [&] { m.campaign(name("long"), std::string(65537, 'v'), 1s); });
            refused("ttl 0", "ttl", [&] { m.campaign(name("ttl"), "v", 0s); });
            refused("zero wait", "wait", [&] { m.campaign(name("wait"), "v", 1s, 0ms); });
            refused("zero observer timeout", "timeout", [&] { obs.next_for(0ms); });
            refused("negative wait_lost timeout", "timeout", [&] { b.wait_lost_for(-1s); });
        }
    }
    harness_stop(&h);
    std::printf("test_hpp: %d checks passed, %d failed\n", passes, failures);
    return failures ? 1 : 0;
}
