/* The C API against real nodes: happy path, contention, per-node reports, auto-extension and
 * its callback contract, the panic boundary, every bad input of SPEC §6 (NULL pointers, zero
 * lengths, non-UTF-8 bytes, out-of-range settings), out-parameters untouched on failure, and
 * no key written by a rejected call; semaphores, fair locks and read-write locks. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "check.h"
#include "harness.h"
#include "ironlock.h"

_Static_assert(IRONLOCK_OK == 0, "status numbers are stable");
_Static_assert(IRONLOCK_CONTENDED == 1, "status numbers are stable");
_Static_assert(IRONLOCK_UNAVAILABLE == 2, "status numbers are stable");
_Static_assert(IRONLOCK_LOST == 3, "status numbers are stable");
_Static_assert(IRONLOCK_INVALID_ARGUMENT == 4, "status numbers are stable");
_Static_assert(IRONLOCK_CONNECTION == 5, "status numbers are stable");
_Static_assert(IRONLOCK_INTERNAL == 6, "status numbers are stable");

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* A resource name unique to this run (keys must not collide across runs). */
static void unique(char *buf, size_t len, const char *what) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(buf, len, "c-test:%s:%ld:%ld", what, (long)ts.tv_sec, ts.tv_nsec);
}

static long long redis_int(harness *h, int node, const char *args) {
    char command[512], reply[512];
    snprintf(command, sizeof command, "cmd %d %s", node, args);
    if (harness_send(h, command, reply, sizeof reply) != 0) return -1;
    return strtoll(reply, NULL, 10);
}

/* Polls `args` on `node` until it replies 0, for up to 200 ms: a release returns once a quorum
   deleted the keys and the other deletes finish in the background. */
static long long redis_int_settled(harness *h, int node, const char *args) {
    long long v = redis_int(h, node, args);
    for (int i = 0; i < 40 && v != 0; i++) {
        sleep_ms(5);
        v = redis_int(h, node, args);
    }
    return v;
}

static ironlock_config *config_for(const harness *h) {
    ironlock_config *cfg = ironlock_config_new();
    for (int i = 0; i < h->nodes; i++) CHECK(ironlock_config_add_node(cfg, h->urls[i]) == IRONLOCK_OK);
    CHECK(ironlock_config_set_restart_quarantine(cfg, false) == IRONLOCK_OK);
    CHECK(ironlock_config_set_retry_count(cfg, 0) == IRONLOCK_OK);
    /* Loopback nodes answer in well under a millisecond; the margin is for valgrind runs. */
    CHECK(ironlock_config_set_node_timeout_ms(cfg, 1000) == IRONLOCK_OK);
    return cfg;
}

static void test_static_parts(void) {
    char expected[64];
    snprintf(expected, sizeof expected, "%d.%d.%d", IRONLOCK_VERSION_MAJOR, IRONLOCK_VERSION_MINOR,
             IRONLOCK_VERSION_PATCH);
    CHECK(strcmp(ironlock_version(), expected) == 0);
    CHECK(strcmp(ironlock_status_str(IRONLOCK_OK), "OK") == 0);
    CHECK(strcmp(ironlock_status_str(IRONLOCK_CONTENDED), "CONTENDED") == 0);
    CHECK(strcmp(ironlock_status_str(IRONLOCK_UNAVAILABLE), "UNAVAILABLE") == 0);
    CHECK(strcmp(ironlock_status_str(IRONLOCK_LOST), "LOST") == 0);
    CHECK(strcmp(ironlock_status_str(IRONLOCK_INVALID_ARGUMENT), "INVALID_ARGUMENT") == 0);
    CHECK(strcmp(ironlock_status_str(IRONLOCK_CONNECTION), "CONNECTION") == 0);
    CHECK(strcmp(ironlock_status_str(IRONLOCK_INTERNAL), "INTERNAL") == 0);
    CHECK(strcmp(ironlock_status_str(7), "UNKNOWN") == 0);
    CHECK(strcmp(ironlock_status_str(-1), "UNKNOWN") == 0);
    /* A panic inside the library becomes IRONLOCK_INTERNAL, never an abort. */
    CHECK_STATUS(ironlock_debug_panic(), IRONLOCK_INTERNAL, "panic");
    /* Every status call clears the last error first. */
    ironlock_config *cfg = ironlock_config_new();
    CHECK(cfg != NULL);
    CHECK_STATUS(ironlock_config_set_retry_count(cfg, 1), IRONLOCK_OK, NULL);
    CHECK(strcmp(ironlock_last_error(), "") == 0);
    ironlock_config_free(cfg);
    /* _free(NULL) is a no-op; NULL accessors give neutral values. */
    ironlock_config_free(NULL);
    ironlock_manager_free(NULL);
    ironlock_lock_free(NULL);
    CHECK(ironlock_lock_validity_ms(NULL) == 0);
    CHECK(!ironlock_lock_is_valid(NULL));
    CHECK(!ironlock_lock_is_lost(NULL));
    CHECK(ironlock_lock_token(NULL) == NULL);
    CHECK(ironlock_last_report_node_count() == 0);
    CHECK(ironlock_last_report_node_url(0) == NULL);
    CHECK(ironlock_last_report_node_vote(0) == NULL);
    CHECK(ironlock_last_report_node_error(0) == NULL);
}

/* Settings out of range, bad URLs and NULLs: rejected before any connection, naming the
 * argument; *out untouched. */
static void test_bad_config(const harness *h) {
    ironlock_manager *sentinel = (ironlock_manager *)&sentinel;
    ironlock_manager *m = sentinel;
    CHECK_STATUS(ironlock_config_add_node(NULL, h->urls[0]), IRONLOCK_INVALID_ARGUMENT, "config");
    ironlock_config *cfg = ironlock_config_new();
    CHECK_STATUS(ironlock_config_add_node(cfg, NULL), IRONLOCK_INVALID_ARGUMENT, "url");
    CHECK_STATUS(ironlock_config_add_node(cfg, "redis://127.0.0.1:1\xff"), IRONLOCK_INVALID_ARGUMENT, "url: not valid UTF-8");
    CHECK_STATUS(ironlock_config_set_key_prefix(cfg, NULL), IRONLOCK_INVALID_ARGUMENT, "key_prefix");
    CHECK_STATUS(ironlock_config_set_key_prefix(cfg, "\xc3("), IRONLOCK_INVALID_ARGUMENT, "key_prefix");
    CHECK_STATUS(ironlock_config_set_retry_count(NULL, 1), IRONLOCK_INVALID_ARGUMENT, "config");
    CHECK_STATUS(ironlock_config_set_drift_factor(NULL, 0.1), IRONLOCK_INVALID_ARGUMENT, "config");
    /* No nodes at all. */
    CHECK_STATUS(ironlock_manager_new(cfg, &m), IRONLOCK_INVALID_ARGUMENT, "nodes");
    CHECK(m == sentinel);
    CHECK_STATUS(ironlock_manager_new(NULL, &m), IRONLOCK_INVALID_ARGUMENT, "config");
    CHECK_STATUS(ironlock_manager_new(cfg, NULL), IRONLOCK_INVALID_ARGUMENT, "out");
    ironlock_config_free(cfg);

#define BAD_SETTING(setter_call, expected_status, needle_text)                   \
    do {                                                                         \
        ironlock_config *c_ = ironlock_config_new();                             \
        CHECK(ironlock_config_add_node(c_, h->urls[0]) == IRONLOCK_OK);          \
        CHECK(setter_call == IRONLOCK_OK);                                       \
        m = sentinel;                                                            \
        CHECK_STATUS(ironlock_manager_new(c_, &m), expected_status, needle_text); \
        CHECK(m == sentinel);                                                    \
        ironlock_config_free(c_);                                                \
    } while (0)

    BAD_SETTING(ironlock_config_set_drift_factor(c_, 0.5), IRONLOCK_INVALID_ARGUMENT, "drift_factor");
    BAD_SETTING(ironlock_config_set_drift_factor(c_, -0.01), IRONLOCK_INVALID_ARGUMENT, "drift_factor");
    BAD_SETTING(ironlock_config_set_drift_factor(c_, 0.0 / 0.0), IRONLOCK_INVALID_ARGUMENT, "drift_factor");
    BAD_SETTING(ironlock_config_set_node_timeout_ms(c_, 0), IRONLOCK_INVALID_ARGUMENT, "node_timeout");
    BAD_SETTING(ironlock_config_set_connect_timeout_ms(c_, 0), IRONLOCK_INVALID_ARGUMENT, "connect_timeout");
    BAD_SETTING(ironlock_config_set_max_ttl_ms(c_, 0), IRONLOCK_INVALID_ARGUMENT, "max_ttl");
    BAD_SETTING(ironlock_config_set_max_ttl_ms(c_, UINT64_MAX), IRONLOCK_INVALID_ARGUMENT, "max_ttl");
    BAD_SETTING(ironlock_config_set_min_validity_ms(c_, 60000), IRONLOCK_INVALID_ARGUMENT, "min_validity");
    BAD_SETTING(ironlock_config_set_extension_threshold_ms(c_, 0), IRONLOCK_INVALID_ARGUMENT, "extension_threshold");
    BAD_SETTING(ironlock_config_add_node(c_, h->urls[0]), IRONLOCK_INVALID_ARGUMENT, "duplicate");
    BAD_SETTING(ironlock_config_add_node(c_, "127.0.0.1:6379"), IRONLOCK_INVALID_ARGUMENT, "nodes[1]");
    BAD_SETTING(ironlock_config_add_node(c_, ""), IRONLOCK_INVALID_ARGUMENT, "nodes[1]");
    BAD_SETTING(ironlock_config_add_node(c_, "http://127.0.0.1:6379"), IRONLOCK_CONNECTION, "nodes[1]");
#undef BAD_SETTING
}

