/* An "old binary": written and compiled against the 0.1.0 header only (ffi/abi/0.1.0/ironlock.h,
 * kept verbatim), never against the current one, and run against the freshly built
 * libironlock.so.0 (under valgrind in tests/c/run.sh). It calls every function of the 0.1.0 ABI,
 * with the 0.1.0 ironlock_acquire_options struct, against real redis-server nodes: the library
 * must keep this program working, with the same behaviour, for the whole ABI generation. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "harness.h"

#if IRONLOCK_VERSION_MAJOR != 0 || IRONLOCK_VERSION_MINOR != 1 || IRONLOCK_VERSION_PATCH != 0
#error "abi_v0.c must be compiled against the 0.1.0 header (ffi/abi/0.1.0)"
#endif

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static void on_lost(void *userdata) { *(volatile int *)userdata = 1; }

int main(void) {
    harness h;
    if (harness_start(&h, 3) != 0) {
        fprintf(stderr, "abi_v0: cannot start nodes\n");
        return 1;
    }
    /* Version, status names, the panic boundary, the thread's last error. */
    CHECK(strncmp(ironlock_version(), "0.", 2) == 0);
    CHECK(strcmp(ironlock_status_str(IRONLOCK_OK), "OK") == 0);
    CHECK(strcmp(ironlock_status_str(IRONLOCK_CONTENDED), "CONTENDED") == 0);
    CHECK(ironlock_debug_panic() == IRONLOCK_INTERNAL);
    CHECK(strstr(ironlock_last_error(), "panic") != NULL);

    /* Every 0.1.0 setting. */
    ironlock_config *cfg = ironlock_config_new();
    CHECK(cfg != NULL);
    for (int i = 0; i < h.nodes; i++) CHECK(ironlock_config_add_node(cfg, h.urls[i]) == IRONLOCK_OK);
    CHECK(ironlock_config_set_retry_count(cfg, 3) == IRONLOCK_OK);
    CHECK(ironlock_config_set_retry_delay_ms(cfg, 20) == IRONLOCK_OK);
    CHECK(ironlock_config_set_retry_jitter_ms(cfg, 5) == IRONLOCK_OK);
    CHECK(ironlock_config_set_drift_factor(cfg, 0.01) == IRONLOCK_OK);
    CHECK(ironlock_config_set_drift_constant_ms(cfg, 2) == IRONLOCK_OK);
    CHECK(ironlock_config_set_node_timeout_ms(cfg, 500) == IRONLOCK_OK);
    CHECK(ironlock_config_set_connect_timeout_ms(cfg, 5000) == IRONLOCK_OK);
    CHECK(ironlock_config_set_max_ttl_ms(cfg, 60000) == IRONLOCK_OK);
    CHECK(ironlock_config_set_restart_quarantine(cfg, false) == IRONLOCK_OK);
    CHECK(ironlock_config_set_key_prefix(cfg, "abi0:") == IRONLOCK_OK);
    CHECK(ironlock_config_set_min_validity_ms(cfg, 0) == IRONLOCK_OK);
    CHECK(ironlock_config_set_max_extensions(cfg, 100) == IRONLOCK_OK);
    CHECK(ironlock_config_set_extension_threshold_ms(cfg, 400) == IRONLOCK_OK);
    ironlock_manager *m = NULL;
    CHECK_STATUS(ironlock_manager_new(cfg, &m), IRONLOCK_OK, NULL);
    ironlock_config_free(cfg);
    if (!m) return 1;

    char name[64];
    snprintf(name, sizeof name, "abi-v0-%ld-%ld", (long)getpid(), (long)time(NULL));
    const char *res[] = {name};

    /* Acquire with the 0.1.0 options struct (fencing), and the per-node report. */
    ironlock_acquire_options opts = {0};
    opts.fencing = true;
    ironlock_lock *lock = NULL;
    CHECK_STATUS(ironlock_acquire(m, res, 1, 1200, &opts, &lock), IRONLOCK_OK, NULL);
    if (!lock) return 1;
    CHECK(ironlock_last_report_node_count() == 3);
    CHECK(ironlock_last_report_rounds() == 1);
    CHECK(ironlock_last_report_elapsed_us() > 0);
    size_t votes_for = 0;
    for (size_t i = 0; i < 3; i++) {
        CHECK(ironlock_last_report_node_url(i) != NULL);
        const char *vote = ironlock_last_report_node_vote(i);
        if (vote && strcmp(vote, "for") == 0) {
            votes_for++;
            CHECK(ironlock_last_report_node_error(i) == NULL);
        }
    }
    CHECK(votes_for >= 2);
    CHECK(strlen(ironlock_lock_token(lock)) == IRONLOCK_TOKEN_LEN);
    uint64_t fence = 0;
    CHECK(ironlock_lock_fence(lock, &fence) == IRONLOCK_OK && fence > 0);
    CHECK(ironlock_lock_is_valid(lock));
    CHECK(!ironlock_lock_is_lost(lock));
    CHECK(ironlock_lock_validity_ms(lock) > 0);
    CHECK_STATUS(ironlock_extend(lock, 1200), IRONLOCK_OK, NULL);
    CHECK(ironlock_lock_report(lock) == IRONLOCK_OK && ironlock_last_report_rounds() == 1);

    /* Held: a single attempt with the old struct is CONTENDED and writes no lock. */
    ironlock_acquire_options once = {0};
    once.single_attempt = true;
    ironlock_lock *other = NULL;
    CHECK_STATUS(ironlock_acquire(m, res, 1, 1200, &once, &other), IRONLOCK_CONTENDED, NULL);
    CHECK(other == NULL);

    /* Auto-extension keeps it alive across more than its ttl; stopping it runs no callback. */
    volatile int lost = 0;
    CHECK(ironlock_lock_auto_extend(lock, on_lost, (void *)&lost) == IRONLOCK_OK);
    sleep_ms(1800);
    CHECK(ironlock_lock_is_valid(lock) && !lost);
    CHECK(ironlock_lock_stop_auto_extend(lock) == IRONLOCK_OK);

    /* Release, both forms. */
    bool held = false;
    CHECK(ironlock_release_held(lock, &held) == IRONLOCK_OK && held);
    ironlock_lock_free(lock);
    CHECK_STATUS(ironlock_acquire(m, res, 1, 1200, NULL, &lock), IRONLOCK_OK, NULL);
    if (lock) {
        CHECK(ironlock_release(lock) == IRONLOCK_OK);
        ironlock_lock_free(lock);
    }
    ironlock_manager_free(m);
    harness_stop(&h);
    printf("abi_v0: %d checks passed, %d failed\n", check_passes, check_failures);
    return check_failures ? 1 : 0;
}
