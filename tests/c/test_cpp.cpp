// The header compiles as C++17 (-Wall -Wextra -Werror -pedantic) and works with RAII owners.
#include <ironlock.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "harness.h"

namespace {

struct config_free { void operator()(ironlock_config *c) const noexcept { ironlock_config_free(c); } };
struct manager_free { void operator()(ironlock_manager *m) const noexcept { ironlock_manager_free(m); } };
struct lock_free { void operator()(ironlock_lock *l) const noexcept { ironlock_lock_free(l); } };

int failures = 0;

void check(bool ok, const char *what) {
    if (!ok) {
        ++failures;
        std::fprintf(stderr, "test_cpp: %s failed (%s)\n", what, ironlock_last_error());
    }
}

}  // namespace

int main() {
    const std::string version = std::to_string(IRONLOCK_VERSION_MAJOR) + "." +
                                std::to_string(IRONLOCK_VERSION_MINOR) + "." +
                                std::to_string(IRONLOCK_VERSION_PATCH);
    check(version == ironlock_version(), "version macros match the library");
    static_assert(IRONLOCK_OK == 0 && IRONLOCK_INTERNAL == 6, "stable status numbers");

    harness h;
    if (harness_start(&h, 1) != 0) return 1;
    std::unique_ptr<ironlock_config, config_free> config(ironlock_config_new());
    check(ironlock_config_add_node(config.get(), h.urls[0]) == IRONLOCK_OK, "add_node");
    check(ironlock_config_set_restart_quarantine(config.get(), false) == IRONLOCK_OK, "quarantine");
    // Loopback answers in well under a millisecond; the margin is for valgrind runs.
    check(ironlock_config_set_node_timeout_ms(config.get(), 1000) == IRONLOCK_OK, "node_timeout");
    ironlock_manager *raw_manager = nullptr;
    check(ironlock_manager_new(config.get(), &raw_manager) == IRONLOCK_OK, "manager_new");
    std::unique_ptr<ironlock_manager, manager_free> manager(raw_manager);

    const char *resources[] = {"c-test:cpp"};
    ironlock_acquire_options options{};
    options.single_attempt = true;
    ironlock_lock *raw_lock = nullptr;
    check(ironlock_acquire(manager.get(), resources, 1, 2000, &options, &raw_lock) == IRONLOCK_OK, "acquire");
    std::unique_ptr<ironlock_lock, lock_free> lock(raw_lock);
    if (!lock) {
        harness_stop(&h);
        std::printf("test_cpp: FAILED\n");
        return 1;
    }
    check(ironlock_lock_is_valid(lock.get()), "valid");
    check(std::strlen(ironlock_lock_token(lock.get())) == IRONLOCK_TOKEN_LEN, "token length");
    check(ironlock_release(lock.get()) == IRONLOCK_OK, "release");
    lock.reset();
    manager.reset();
    harness_stop(&h);
    std::printf("test_cpp: %s\n", failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? 0 : 1;
}