/* Bad acquire / lock arguments: INVALID_ARGUMENT naming the argument, *out untouched, nothing
 * written to Redis. */
static void test_bad_acquire(harness *h, ironlock_manager *m) {
    char r[128];
    unique(r, sizeof r, "bad");
    const char *one[] = {r};
    const char *with_null[] = {r, NULL};
    const char *non_utf8[] = {r, "bad\xff\xfe"};
    const char *empty_name[] = {""};
    const char *dup[] = {r, r};
    ironlock_lock *sentinel = (ironlock_lock *)&sentinel;
    ironlock_lock *out = sentinel;
    ironlock_acquire_options contradictory = {0};
    contradictory.single_attempt = true;
    contradictory.has_retry_count = true;
    contradictory.retry_count = 3;

    CHECK_STATUS(ironlock_acquire(NULL, one, 1, 1000, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "manager");
    CHECK_STATUS(ironlock_acquire(m, NULL, 1, 1000, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "resources: NULL");
    CHECK_STATUS(ironlock_acquire(m, one, 0, 1000, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "n_resources");
    CHECK_STATUS(ironlock_acquire(m, NULL, 0, 1000, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "n_resources");
    CHECK_STATUS(ironlock_acquire(m, with_null, 2, 1000, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "resources[1]: NULL");
    CHECK_STATUS(ironlock_acquire(m, non_utf8, 2, 1000, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "resources[1]: not valid UTF-8");
    CHECK_STATUS(ironlock_acquire(m, empty_name, 1, 1000, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "resources[0]");
    CHECK_STATUS(ironlock_acquire(m, dup, 2, 1000, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "resources[1]: duplicate");
    CHECK_STATUS(ironlock_acquire(m, one, 1, 0, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "ttl");
    CHECK_STATUS(ironlock_acquire(m, one, 1, 60001, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "max_ttl");
    CHECK_STATUS(ironlock_acquire(m, one, 1, UINT64_MAX, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "ttl");
    CHECK_STATUS(ironlock_acquire(m, one, 1, 1000, &contradictory, &out), IRONLOCK_INVALID_ARGUMENT, "single_attempt");
    CHECK_STATUS(ironlock_acquire(m, one, 1, 1000, NULL, NULL), IRONLOCK_INVALID_ARGUMENT, "out");
    CHECK(out == sentinel);
    CHECK(ironlock_last_report_node_count() == 0);
    /* None of that reached Redis. */
    CHECK(redis_int(h, 0, "DBSIZE") == 0);

    CHECK_STATUS(ironlock_extend(NULL, 1000), IRONLOCK_INVALID_ARGUMENT, "lock");
    CHECK_STATUS(ironlock_release(NULL), IRONLOCK_INVALID_ARGUMENT, "lock");
    bool held = true;
    CHECK_STATUS(ironlock_release_held(NULL, &held), IRONLOCK_INVALID_ARGUMENT, "lock");
    CHECK(held == true);
    uint64_t fence = 7;
    CHECK_STATUS(ironlock_lock_fence(NULL, &fence), IRONLOCK_INVALID_ARGUMENT, "lock");
    CHECK(fence == 7);
    CHECK_STATUS(ironlock_lock_report(NULL), IRONLOCK_INVALID_ARGUMENT, "lock");
    CHECK_STATUS(ironlock_lock_auto_extend(NULL, NULL, NULL), IRONLOCK_INVALID_ARGUMENT, "lock");
    CHECK_STATUS(ironlock_lock_stop_auto_extend(NULL), IRONLOCK_INVALID_ARGUMENT, "lock");

    /* Lock-level bad arguments on a real lock. */
    ironlock_lock *lock = NULL;
    CHECK_STATUS(ironlock_acquire(m, one, 1, 5000, NULL, &lock), IRONLOCK_OK, NULL);
    if (!lock) return;
    CHECK_STATUS(ironlock_lock_fence(lock, NULL), IRONLOCK_INVALID_ARGUMENT, "fence");
    CHECK_STATUS(ironlock_lock_fence(lock, &fence), IRONLOCK_INVALID_ARGUMENT, "without fencing");
    CHECK(fence == 7);
    CHECK_STATUS(ironlock_release_held(lock, NULL), IRONLOCK_INVALID_ARGUMENT, "held");
    CHECK(ironlock_lock_is_valid(lock)); /* the refused release did nothing */
    CHECK_STATUS(ironlock_extend(lock, 0), IRONLOCK_INVALID_ARGUMENT, "ttl");
    CHECK_STATUS(ironlock_extend(lock, 60001), IRONLOCK_INVALID_ARGUMENT, "ttl");
    CHECK_STATUS(ironlock_release(lock), IRONLOCK_OK, NULL);
    ironlock_lock_free(lock);
    CHECK(redis_int(h, 0, "DBSIZE") == 0);
}

static size_t count_votes(const char *vote) {
    size_t n = 0;
    for (size_t i = 0; i < ironlock_last_report_node_count(); i++) {
        if (strcmp(ironlock_last_report_node_vote(i), vote) == 0) n++;
    }
    return n;
}

static void test_lifecycle(harness *h, ironlock_manager *m) {
    char r1[128], r2[128];
    unique(r1, sizeof r1, "life-a");
    unique(r2, sizeof r2, "life-b");
    const char *res[] = {r1, r2};
    ironlock_acquire_options opts = {0};
    opts.fencing = true;
    ironlock_lock *lock = NULL;
    CHECK_STATUS(ironlock_acquire(m, res, 2, 5000, &opts, &lock), IRONLOCK_OK, NULL);
    if (!lock) return;
    CHECK(strcmp(ironlock_last_error(), "") == 0);
    CHECK(ironlock_last_report_node_count() == (size_t)h->nodes);
    /* The outcome is decided at quorum; slower nodes may still be "pending". */
    CHECK(count_votes("for") >= 2 && count_votes("for") + count_votes("pending") == (size_t)h->nodes);
    CHECK(ironlock_last_report_rounds() == 1);
    CHECK(ironlock_last_report_elapsed_us() > 0);
    for (int i = 0; i < h->nodes; i++) {
        CHECK(strcmp(ironlock_last_report_node_url((size_t)i), h->urls[i]) == 0 ||
              strncmp(ironlock_last_report_node_url((size_t)i), h->urls[i], strlen(h->urls[i])) == 0);
        CHECK(ironlock_last_report_node_error((size_t)i) == NULL);
    }
    CHECK(ironlock_last_report_node_url((size_t)h->nodes) == NULL);

    const char *token = ironlock_lock_token(lock);
    CHECK(token && strlen(token) == IRONLOCK_TOKEN_LEN && strspn(token, "0123456789abcdef") == IRONLOCK_TOKEN_LEN);
    char command[512], reply[512];
    /* The acquire returned at a majority: those nodes hold the token (a straggler may not yet). */
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", token);
    int holding = 0;
    for (int node = 0; node < h->nodes; node++) {
        snprintf(command, sizeof command, "cmd %d GET %s", node, r1);
        CHECK(harness_send(h, command, reply, sizeof reply) == 0);
        if (strcmp(reply, quoted) == 0) holding++;
    }
    CHECK(holding >= h->nodes / 2 + 1);

    uint64_t fence = 0;
    CHECK_STATUS(ironlock_lock_fence(lock, &fence), IRONLOCK_OK, NULL);
    CHECK(fence > 1000000000000000ull); /* at least the unix time in microseconds */
    uint64_t validity = ironlock_lock_validity_ms(lock);
    CHECK(validity > 4000 && validity <= 5000);
    CHECK(ironlock_lock_is_valid(lock));
    CHECK(!ironlock_lock_is_lost(lock));

    /* Contended: a second acquire of one of the resources fails, *out untouched. */
    ironlock_lock *other = (ironlock_lock *)&other;
    ironlock_acquire_options once = {0};
    once.single_attempt = true;
    const char *just_b[] = {r2};
    CHECK_STATUS(ironlock_acquire(m, just_b, 1, 5000, &once, &other), IRONLOCK_CONTENDED, "held elsewhere");
    CHECK(other == (ironlock_lock *)&other);
    CHECK(count_votes("against") >= 2 && count_votes("against") + count_votes("pending") == (size_t)h->nodes);

    CHECK_STATUS(ironlock_extend(lock, 8000), IRONLOCK_OK, NULL);
    CHECK(ironlock_lock_validity_ms(lock) > 7000);
    CHECK(count_votes("for") >= 2 && count_votes("for") + count_votes("pending") == (size_t)h->nodes);
    /* The extend returned at a majority: every node that voted for it already holds the new
       ttl (a straggler may still be applying it), and the old ttl was at most 5000 ms. */
    snprintf(command, sizeof command, "PTTL %s", r2);
    int extended = 0;
    for (int node = 0; node < h->nodes; node++) {
        if (redis_int(h, node, command) > 5000) extended++;
    }
    CHECK(extended >= h->nodes / 2 + 1);

    /* The lock's own report, loaded into this thread's report. */
    CHECK_STATUS(ironlock_release(NULL), IRONLOCK_INVALID_ARGUMENT, NULL);
    CHECK(ironlock_last_report_node_count() == 0);
    CHECK_STATUS(ironlock_lock_report(lock), IRONLOCK_OK, NULL);
    CHECK(ironlock_last_report_node_count() == (size_t)h->nodes);

    bool held = false;
    CHECK_STATUS(ironlock_release_held(lock, &held), IRONLOCK_OK, NULL);
    CHECK(held);
    CHECK(!ironlock_lock_is_valid(lock));
    CHECK(ironlock_lock_validity_ms(lock) == 0);
    CHECK_STATUS(ironlock_extend(lock, 5000), IRONLOCK_LOST, "released");
    CHECK_STATUS(ironlock_lock_auto_extend(lock, NULL, NULL), IRONLOCK_LOST, NULL);
    /* A second release deletes nothing and says so, without failing. */
    held = true;
    CHECK_STATUS(ironlock_release_held(lock, &held), IRONLOCK_OK, NULL);
    CHECK(!held);
    ironlock_lock_free(lock);
    snprintf(command, sizeof command, "EXISTS %s %s", r1, r2);
    for (int node = 0; node < h->nodes; node++) CHECK(redis_int_settled(h, node, command) == 0);
}

typedef struct {
    atomic_int calls;
    ironlock_lock *lock;
    atomic_int blocking_status; /* what a blocking call inside the callback returned */
    pthread_t caller;           /* the test's thread: the callback must run on another */
    atomic_int on_caller;
} lost_state;

static void on_lost(void *userdata) {
    lost_state *st = userdata;
    if (pthread_equal(pthread_self(), st->caller)) atomic_store(&st->on_caller, 1);
    /* Allowed: non-blocking accessors. Refused: blocking calls (they would stall the runtime). */
    atomic_store(&st->blocking_status, ironlock_extend(st->lock, 1000));
    if (ironlock_lock_is_lost(st->lock)) atomic_fetch_add(&st->calls, 1);
}

/* A fresh lock with auto-extension reporting into `st`. */
static ironlock_lock *auto_extended(ironlock_manager *m, const char **res, uint64_t ttl_ms, lost_state *st) {
    ironlock_lock *lock = NULL;
    CHECK_STATUS(ironlock_acquire(m, res, 1, ttl_ms, NULL, &lock), IRONLOCK_OK, NULL);
    if (!lock) return NULL;
    atomic_store(&st->calls, 0);
    st->lock = lock;
    CHECK_STATUS(ironlock_lock_auto_extend(lock, on_lost, st), IRONLOCK_OK, NULL);
    return lock;
}

static void test_auto_extend(harness *h, ironlock_manager *m) {
    char r[128], command[512];
    unique(r, sizeof r, "auto");
    const char *res[] = {r};
    ironlock_lock *lock = NULL;
    CHECK_STATUS(ironlock_acquire(m, res, 1, 600, NULL, &lock), IRONLOCK_OK, NULL);
    if (!lock) return;
    lost_state st;
    atomic_init(&st.calls, 0);
    atomic_init(&st.blocking_status, -1);
    atomic_init(&st.on_caller, 0);
    st.caller = pthread_self();
    st.lock = lock;
    CHECK_STATUS(ironlock_lock_auto_extend(lock, on_lost, &st), IRONLOCK_OK, NULL);
    CHECK_STATUS(ironlock_lock_auto_extend(lock, on_lost, &st), IRONLOCK_INVALID_ARGUMENT, "already running");
    sleep_ms(1500); /* 2.5 ttls: only background extensions keep it */
    CHECK(ironlock_lock_is_valid(lock));
    CHECK(!ironlock_lock_is_lost(lock));
    CHECK(atomic_load(&st.calls) == 0);
    snprintf(command, sizeof command, "PTTL %s", r);
    CHECK(redis_int(h, 0, command) > 0);

    /* Take the lock away behind its back: the next extension finds the token gone. */
    snprintf(command, sizeof command, "DEL %s", r);
    for (int i = 0; i < h->nodes; i++) CHECK(redis_int(h, i, command) == 1);
    for (int i = 0; i < 300 && atomic_load(&st.calls) == 0; i++) sleep_ms(10);
    CHECK(atomic_load(&st.calls) == 1);
    CHECK(ironlock_lock_is_lost(lock));
    CHECK(!ironlock_lock_is_valid(lock));
    CHECK(atomic_load(&st.blocking_status) == IRONLOCK_INVALID_ARGUMENT);
    CHECK(atomic_load(&st.on_caller) == 0); /* never inside the caller's own calls */
    sleep_ms(100);
    CHECK(atomic_load(&st.calls) == 1); /* once */
    CHECK_STATUS(ironlock_extend(lock, 1000), IRONLOCK_LOST, "lost");
    CHECK_STATUS(ironlock_lock_stop_auto_extend(lock), IRONLOCK_OK, NULL);
    ironlock_lock_free(lock);

    /* Release stops auto-extension: no callback for a released lock. */
    lock = auto_extended(m, res, 400, &st);
    if (!lock) return;
    CHECK_STATUS(ironlock_release(lock), IRONLOCK_OK, NULL);
    sleep_ms(600);
    CHECK(atomic_load(&st.calls) == 0);
    CHECK(!ironlock_lock_is_lost(lock));
    ironlock_lock_free(lock);

    /* Free with auto-extension running: stops it, sends nothing (the key expires on its own). */
    lock = auto_extended(m, res, 1000, &st);
    if (!lock) return;
    ironlock_lock_free(lock);
    snprintf(command, sizeof command, "EXISTS %s", r);
    int exists = 0;
    for (int node = 0; node < h->nodes; node++) exists += redis_int(h, node, command) == 1;
    CHECK(exists >= h->nodes / 2 + 1);
    sleep_ms(1300); /* past the ttl; auto-extension would have extended at 2/3 of it */
    CHECK(redis_int(h, 0, command) == 0); /* not extended after free */
    CHECK(atomic_load(&st.calls) == 0);
}

/* A lock outlives its manager: it keeps the runtime and can still be released. */
static void test_lock_outlives_manager(harness *h) {
    char r[128], command[512];
    unique(r, sizeof r, "outlive");
    const char *res[] = {r};
    ironlock_config *cfg = config_for(h);
    ironlock_manager *m = NULL;
    CHECK_STATUS(ironlock_manager_new(cfg, &m), IRONLOCK_OK, NULL);
    ironlock_config_free(cfg);
    if (!m) return;
    ironlock_lock *lock = NULL;
    CHECK_STATUS(ironlock_acquire(m, res, 1, 5000, NULL, &lock), IRONLOCK_OK, NULL);
    ironlock_manager_free(m);
    if (!lock) return;
    CHECK_STATUS(ironlock_extend(lock, 5000), IRONLOCK_OK, NULL);
    CHECK_STATUS(ironlock_release(lock), IRONLOCK_OK, NULL);
    ironlock_lock_free(lock);
    snprintf(command, sizeof command, "EXISTS %s", r);
    for (int node = 0; node < h->nodes; node++) CHECK(redis_int_settled(h, node, command) == 0);
}

/* Passwords never appear in errors or reports. */
static void test_redaction(const harness *h) {
    char url[128];
    const char *port = strrchr(h->urls[0], ':');
    snprintf(url, sizeof url, "redis://user:s3cretpw@127.0.0.1%s", port);
    ironlock_config *cfg = ironlock_config_new();
    CHECK(ironlock_config_add_node(cfg, url) == IRONLOCK_OK);
    CHECK(ironlock_config_set_restart_quarantine(cfg, false) == IRONLOCK_OK);
    CHECK(ironlock_config_set_retry_count(cfg, 0) == IRONLOCK_OK);
    CHECK(ironlock_config_set_connect_timeout_ms(cfg, 300) == IRONLOCK_OK);
    ironlock_manager *m = NULL;
    ironlock_status s = ironlock_manager_new(cfg, &m);
    CHECK(strstr(ironlock_last_error(), "s3cretpw") == NULL);
    ironlock_config_free(cfg);
    if (s != IRONLOCK_OK) return; /* refused at start: the message was checked above */
    const char *res[] = {"c-test:redaction"};
    ironlock_lock *lock = NULL;
    s = ironlock_acquire(m, res, 1, 1000, NULL, &lock);
    CHECK(s == IRONLOCK_UNAVAILABLE); /* the node refuses the credentials */
    CHECK(strstr(ironlock_last_error(), "s3cretpw") == NULL);
    CHECK(ironlock_last_report_node_count() == 1);
    CHECK(strstr(ironlock_last_report_node_url(0), "s3cretpw") == NULL);
    CHECK(strstr(ironlock_last_report_node_url(0), "***") != NULL);
    const char *err = ironlock_last_report_node_error(0);
    CHECK(err != NULL && strstr(err, "s3cretpw") == NULL);
    if (lock) { ironlock_release(lock); ironlock_lock_free(lock); }
    ironlock_manager_free(m);
    /* A password with an unencoded '#', '?' or '/' does not parse: no part of it is shown. */
    const char *reserved[] = {"Hunter2#Secret", "Hunter2?Secret", "Hunter2/Secret"};
    for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++) {
        snprintf(url, sizeof url, "redis://alice:%s@127.0.0.1:6379", reserved[i]);
        cfg = ironlock_config_new();
        m = NULL;
        s = ironlock_config_add_node(cfg, url);
        if (s == IRONLOCK_OK) s = ironlock_manager_new(cfg, &m);
        CHECK(m == NULL);
        CHECK(s == IRONLOCK_INVALID_ARGUMENT);
        const char *msg = ironlock_last_error();
        CHECK(strstr(msg, "Hun") == NULL && strstr(msg, "ter2") == NULL);
        CHECK(strstr(msg, "Sec") == NULL && strstr(msg, "cret") == NULL);
        CHECK(strstr(msg, "nodes[0]") != NULL && strstr(msg, "%23") != NULL);
        ironlock_config_free(cfg);
    }
}

/* A Sentinel-managed master as a voter: the URL form is accepted, the sentinels' password is
   never shown, and a node that is no sentinel is a node error naming the sentinels. */
static void test_sentinel_voter(const harness *h) {
    char url[160];
    const char *port = strrchr(h->urls[0], ':');
    snprintf(url, sizeof url, "redis-sentinel://127.0.0.1%s,127.0.0.1%s#mymaster", port, port);
    ironlock_config *cfg = ironlock_config_new();
    CHECK(ironlock_config_add_node(cfg, url) == IRONLOCK_OK);
    CHECK(ironlock_config_set_sentinel_username(cfg, NULL) == IRONLOCK_OK);
    CHECK(ironlock_config_set_sentinel_password(cfg, "hunter2pw") == IRONLOCK_OK);
    CHECK(ironlock_config_set_restart_quarantine(cfg, false) == IRONLOCK_OK);
    CHECK(ironlock_config_set_retry_count(cfg, 0) == IRONLOCK_OK);
    CHECK(ironlock_config_set_connect_timeout_ms(cfg, 500) == IRONLOCK_OK);
    CHECK(ironlock_config_set_sentinel_password(NULL, "x") == IRONLOCK_INVALID_ARGUMENT);
    ironlock_manager *m = NULL;
    ironlock_status s = ironlock_manager_new(cfg, &m);
    ironlock_config_free(cfg);
    CHECK(s == IRONLOCK_OK);
    if (s != IRONLOCK_OK) return;
    const char *res[] = {"c-test:sentinel"};
    ironlock_lock *lock = NULL;
    s = ironlock_acquire(m, res, 1, 1000, NULL, &lock);
    CHECK(s == IRONLOCK_UNAVAILABLE); /* a plain redis-server answers no SENTINEL command */
    CHECK(strstr(ironlock_last_error(), "hunter2pw") == NULL);
    CHECK(ironlock_last_report_node_count() == 1);
    CHECK(strstr(ironlock_last_report_node_url(0), "redis-sentinel://") != NULL);
    CHECK(strstr(ironlock_last_report_node_url(0), "#mymaster") != NULL);
    const char *err = ironlock_last_report_node_error(0);
    CHECK(err != NULL && strstr(err, "sentinels") != NULL && strstr(err, "hunter2pw") == NULL);
    if (lock) { ironlock_release(lock); ironlock_lock_free(lock); }
    ironlock_manager_free(m);
    cfg = ironlock_config_new();
    CHECK(ironlock_config_add_node(cfg, "redis-sentinel://127.0.0.1:26379") == IRONLOCK_OK);
    m = NULL;
    CHECK_STATUS(ironlock_manager_new(cfg, &m), IRONLOCK_INVALID_ARGUMENT, "nodes[0]: a redis-sentinel:// URL names its master after '#'");
    CHECK(m == NULL);
    ironlock_config_free(cfg);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A bad node among good ones is a node error, not a start-up failure (SPEC §4); a blackholed
   node (accepts TCP, never answers) does not hold start-up for its connect_timeout: the manager
   is usable once a quorum is connected (issue 14 item 5). */
static void test_bad_node_among_good(const harness *h) {
    int silent = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    CHECK(silent >= 0 && bind(silent, (struct sockaddr *)&addr, sizeof addr) == 0);
    CHECK(listen(silent, 16) == 0 && getsockname(silent, (struct sockaddr *)&addr, &len) == 0);
    char silent_url[64];
    snprintf(silent_url, sizeof silent_url, "redis://127.0.0.1:%d", ntohs(addr.sin_port));
    ironlock_config *cfg = ironlock_config_new();
    for (int i = 0; i < h->nodes; i++) CHECK(ironlock_config_add_node(cfg, h->urls[i]) == IRONLOCK_OK);
    CHECK(ironlock_config_add_node(cfg, "redis://no-such-host.invalid:6379") == IRONLOCK_OK);
    CHECK(ironlock_config_add_node(cfg, silent_url) == IRONLOCK_OK);
    CHECK(ironlock_config_set_restart_quarantine(cfg, false) == IRONLOCK_OK);
    CHECK(ironlock_config_set_retry_count(cfg, 0) == IRONLOCK_OK);
    CHECK(ironlock_config_set_connect_timeout_ms(cfg, 10000) == IRONLOCK_OK);
    ironlock_manager *m = NULL;
    double started = now_s();
    CHECK_STATUS(ironlock_manager_new(cfg, &m), IRONLOCK_OK, NULL);
    double took = now_s() - started;
    /* Far below the 10 s connect_timeout (the real nodes answer in milliseconds; the margin
       is for valgrind). */
    if (took >= 5.0) fprintf(stderr, "start-up took %.3f s: it waited for the silent node\n", took);
    CHECK(took < 5.0);
    ironlock_config_free(cfg);
    if (!m) { close(silent); return; }
    char r[96];
    unique(r, sizeof r, "bad-node");
    const char *res[] = {r};
    ironlock_lock *lock = NULL;
    CHECK_STATUS(ironlock_acquire(m, res, 1, 5000, NULL, &lock), IRONLOCK_OK, NULL);
    CHECK(ironlock_last_report_node_count() == (size_t)h->nodes + 2);
    const char *err = ironlock_last_report_node_error((size_t)h->nodes);
    CHECK(err != NULL && strstr(err, "cannot resolve host") != NULL);
    CHECK(strcmp(ironlock_last_report_node_vote((size_t)h->nodes + 1), "for") != 0);
    if (lock) {
        CHECK_STATUS(ironlock_lock_finish(lock), IRONLOCK_OK, NULL);
        ironlock_lock_free(lock);
    }
    ironlock_manager_free(m);
    close(silent);
}

/* The extensible options (added after 0.1.0): setters on an opaque object, ironlock_acquire_with. */
static void test_acquire_opts(const harness *h, ironlock_manager *m) {
    (void)h;
    CHECK_STATUS(ironlock_acquire_opts_set_fencing(NULL, true), IRONLOCK_INVALID_ARGUMENT, "opts");
    ironlock_acquire_opts_free(NULL);
    ironlock_acquire_opts *o = ironlock_acquire_opts_new();
    CHECK(o != NULL);
    if (!o) return;
    CHECK(ironlock_acquire_opts_set_fencing(o, true) == IRONLOCK_OK);
    CHECK(ironlock_acquire_opts_set_wait_ms(o, 0) == IRONLOCK_OK);
    char r[96];
    unique(r, sizeof r, "opts");
    const char *res[] = {r};
    ironlock_lock *lock = NULL;
    CHECK_STATUS(ironlock_acquire_with(m, res, 1, 5000, o, &lock), IRONLOCK_OK, NULL);
    uint64_t fence = 0;
    CHECK(lock && ironlock_lock_fence(lock, &fence) == IRONLOCK_OK && fence > 0);
    /* One round only: held, so CONTENDED at once, and the same options object is reusable. */
    CHECK(ironlock_acquire_opts_set_retry_count(o, 0) == IRONLOCK_OK);
    ironlock_lock *other = NULL;
    CHECK_STATUS(ironlock_acquire_with(m, res, 1, 5000, o, &other), IRONLOCK_CONTENDED, NULL);
    CHECK(other == NULL);
    /* NULL options are the defaults; bad arguments are named as in ironlock_acquire. */
    CHECK_STATUS(ironlock_acquire_with(m, res, 1, 5000, NULL, NULL), IRONLOCK_INVALID_ARGUMENT, "out");
    if (lock) {
        CHECK_STATUS(ironlock_lock_finish(lock), IRONLOCK_OK, NULL);
        ironlock_lock_free(lock);
    }
    ironlock_acquire_opts_free(o);
}

/* A loopback port nobody listens on right now. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
        port = ntohs(a.sin_port);
    }
    if (fd >= 0) close(fd);
    return port;
}

/* Mutual TLS: CA, client certificate and key from files and as PEM text (added after 0.1.0). */
/* Reads a whole small file into buf (NUL-terminated); 0 on success. */
static int read_text(const char *path, char *buf, size_t len) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
    return 0;
}

/* Mutual TLS as the least-privilege ACL user (~lk:* &lk:* +@all -@dangerous), with fencing,
   against two nodes: node 0's certificate names only redis-a.ironlock.test (the URL says
   127.0.0.1), node 1's is signed by another CA. Each handshake error says what to set;
   per-node TLS settings (server name, CA) make both usable. */
static void test_mutual_tls(void) {
    /* ring's hand-written assembly (the TLS ciphers) initialises memory valgrind cannot follow, so
       it reports uninitialised bytes in every TLS record: run.sh skips this part under valgrind
       (it runs without valgrind and under AddressSanitizer). */
    if (getenv("IRONLOCK_TEST_SKIP_TLS")) return;
    char dir[128], cmd[512], path[192];
    snprintf(dir, sizeof dir, "/tmp/ironlock-c-pki-%ld", (long)getpid());
    snprintf(cmd, sizeof cmd, "'%s' --pki '%s' >/dev/null", harness_path(), dir);
    CHECK(system(cmd) == 0);
    char ca[192], cert[192], key[192], other_ca[192], ports[2][16];
    char server_cert[2][192], server_key[2][192];
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    snprintf(other_ca, sizeof other_ca, "%s/other-ca.pem", dir);
    snprintf(cert, sizeof cert, "%s/client.pem", dir);
    snprintf(key, sizeof key, "%s/client.key", dir);
    const char *served[2] = {"named", "other-server"};
    harness tls[2];
    int started = 0;
    for (int i = 0; i < 2; i++) {
        snprintf(server_cert[i], sizeof server_cert[i], "%s/%s.pem", dir, served[i]);
        snprintf(server_key[i], sizeof server_key[i], "%s/%s.key", dir, served[i]);
        snprintf(ports[i], sizeof ports[i], "%d", free_port());
        const char *extra[] = {"--tls-port", ports[i], "--tls-cert-file", server_cert[i], "--tls-key-file",
                               server_key[i], "--tls-ca-cert-file", ca, "--tls-auth-clients", "yes",
                               "--user", "default", "on", "nopass", "~*", "&*", "+@all",
                               "--user", "app", "on", ">app-Pa55", "~lk:*", "&lk:*", "+@all", "-@dangerous", NULL};
        if (harness_start_with(&tls[i], 1, extra) != 0) { CHECK(!"TLS node started"); break; }
        started++;
    }
    char key_pem[8192] = {0}, other_ca_pem[8192] = {0};
    CHECK(read_text(key, key_pem, sizeof key_pem) == 0);
    CHECK(read_text(other_ca, other_ca_pem, sizeof other_ca_pem) == 0);
    /* 0: per-node server name and CA, no client certificate; 1: a client certificate, no
       per-node settings; 2: both. */
    for (int mode = 0; started == 2 && mode < 3; mode++) {
        ironlock_config *cfg = ironlock_config_new();
        for (int i = 0; i < 2; i++) {
            char url[96];
            snprintf(url, sizeof url, "rediss://app:app-Pa55@127.0.0.1:%s", ports[i]);
            CHECK(ironlock_config_add_node(cfg, url) == IRONLOCK_OK);
        }
        CHECK(ironlock_config_set_key_prefix(cfg, "lk:") == IRONLOCK_OK);
        CHECK(ironlock_config_set_restart_quarantine(cfg, false) == IRONLOCK_OK);
        CHECK(ironlock_config_set_retry_count(cfg, 0) == IRONLOCK_OK);
        CHECK(ironlock_config_set_connect_timeout_ms(cfg, 5000) == IRONLOCK_OK);
        CHECK(ironlock_config_set_tls_ca_cert_file(cfg, ca) == IRONLOCK_OK);
        if (mode > 0) {
            /* The certificate as a file, the key as PEM text. */
            CHECK(ironlock_config_set_tls_client_cert_file(cfg, cert) == IRONLOCK_OK);
            CHECK(ironlock_config_set_tls_client_key(cfg, key_pem) == IRONLOCK_OK);
        }
        if (mode != 1) {
            CHECK(ironlock_config_set_node_tls(cfg, 0, NULL, NULL, NULL, "redis-a.ironlock.test") == IRONLOCK_OK);
            CHECK(ironlock_config_set_node_tls(cfg, 1, other_ca_pem, NULL, NULL, NULL) == IRONLOCK_OK);
        }
        ironlock_manager *m = NULL;
        CHECK_STATUS(ironlock_manager_new(cfg, &m), IRONLOCK_OK, NULL);
        ironlock_config_free(cfg);
        if (!m) continue;
        const char *res[] = {"c-test:mtls"};
        ironlock_acquire_options opts = {0};
        opts.fencing = true;
        ironlock_lock *lock = NULL;
        ironlock_status s = ironlock_acquire(m, res, 1, 5000, &opts, &lock);
        if (mode == 0) {
            CHECK(s == IRONLOCK_UNAVAILABLE);
            CHECK(strstr(ironlock_last_error(), "requires a client certificate: set tls_client_cert and tls_client_key"));
        } else if (mode == 1) {
            CHECK(s == IRONLOCK_UNAVAILABLE);
            CHECK(strstr(ironlock_last_error(), "does not name this host: connect by a name it holds, or set tls_server_name"));
            CHECK(strstr(ironlock_last_error(), "not signed by a trusted CA: set tls_ca_cert"));
        } else {
            CHECK_STATUS(s, IRONLOCK_OK, NULL);
            uint64_t fence = 0;
            if (lock) CHECK_STATUS(ironlock_lock_fence(lock, &fence), IRONLOCK_OK, NULL);
            CHECK(fence > 0);
        }
        CHECK(strstr(ironlock_last_error(), "app-Pa55") == NULL);
        if (lock) { CHECK(ironlock_lock_finish(lock) == IRONLOCK_OK); ironlock_lock_free(lock); }
        ironlock_manager_free(m);
    }
    /* Bad input names the argument: an unreadable file, NULL, a node that is not there, a name
       that is not a host name. */
    ironlock_config *cfg = ironlock_config_new();
    snprintf(path, sizeof path, "%s/missing.pem", dir);
    CHECK_STATUS(ironlock_config_set_tls_ca_cert_file(cfg, path), IRONLOCK_INVALID_ARGUMENT, "path: cannot read");
    CHECK_STATUS(ironlock_config_set_tls_client_key(cfg, NULL), IRONLOCK_INVALID_ARGUMENT, "pem");
    CHECK_STATUS(ironlock_config_set_tls_server_name(cfg, NULL), IRONLOCK_INVALID_ARGUMENT, "name");
    CHECK_STATUS(ironlock_config_set_node_tls(NULL, 0, NULL, NULL, NULL, "x"), IRONLOCK_INVALID_ARGUMENT, "config");
    CHECK(ironlock_config_add_node(cfg, "rediss://127.0.0.1:6390") == IRONLOCK_OK);
    CHECK(ironlock_config_set_node_tls(cfg, 3, NULL, NULL, NULL, "a.test") == IRONLOCK_OK);
    ironlock_manager *m = NULL;
    CHECK_STATUS(ironlock_manager_new(cfg, &m), IRONLOCK_INVALID_ARGUMENT, "node_tls[3]: there is no node 3");
    CHECK(m == NULL);
    ironlock_config_free(cfg);
    cfg = ironlock_config_new();
    CHECK(ironlock_config_add_node(cfg, "rediss://127.0.0.1:6390") == IRONLOCK_OK);
    CHECK(ironlock_config_set_tls_server_name(cfg, "not a name") == IRONLOCK_OK);
    CHECK_STATUS(ironlock_manager_new(cfg, &m), IRONLOCK_INVALID_ARGUMENT, "tls_server_name: \"not a name\"");
    ironlock_config_free(cfg);
    for (int i = 0; i < started; i++) harness_stop(&tls[i]);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* The manager's counters by name and as JSON: a grant, a contended try and a release. */
static void test_stats(const harness *h) {
    ironlock_config *cfg = config_for(h);
    ironlock_manager *m = NULL;
    CHECK_STATUS(ironlock_manager_new(cfg, &m), IRONLOCK_OK, NULL);
    ironlock_config_free(cfg);
    if (!m) return;
    uint64_t v = 99;
    CHECK_STATUS(ironlock_manager_stat(m, "granted", &v), IRONLOCK_OK, NULL);
    CHECK(v == 0);
    char r[128];
    unique(r, sizeof r, "stats");
    const char *res[] = {r};
    ironlock_lock *a = NULL, *b = NULL;
    CHECK_STATUS(ironlock_acquire(m, res, 1, 5000, NULL, &a), IRONLOCK_OK, NULL);
    CHECK_STATUS(ironlock_acquire(m, res, 1, 5000, NULL, &b), IRONLOCK_CONTENDED, "held");
    CHECK_STATUS(ironlock_release(a), IRONLOCK_OK, NULL);
    ironlock_lock_free(a);
    const char *names[] = {"granted", "contended", "releases", "rounds", "unavailable"};
    const uint64_t want[] = {1, 1, 1, 2, 0};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        v = 99;
        CHECK_STATUS(ironlock_manager_stat(m, names[i], &v), IRONLOCK_OK, NULL);
        if (v != want[i]) fprintf(stderr, "stat %s = %llu, want %llu\n", names[i], (unsigned long long)v, (unsigned long long)want[i]);
        CHECK(v == want[i]);
    }
    /* Bad input names the argument and leaves *out alone. */
    v = 7;
    CHECK_STATUS(ironlock_manager_stat(m, "nope", &v), IRONLOCK_INVALID_ARGUMENT, "name: no counter named \"nope\"");
    CHECK(v == 7);
    CHECK_STATUS(ironlock_manager_stat(NULL, "granted", &v), IRONLOCK_INVALID_ARGUMENT, "manager: NULL");
    CHECK_STATUS(ironlock_manager_stat(m, NULL, &v), IRONLOCK_INVALID_ARGUMENT, "name: NULL");
    CHECK_STATUS(ironlock_manager_stat(m, "granted", NULL), IRONLOCK_INVALID_ARGUMENT, "out: NULL");
    const char *json = ironlock_manager_stats_json(m);
    CHECK(json && strstr(json, "\"granted\":1,") && strstr(json, "\"contended\":1,"));
    CHECK(json && strstr(json, "\"acquire_latency\":{\"buckets\":[0.0001,"));
    CHECK(json && strstr(json, "\"count\":2,"));
    CHECK(ironlock_manager_stats_json(NULL) == NULL);
    ironlock_manager_free(m);
}

/* Counting semaphores (SPEC §11): at most `limit` permits, each an ironlock_lock; bad input
   names the argument and leaves *out alone. */
static void test_semaphore(const harness *h) {
    ironlock_config *cfg = config_for(h);
    ironlock_manager *m = NULL;
    CHECK_STATUS(ironlock_manager_new(cfg, &m), IRONLOCK_OK, NULL);
    ironlock_config_free(cfg);
    if (!m) return;
    char r[128];
    unique(r, sizeof r, "sem");
    ironlock_acquire_opts *opts = ironlock_acquire_opts_new();
    CHECK(ironlock_acquire_opts_set_fencing(opts, true) == IRONLOCK_OK);
    ironlock_lock *a = NULL, *b = NULL, *c = NULL;
    CHECK_STATUS(ironlock_acquire_permit(m, r, 2, 5000, opts, &a), IRONLOCK_OK, NULL);
    CHECK_STATUS(ironlock_acquire_permit(m, r, 2, 5000, opts, &b), IRONLOCK_OK, NULL);
    uint64_t fa = 0, fb = 0;
    if (a && b) {
        CHECK(ironlock_lock_fence(a, &fa) == IRONLOCK_OK && ironlock_lock_fence(b, &fb) == IRONLOCK_OK);
        CHECK(fa > 0 && fb > fa);
    }
    CHECK_STATUS(ironlock_acquire_permit(m, r, 2, 5000, NULL, &c), IRONLOCK_CONTENDED,
                 "(limit 2): all 2 permits are held elsewhere");
    CHECK(c == NULL);
    /* A lock on the same name is another key. */
    const char *res[] = {r};
    ironlock_lock *lock = NULL;
    CHECK_STATUS(ironlock_acquire(m, res, 1, 5000, NULL, &lock), IRONLOCK_OK, NULL);
    if (lock) { CHECK(ironlock_lock_finish(lock) == IRONLOCK_OK); ironlock_lock_free(lock); }
    if (a) { CHECK_STATUS(ironlock_extend(a, 5000), IRONLOCK_OK, NULL); CHECK(ironlock_lock_finish(a) == IRONLOCK_OK); }
    CHECK_STATUS(ironlock_acquire_permit(m, r, 2, 5000, NULL, &c), IRONLOCK_OK, NULL);
    ironlock_lock *bad = NULL;
    CHECK_STATUS(ironlock_acquire_permit(m, r, 0, 5000, NULL, &bad), IRONLOCK_INVALID_ARGUMENT,
                 "limit: must be between 1 and 10000, got 0");
    CHECK_STATUS(ironlock_acquire_permit(m, NULL, 2, 5000, NULL, &bad), IRONLOCK_INVALID_ARGUMENT, "resource");
    CHECK_STATUS(ironlock_acquire_permit(m, r, 2, 5000, NULL, NULL), IRONLOCK_INVALID_ARGUMENT, "out");
    CHECK_STATUS(ironlock_acquire_permit(NULL, r, 2, 5000, NULL, &bad), IRONLOCK_INVALID_ARGUMENT, "manager");
    CHECK(bad == NULL);
    ironlock_lock *held[] = {a, b, c};
    for (int i = 1; i < 3; i++) {
        if (held[i]) CHECK(ironlock_lock_finish(held[i]) == IRONLOCK_OK);
    }
    for (int i = 0; i < 3; i++) ironlock_lock_free(held[i]);
    ironlock_acquire_opts_free(opts);
    char command[320];
    snprintf(command, sizeof command, "EXISTS %s{%s}:ironlock:semaphore", r, r);
    for (int node = 0; node < h->nodes; node++) CHECK(redis_int_settled((harness *)h, node, command) == 0);
    ironlock_manager_free(m);
}

/* A fair waiter on another thread (SPEC §10). */
typedef struct {
    ironlock_manager *m;
    const char *resource;
    ironlock_status status;
    ironlock_lock *lock;
} fair_waiter;

static void *fair_wait(void *arg) {
    fair_waiter *w = arg;
    ironlock_acquire_opts *opts = ironlock_acquire_opts_new();
    ironlock_acquire_opts_set_wait_ms(opts, 10000);
    ironlock_acquire_opts_set_fair(opts, true);
    const char *res[] = {w->resource};
    w->status = ironlock_acquire_with(w->m, res, 1, 5000, opts, &w->lock);
    ironlock_acquire_opts_free(opts);
    return NULL;
}

/* Fair acquisition: a waiter queues on every node, a release hands it the lock, nothing stays
   in line; the setting and the option are validated. */
static void test_fair(const harness *h) {
    ironlock_config *cfg = config_for(h);
    CHECK(ironlock_config_set_queue_timeout_ms(cfg, 86400001) == IRONLOCK_OK);
    ironlock_manager *m = NULL;
    CHECK_STATUS(ironlock_manager_new(cfg, &m), IRONLOCK_INVALID_ARGUMENT, "queue_timeout: must be at most a day");
    CHECK(m == NULL);
    CHECK(ironlock_config_set_queue_timeout_ms(cfg, 2000) == IRONLOCK_OK);
    CHECK(ironlock_config_set_fair(cfg, true) == IRONLOCK_OK);
    CHECK_STATUS(ironlock_config_set_fair(NULL, true), IRONLOCK_INVALID_ARGUMENT, "config");
    CHECK_STATUS(ironlock_acquire_opts_set_fair(NULL, true), IRONLOCK_INVALID_ARGUMENT, "opts");
    CHECK_STATUS(ironlock_manager_new(cfg, &m), IRONLOCK_OK, NULL);
    ironlock_config_free(cfg);
    if (!m) return;
    char r[128], command[320];
    unique(r, sizeof r, "fair");
    const char *res[] = {r};
    ironlock_lock *holder = NULL;
    CHECK_STATUS(ironlock_acquire(m, res, 1, 5000, NULL, &holder), IRONLOCK_OK, NULL);
    fair_waiter w = {m, r, IRONLOCK_INTERNAL, NULL};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fair_wait, &w) == 0);
    snprintf(command, sizeof command, "ZCARD %s{%s}:ironlock:queue", r, r);
    int queued = 0;
    for (int i = 0; i < 400 && queued < h->nodes; i++) {
        queued = 0;
        for (int node = 0; node < h->nodes; node++) queued += redis_int((harness *)h, node, command) == 1;
        if (queued < h->nodes) sleep_ms(5);
    }
    CHECK(queued == h->nodes);
    if (holder) { CHECK(ironlock_lock_finish(holder) == IRONLOCK_OK); ironlock_lock_free(holder); }
    pthread_join(t, NULL);
    CHECK_STATUS(w.status, IRONLOCK_OK, NULL);
    if (w.lock) { CHECK(ironlock_lock_finish(w.lock) == IRONLOCK_OK); ironlock_lock_free(w.lock); }
    for (int node = 0; node < h->nodes; node++) CHECK(redis_int_settled((harness *)h, node, command) == 0);
    ironlock_manager_free(m);
}

/* A writer waiting (up to 10 s) on another thread for the readers to leave. */
typedef struct {
    ironlock_manager *m;
    const char *resource;
    ironlock_status status;
    ironlock_lock *lock;
} rw_writer;

static void *write_wait(void *arg) {
    rw_writer *w = arg;
    ironlock_acquire_opts *opts = ironlock_acquire_opts_new();
    ironlock_acquire_opts_set_wait_ms(opts, 10000);
    w->status = ironlock_acquire_write(w->m, w->resource, 5000, opts, &w->lock);
    ironlock_acquire_opts_free(opts);
    return NULL;
}

/* The keys of the read-write lock `r` that exist on `node` (the lock key, the readers' set, a
   waiting writer's mark), after up to 200 ms for deletes still on their way. */
static long long rw_keys_settled(harness *h, int node, const char *r) {
    char command[512];
    snprintf(command, sizeof command, "EXISTS %s %s{%s}:ironlock:readers %s{%s}:ironlock:writer", r, r, r, r, r);
    return redis_int_settled(h, node, command);
}

/* Read-write locks (added after 0.1.0): readers share; a writer excludes readers, writers and
   plain locks of the name, and a plain lock excludes both; a waiting writer holds back new
   readers; each side is an ironlock_lock (extend, release, finish, fencing, auto-extension,
   access); bad input names its argument, leaves *out alone and reaches no node; no key is left
   behind. */
static void test_rwlock(harness *h) {
    ironlock_config *cfg = config_for(h);
    /* A waiting writer's mark lives a queue timeout past its last round: long enough that it
       does not lapse between rounds under valgrind. */
    CHECK(ironlock_config_set_queue_timeout_ms(cfg, 5000) == IRONLOCK_OK);
    ironlock_manager *m = NULL;
    CHECK_STATUS(ironlock_manager_new(cfg, &m), IRONLOCK_OK, NULL);
    ironlock_config_free(cfg);
    if (!m) return;
    char r[128], command[512], reply[512], quoted[64];
    unique(r, sizeof r, "rw");
    const char *res[] = {r};
    ironlock_lock *sentinel = (ironlock_lock *)&sentinel;
    ironlock_lock *out = sentinel;

    /* Bad input: INVALID_ARGUMENT naming the argument, *out untouched, no report, no key. */
    ironlock_acquire_opts *fair = ironlock_acquire_opts_new();
    ironlock_acquire_opts *hold = ironlock_acquire_opts_new();
    CHECK(ironlock_acquire_opts_set_fair(fair, true) == IRONLOCK_OK);
    CHECK(ironlock_acquire_opts_set_min_hold(hold, 500) == IRONLOCK_OK);
    CHECK_STATUS(ironlock_acquire_read(NULL, r, 1000, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "manager: NULL");
    CHECK_STATUS(ironlock_acquire_write(NULL, r, 1000, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "manager: NULL");
    CHECK_STATUS(ironlock_acquire_read(m, NULL, 1000, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "resource: NULL");
    CHECK_STATUS(ironlock_acquire_write(m, NULL, 1000, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "resource: NULL");
    CHECK_STATUS(ironlock_acquire_read(m, "rw\xff\xfe", 1000, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "resource: not valid UTF-8");
    CHECK_STATUS(ironlock_acquire_write(m, "", 1000, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "resource: empty resource name");
    CHECK_STATUS(ironlock_acquire_read(m, r, 1000, NULL, NULL), IRONLOCK_INVALID_ARGUMENT, "out: NULL");
    CHECK_STATUS(ironlock_acquire_write(m, r, 1000, NULL, NULL), IRONLOCK_INVALID_ARGUMENT, "out: NULL");
    CHECK_STATUS(ironlock_acquire_read(m, r, 0, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "ttl");
    CHECK_STATUS(ironlock_acquire_write(m, r, 60001, NULL, &out), IRONLOCK_INVALID_ARGUMENT, "ttl");
    CHECK_STATUS(ironlock_acquire_read(m, r, 1000, hold, &out), IRONLOCK_INVALID_ARGUMENT, "read-write locks");
    CHECK(strncmp(ironlock_last_error(), "min_hold:", 9) == 0);
    CHECK_STATUS(ironlock_acquire_write(m, r, 1000, hold, &out), IRONLOCK_INVALID_ARGUMENT, "read-write locks");
    CHECK(strncmp(ironlock_last_error(), "min_hold:", 9) == 0);
    CHECK(out == sentinel);
    CHECK(ironlock_last_report_node_count() == 0);
    for (int node = 0; node < h->nodes; node++) CHECK(rw_keys_settled(h, node, r) == 0);
    /* Fair is no bad input: each side waits in the lock's line (here nobody is in it). */
    ironlock_lock *ok = NULL;
    CHECK_STATUS(ironlock_acquire_read(m, r, 1000, fair, &ok), IRONLOCK_OK, NULL);
    if (ok) { CHECK(ironlock_lock_finish(ok) == IRONLOCK_OK); ironlock_lock_free(ok); }
    ok = NULL;
    CHECK_STATUS(ironlock_acquire_write(m, r, 1000, fair, &ok), IRONLOCK_OK, NULL);
    if (ok) { CHECK(ironlock_lock_finish(ok) == IRONLOCK_OK); ironlock_lock_free(ok); }
    /* fair false and a minimum hold of 0 are the defaults, not refused. */
    CHECK(ironlock_acquire_opts_set_fair(fair, false) == IRONLOCK_OK);
    CHECK(ironlock_acquire_opts_set_min_hold(hold, 0) == IRONLOCK_OK);
    ok = NULL;
    CHECK_STATUS(ironlock_acquire_read(m, r, 1000, fair, &ok), IRONLOCK_OK, NULL);
    if (ok) { CHECK(ironlock_lock_finish(ok) == IRONLOCK_OK); ironlock_lock_free(ok); }
    ok = NULL;
    CHECK_STATUS(ironlock_acquire_write(m, r, 1000, hold, &ok), IRONLOCK_OK, NULL);
    if (ok) { CHECK(ironlock_lock_finish(ok) == IRONLOCK_OK); ironlock_lock_free(ok); }
    ironlock_acquire_opts_free(fair);
    ironlock_acquire_opts_free(hold);

    /* Readers share: two reads, each its own lock with its own token, fenced in order. */
    ironlock_acquire_opts *fenced = ironlock_acquire_opts_new();
    CHECK(ironlock_acquire_opts_set_fencing(fenced, true) == IRONLOCK_OK);
    ironlock_lock *r1 = NULL, *r2 = NULL;
    CHECK_STATUS(ironlock_acquire_read(m, r, 5000, fenced, &r1), IRONLOCK_OK, NULL);
    CHECK(ironlock_last_report_node_count() == (size_t)h->nodes);
    CHECK_STATUS(ironlock_acquire_read(m, r, 3000, fenced, &r2), IRONLOCK_OK, NULL);
    if (!r1 || !r2) goto cleanup;
    CHECK(ironlock_lock_access(r1) == IRONLOCK_ACCESS_READ);
    CHECK(ironlock_lock_access(r2) == IRONLOCK_ACCESS_READ);
    CHECK(strcmp(ironlock_lock_token(r1), ironlock_lock_token(r2)) != 0);
    uint64_t f1 = 0, f2 = 0, fw = 0;
    CHECK(ironlock_lock_fence(r1, &f1) == IRONLOCK_OK && ironlock_lock_fence(r2, &f2) == IRONLOCK_OK);
    CHECK(f1 > 0 && f2 > f1);
    CHECK(ironlock_lock_is_valid(r2) && ironlock_lock_validity_ms(r2) <= 3000);
    /* While readers hold, the lock key holds the readers' marker, no token; the set has both. */
    snprintf(command, sizeof command, "ZCARD %s{%s}:ironlock:readers", r, r);
    int both = 0;
    for (int node = 0; node < h->nodes; node++) both += redis_int(h, node, command) == 2;
    CHECK(both >= h->nodes / 2 + 1);
    int marker = 0;
    for (int node = 0; node < h->nodes; node++) {
        snprintf(command, sizeof command, "cmd %d GET %s", node, r);
        CHECK(harness_send(h, command, reply, sizeof reply) == 0);
        if (strcmp(reply, "\"ironlock readers\"") == 0) marker++;
    }
    CHECK(marker >= h->nodes / 2 + 1);

    /* A writer is refused while they hold, with the message saying why; *out untouched. */
    out = sentinel;
    CHECK_STATUS(ironlock_acquire_write(m, r, 5000, NULL, &out), IRONLOCK_CONTENDED, "could not acquire the write lock of [\"");
    CHECK(strstr(ironlock_last_error(), r) != NULL && strstr(ironlock_last_error(), "readers") != NULL);
    CHECK(out == sentinel);
    CHECK(count_votes("against") >= 2);
    /* So is a plain lock of the same name. */
    CHECK_STATUS(ironlock_acquire(m, res, 1, 5000, NULL, &out), IRONLOCK_CONTENDED, NULL);
    CHECK(out == sentinel);
    /* The refused writer did not wait: it left no mark, and readers still come in. */
    snprintf(command, sizeof command, "EXISTS %s{%s}:ironlock:writer", r, r);
    for (int node = 0; node < h->nodes; node++) CHECK(redis_int_settled(h, node, command) == 0);
    ironlock_lock *r3 = NULL;
    CHECK_STATUS(ironlock_acquire_read(m, r, 5000, NULL, &r3), IRONLOCK_OK, NULL);
    if (r3) {
        CHECK(ironlock_lock_access(r3) == IRONLOCK_ACCESS_READ);
        uint64_t none = 7;
        CHECK_STATUS(ironlock_lock_fence(r3, &none), IRONLOCK_INVALID_ARGUMENT, "without fencing");
        CHECK(none == 7);
        CHECK(ironlock_lock_finish(r3) == IRONLOCK_OK);
        ironlock_lock_free(r3);
    }

    /* Extend and release as locks; the key goes with the last reader. */
    CHECK_STATUS(ironlock_extend(r2, 4000), IRONLOCK_OK, NULL);
    CHECK(ironlock_lock_validity_ms(r2) > 3000);
    bool held = false;
    CHECK_STATUS(ironlock_release_held(r1, &held), IRONLOCK_OK, NULL);
    CHECK(held);
    CHECK(ironlock_lock_access(r1) == IRONLOCK_ACCESS_READ); /* kept after the release */
    snprintf(command, sizeof command, "EXISTS %s", r);
    int left = 0; /* one reader is left: the key stays where it holds */
    for (int node = 0; node < h->nodes; node++) left += redis_int(h, node, command) == 1;
    CHECK(left >= h->nodes / 2 + 1);
    held = false;
    CHECK_STATUS(ironlock_release_held(r2, &held), IRONLOCK_OK, NULL);
    CHECK(held);
    for (int node = 0; node < h->nodes; node++) CHECK(redis_int_settled(h, node, command) == 0);

    /* A writer: the lock key holds its token; it excludes readers, writers and plain locks. */
    ironlock_lock *w = NULL;
    CHECK_STATUS(ironlock_acquire_write(m, r, 5000, fenced, &w), IRONLOCK_OK, NULL);
    if (!w) goto cleanup;
    CHECK(ironlock_lock_access(w) == IRONLOCK_ACCESS_WRITE);
    CHECK(ironlock_lock_fence(w, &fw) == IRONLOCK_OK && fw > f2);
    snprintf(quoted, sizeof quoted, "\"%s\"", ironlock_lock_token(w));
    int holding = 0;
    for (int node = 0; node < h->nodes; node++) {
        snprintf(command, sizeof command, "cmd %d GET %s", node, r);
        CHECK(harness_send(h, command, reply, sizeof reply) == 0);
        if (strcmp(reply, quoted) == 0) holding++;
    }
    CHECK(holding >= h->nodes / 2 + 1);
    CHECK_STATUS(ironlock_acquire_read(m, r, 5000, NULL, &out), IRONLOCK_CONTENDED, "could not acquire a read lock of [\"");
    CHECK(strstr(ironlock_last_error(), "a writer") != NULL);
    CHECK_STATUS(ironlock_acquire_write(m, r, 5000, NULL, &out), IRONLOCK_CONTENDED, NULL);
    CHECK_STATUS(ironlock_acquire(m, res, 1, 5000, NULL, &out), IRONLOCK_CONTENDED, NULL);
    CHECK(out == sentinel);
    CHECK_STATUS(ironlock_extend(w, 5000), IRONLOCK_OK, NULL);
    CHECK_STATUS(ironlock_lock_finish(w), IRONLOCK_OK, NULL);
    CHECK(ironlock_lock_access(w) == IRONLOCK_ACCESS_WRITE);
    ironlock_lock_free(w);

    /* A plain lock of the name excludes both sides; it and a permit have no access. */
    ironlock_lock *plain = NULL, *permit = NULL;
    CHECK_STATUS(ironlock_acquire(m, res, 1, 5000, NULL, &plain), IRONLOCK_OK, NULL);
    CHECK_STATUS(ironlock_acquire_read(m, r, 5000, NULL, &out), IRONLOCK_CONTENDED, NULL);
    CHECK_STATUS(ironlock_acquire_write(m, r, 5000, NULL, &out), IRONLOCK_CONTENDED, NULL);
    CHECK(out == sentinel);
    CHECK_STATUS(ironlock_acquire_permit(m, r, 1, 5000, NULL, &permit), IRONLOCK_OK, NULL);
    CHECK(plain && ironlock_lock_access(plain) == IRONLOCK_ACCESS_NONE);
    CHECK(permit && ironlock_lock_access(permit) == IRONLOCK_ACCESS_NONE);
    CHECK(ironlock_lock_access(NULL) == IRONLOCK_ACCESS_NONE);
    if (plain) { CHECK(ironlock_lock_finish(plain) == IRONLOCK_OK); ironlock_lock_free(plain); }
    if (permit) { CHECK(ironlock_lock_finish(permit) == IRONLOCK_OK); ironlock_lock_free(permit); }

    /* Auto-extension keeps a 1 s read valid past its ttl. */
    ironlock_lock *kept = NULL;
    CHECK_STATUS(ironlock_acquire_read(m, r, 1000, NULL, &kept), IRONLOCK_OK, NULL);
    if (kept) {
        CHECK_STATUS(ironlock_lock_auto_extend(kept, NULL, NULL), IRONLOCK_OK, NULL);
        sleep_ms(1500);
        CHECK(ironlock_lock_is_valid(kept) && !ironlock_lock_is_lost(kept));
        held = false;
        CHECK_STATUS(ironlock_release_held(kept, &held), IRONLOCK_OK, NULL);
        CHECK(held);
        ironlock_lock_free(kept);
    }

    /* A waiting writer holds back new readers, and gets the lock when the reader leaves. */
    ironlock_lock *reader = NULL;
    CHECK_STATUS(ironlock_acquire_read(m, r, 10000, NULL, &reader), IRONLOCK_OK, NULL);
    if (reader) {
        rw_writer wt = {m, r, IRONLOCK_INTERNAL, NULL};
        pthread_t t;
        CHECK(pthread_create(&t, NULL, write_wait, &wt) == 0);
        snprintf(command, sizeof command, "EXISTS %s{%s}:ironlock:writer", r, r);
        int marked = 0;
        for (int i = 0; i < 400 && marked < h->nodes; i++) {
            marked = 0;
            for (int node = 0; node < h->nodes; node++) marked += redis_int(h, node, command) == 1;
            if (marked < h->nodes) sleep_ms(5);
        }
        CHECK(marked == h->nodes);
        CHECK_STATUS(ironlock_acquire_read(m, r, 5000, NULL, &out), IRONLOCK_CONTENDED, "a writer is waiting for it");
        CHECK(out == sentinel);
        CHECK_STATUS(ironlock_release(reader), IRONLOCK_OK, NULL);
        ironlock_lock_free(reader);
        pthread_join(t, NULL);
        CHECK_STATUS(wt.status, IRONLOCK_OK, NULL);
        CHECK(wt.lock && ironlock_lock_access(wt.lock) == IRONLOCK_ACCESS_WRITE);
        /* Its release takes its mark away everywhere. */
        if (wt.lock) { CHECK(ironlock_lock_finish(wt.lock) == IRONLOCK_OK); ironlock_lock_free(wt.lock); }
        for (int node = 0; node < h->nodes; node++) CHECK(redis_int_settled(h, node, command) == 0);
    }

cleanup:
    if (r1) { ironlock_release(r1); ironlock_lock_free(r1); }
    if (r2) { ironlock_release(r2); ironlock_lock_free(r2); }
    ironlock_acquire_opts_free(fenced);
    /* Nothing is left behind: no lock key, no readers' set, no writer's mark. */
    for (int node = 0; node < h->nodes; node++) CHECK(rw_keys_settled(h, node, r) == 0);
    ironlock_manager_free(m);
}

int main(void) {
    harness h;
    test_static_parts();
    if (harness_start(&h, 3) != 0) {
        fprintf(stderr, "test_api: cannot start nodes\n");
        return 1;
    }
    test_bad_config(&h);
    ironlock_config *cfg = config_for(&h);
    ironlock_manager *m = NULL;
    CHECK_STATUS(ironlock_manager_new(cfg, &m), IRONLOCK_OK, NULL);
    ironlock_config_free(cfg); /* the manager copied what it needs */
    if (m) {
        test_bad_acquire(&h, m);
        test_lifecycle(&h, m);
        test_auto_extend(&h, m);
        test_acquire_opts(&h, m);
        ironlock_manager_free(m);
    }
    test_lock_outlives_manager(&h);
    test_redaction(&h);
    test_sentinel_voter(&h);
    test_bad_node_among_good(&h);
    test_stats(&h);
    test_semaphore(&h);
    test_fair(&h);
    test_rwlock(&h);
    test_mutual_tls();
    harness_stop(&h);
    printf("test_api: %d checks passed, %d failed\n", check_passes, check_failures);
    return check_failures == 0 ? 0 : 1;
}
