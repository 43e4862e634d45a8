// ironlock quick start in C++17 (include/ironlock.hpp): take a lock on three Redis nodes, work,
// release. Build: c++ -std=c++17 basic.cpp $(pkg-config --cflags --libs ironlock) -o basic
// Run:   ./basic redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
#include <chrono>
#include <cstdio>

#include <ironlock.hpp>

int main(int argc, char **argv) {
    using namespace std::chrono_literals;
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s REDIS_URL...\n", argv[0]);
        return 2;
    }
    try {
        ironlock::config config;
        for (int i = 1; i < argc; ++i) config.node(argv[i]);
        // Fresh nodes (uptime 0) would sit out the restart quarantine (max_ttl + drift + 1 s).
        config.restart_quarantine(false);
        ironlock::manager manager(config);

        ironlock::acquire_options options;
        options.fencing = true;
        ironlock::lock lock = manager.acquire({"invoice:42"}, 10s, options);
        std::printf("locked invoice:42 for %lld ms (fence %llu)\n",
                    static_cast<long long>(lock.validity().count()),
                    static_cast<unsigned long long>(lock.fence().value_or(0)));
        // ... the critical section: keep it shorter than lock.validity() ...
        lock.finish();  // throws ironlock::error (IRONLOCK_LOST) if the lock was lost meanwhile
        std::printf("released; held to the end\n");
    } catch (const ironlock::error &e) {
        std::fprintf(stderr, "%s: %s\n", e.code(), e.what());
        return 1;
    }
    return 0;
}
