/* Leader elections through the C API (added after 0.1.0) against real nodes: candidates on
 * threads lead in the order they queued, with growing terms; a candidate is told it leads only
 * once the leader record is on a quorum (ironlock_leader shows it at once); proclaim changes the
 * value, only while leader; resign wakes the next at once; the observer gives nobody, then every
 * leader in order, and times out when nothing changes; a campaign that gives up leaves the line;
 * a lost leadership is told, a freed one passes on once its key expires; every bad input names
 * its argument, leaves *out alone and reaches no node; no key is left behind. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "harness.h"
#include "ironlock.h"

_Static_assert(IRONLOCK_MAX_ELECTION_VALUE_LEN == 65536, "the longest value is 64 KiB");

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* An election name unique to this run (keys must not collide across runs). */
static void unique(char *buf, size_t len, const char *what) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(buf, len, "c-elect:%s:%ld:%ld", what, (long)ts.tv_sec, ts.tv_nsec);
}

static long long redis_int(harness *h, int node, const char *args) {
    char command[512], reply[512];
    snprintf(command, sizeof command, "cmd %d %s", node, args);
    if (harness_send(h, command, reply, sizeof reply) != 0) return -1;
    return strtoll(reply, NULL, 10);
}

/* Polls `args` on `node` until it replies `want`, for up to 2 s (deletes still on their way,
   waiters still queueing); the last reply. */
static long long redis_int_until(harness *h, int node, const char *args, long long want) {
    long long v = redis_int(h, node, args);
    for (int i = 0; i < 400 && v != want; i++) {
        sleep_ms(5);
        v = redis_int(h, node, args);
    }
    return v;
}

/* How many of the election's key and leader record exist on `node`, once settled at 0. */
static long long election_keys(harness *h, int node, const char *name) {
    char command[512];
    snprintf(command, sizeof command, "EXISTS %s %s{%s}:ironlock:leader", name, name, name);
    return redis_int_until(h, node, command, 0);
}

/* How many candidates wait in the election's line on `node`, once it says `want`. */
static long long line_length(harness *h, int node, const char *name, long long want) {
    char command[512];
    snprintf(command, sizeof command, "ZCARD %s{%s}:ironlock:queue", name, name);
    return redis_int_until(h, node, command, want);
}

static int same(const char *a, const char *b) {
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

static ironlock_manager *manager_for(const harness *h, uint64_t retry_delay_ms) {
    ironlock_config *cfg = ironlock_config_new();
    for (int i = 0; i < h->nodes; i++) CHECK(ironlock_config_add_node(cfg, h->urls[i]) == IRONLOCK_OK);
    CHECK(ironlock_config_set_restart_quarantine(cfg, false) == IRONLOCK_OK);
    /* Loopback nodes answer in well under a millisecond; the margin is for valgrind runs. */
    CHECK(ironlock_config_set_node_timeout_ms(cfg, 1000) == IRONLOCK_OK);
    CHECK(ironlock_config_set_retry_delay_ms(cfg, retry_delay_ms) == IRONLOCK_OK);
    ironlock_manager *m = NULL;
    CHECK_STATUS(ironlock_manager_new(cfg, &m), IRONLOCK_OK, NULL);
    ironlock_config_free(cfg);
    return m;
}

/* Bad input: IRONLOCK_INVALID_ARGUMENT naming the argument, *out untouched, no report, no key;
   NULL handles give neutral values. The longest value is accepted, one byte more refused. */
static void test_bad_input(harness *h) {
    ironlock_manager *m = manager_for(h, 50);
    if (!m) return;
    char name[128];
    unique(name, sizeof name, "bad");
    ironlock_leadership *l_sentinel = (ironlock_leadership *)&l_sentinel;
    ironlock_leader_info *i_sentinel = (ironlock_leader_info *)&i_sentinel;
    ironlock_observer *o_sentinel = (ironlock_observer *)&o_sentinel;
    ironlock_leadership *l = l_sentinel;
    ironlock_leader_info *info = i_sentinel;
    ironlock_observer *obs = o_sentinel;
    char *big = malloc(IRONLOCK_MAX_ELECTION_VALUE_LEN + 2);
    CHECK(big != NULL);
    if (!big) {
        ironlock_manager_free(m);
        return;
    }
    memset(big, 'v', IRONLOCK_MAX_ELECTION_VALUE_LEN + 1);
    big[IRONLOCK_MAX_ELECTION_VALUE_LEN + 1] = '\0';

    CHECK_STATUS(ironlock_campaign(NULL, name, "v", 1000, 0, &l), IRONLOCK_INVALID_ARGUMENT, "manager: NULL pointer");
    CHECK_STATUS(ironlock_campaign(m, NULL, "v", 1000, 0, &l), IRONLOCK_INVALID_ARGUMENT, "name: NULL pointer");
    CHECK_STATUS(ironlock_campaign(m, "", "v", 1000, 0, &l), IRONLOCK_INVALID_ARGUMENT, "name: empty election name");
    CHECK_STATUS(ironlock_campaign(m, "el\xff\xfe", "v", 1000, 0, &l), IRONLOCK_INVALID_ARGUMENT, "name: not valid UTF-8");
    CHECK_STATUS(ironlock_campaign(m, "job:ironlock:fence", "v", 1000, 0, &l), IRONLOCK_INVALID_ARGUMENT,
                 "name: a name ending in \":ironlock:fence\"");
    CHECK_STATUS(ironlock_campaign(m, name, NULL, 1000, 0, &l), IRONLOCK_INVALID_ARGUMENT, "value: NULL pointer");
    CHECK_STATUS(ironlock_campaign(m, name, "v\xff", 1000, 0, &l), IRONLOCK_INVALID_ARGUMENT, "value: not valid UTF-8");
    CHECK_STATUS(ironlock_campaign(m, name, big, 1000, 0, &l), IRONLOCK_INVALID_ARGUMENT,
                 "value: at most 65536 bytes, got 65537");
    CHECK_STATUS(ironlock_campaign(m, name, "v", 1000, 0, NULL), IRONLOCK_INVALID_ARGUMENT, "out: NULL pointer");
    CHECK_STATUS(ironlock_campaign(m, name, "v", 0, 0, &l), IRONLOCK_INVALID_ARGUMENT, "ttl: must be positive");
    CHECK_STATUS(ironlock_campaign(m, name, "v", 60001, 0, &l), IRONLOCK_INVALID_ARGUMENT, "ttl: must be at most max_ttl");
    CHECK(l == l_sentinel);
    CHECK(ironlock_last_report_node_count() == 0);

    CHECK_STATUS(ironlock_leader(NULL, name, &info), IRONLOCK_INVALID_ARGUMENT, "manager: NULL pointer");
    CHECK_STATUS(ironlock_leader(m, NULL, &info), IRONLOCK_INVALID_ARGUMENT, "name: NULL pointer");
    CHECK_STATUS(ironlock_leader(m, "", &info), IRONLOCK_INVALID_ARGUMENT, "name: empty election name");
    CHECK_STATUS(ironlock_leader(m, name, NULL), IRONLOCK_INVALID_ARGUMENT, "out: NULL pointer");
    CHECK(info == i_sentinel);

    CHECK_STATUS(ironlock_observe(NULL, name, &obs), IRONLOCK_INVALID_ARGUMENT, "manager: NULL pointer");
    CHECK_STATUS(ironlock_observe(m, NULL, &obs), IRONLOCK_INVALID_ARGUMENT, "name: NULL pointer");
    CHECK_STATUS(ironlock_observe(m, "x\xc3(", &obs), IRONLOCK_INVALID_ARGUMENT, "name: not valid UTF-8");
    CHECK_STATUS(ironlock_observe(m, name, NULL), IRONLOCK_INVALID_ARGUMENT, "out: NULL pointer");
    CHECK(obs == o_sentinel);
    bool changed = true;
    CHECK_STATUS(ironlock_observer_next(NULL, 100, &changed, &info), IRONLOCK_INVALID_ARGUMENT, "observer: NULL pointer");
    obs = NULL;
    CHECK_STATUS(ironlock_observe(m, name, &obs), IRONLOCK_OK, NULL);
    CHECK_STATUS(ironlock_observer_next(obs, 100, NULL, &info), IRONLOCK_INVALID_ARGUMENT, "changed: NULL pointer");
    CHECK_STATUS(ironlock_observer_next(obs, 100, &changed, NULL), IRONLOCK_INVALID_ARGUMENT, "out: NULL pointer");
    CHECK(changed && info == i_sentinel);
    ironlock_observer_free(obs);

    /* NULL handles: an error naming them, or a neutral value; free(NULL) is a no-op. */
    CHECK_STATUS(ironlock_leadership_wait_lost(NULL, 10), IRONLOCK_INVALID_ARGUMENT, "leadership: NULL pointer");
    CHECK_STATUS(ironlock_proclaim(NULL, "v"), IRONLOCK_INVALID_ARGUMENT, "leadership: NULL pointer");
    CHECK_STATUS(ironlock_resign(NULL), IRONLOCK_INVALID_ARGUMENT, "leadership: NULL pointer");
    CHECK(ironlock_leadership_term(NULL) == 0);
    CHECK(ironlock_leadership_token(NULL) == NULL);
    CHECK(ironlock_leadership_value(NULL) == NULL);
    CHECK(ironlock_leadership_validity_ms(NULL) == 0);
    CHECK(!ironlock_leadership_is_leader(NULL));
    CHECK(!ironlock_leadership_is_lost(NULL));
    CHECK(ironlock_leader_info_value(NULL) == NULL);
    CHECK(ironlock_leader_info_token(NULL) == NULL);
    CHECK(ironlock_leader_info_term(NULL) == 0);
    CHECK(ironlock_leader_info_validity_ms(NULL) == 0);
    ironlock_leadership_free(NULL);
    ironlock_leader_info_free(NULL);
    ironlock_observer_free(NULL);

    /* Nothing reached the nodes. */
    for (int node = 0; node < h->nodes; node++) {
        CHECK(election_keys(h, node, name) == 0);
        CHECK(line_length(h, node, name, 0) == 0);
    }

    /* The longest value is accepted (and read back whole); one byte more is refused by
       proclaim too, as is NULL, and the advertised value stays. */
    big[IRONLOCK_MAX_ELECTION_VALUE_LEN] = '\0';
    l = NULL;
    CHECK_STATUS(ironlock_campaign(m, name, big, 2000, 0, &l), IRONLOCK_OK, NULL);
    if (l) {
        info = NULL;
        CHECK_STATUS(ironlock_leader(m, name, &info), IRONLOCK_OK, NULL);
        CHECK(info != NULL && strlen(ironlock_leader_info_value(info)) == IRONLOCK_MAX_ELECTION_VALUE_LEN);
        ironlock_leader_info_free(info);
        big[IRONLOCK_MAX_ELECTION_VALUE_LEN] = 'v';
        CHECK_STATUS(ironlock_proclaim(l, big), IRONLOCK_INVALID_ARGUMENT, "value: at most 65536 bytes, got 65537");
        CHECK_STATUS(ironlock_proclaim(l, NULL), IRONLOCK_INVALID_ARGUMENT, "value: NULL pointer");
        CHECK_STATUS(ironlock_proclaim(l, "\xff"), IRONLOCK_INVALID_ARGUMENT, "value: not valid UTF-8");
        CHECK(strlen(ironlock_leadership_value(l)) == IRONLOCK_MAX_ELECTION_VALUE_LEN);
        CHECK_STATUS(ironlock_resign(l), IRONLOCK_OK, NULL);
        ironlock_leadership_free(l);
    }
    for (int node = 0; node < h->nodes; node++) CHECK(election_keys(h, node, name) == 0);
    free(big);
    ironlock_manager_free(m);
}

/* A candidate campaigning on its own thread (another manager: another process, as it were). */
typedef struct {
    ironlock_manager *m;
    const char *name;
    const char *value;
    ironlock_status status;
    ironlock_leadership *l;
    long long granted_ms;
    atomic_int done;
} candidate;

static void *campaign_thread(void *arg) {
    candidate *c = arg;
    c->status = ironlock_campaign(c->m, c->name, c->value, 5000, 30000, &c->l);
    c->granted_ms = now_ms();
    atomic_store(&c->done, 1);
    return NULL;
}

/* The next change the observer gives that is not "nobody leads" (skipping the moments between
   a resignation and the next grant); NULL if none came in 10 s or a call failed. */
static ironlock_leader_info *next_leader(ironlock_observer *obs) {
    for (int i = 0; i < 20; i++) {
        bool changed = false;
        ironlock_leader_info *info = NULL;
        ironlock_status s = ironlock_observer_next(obs, 500, &changed, &info);
        CHECK(s == IRONLOCK_OK);
        if (s != IRONLOCK_OK) return NULL;
        if (info) return info;
    }
    return NULL;
}

/* Who leads, read from the nodes, is `l` with `value`. */
static int leads(ironlock_manager *m, const char *name, ironlock_leadership *l, const char *value) {
    ironlock_leader_info *info = NULL;
    ironlock_status s = ironlock_leader(m, name, &info);
    int ok = s == IRONLOCK_OK && info != NULL && same(ironlock_leader_info_value(info), value) &&
             ironlock_leader_info_term(info) == ironlock_leadership_term(l) &&
             same(ironlock_leader_info_token(info), ironlock_leadership_token(l)) &&
             ironlock_leader_info_validity_ms(info) > 0 && ironlock_leader_info_validity_ms(info) <= 5000;
    ironlock_leader_info_free(info);
    return ok;
}

typedef struct {
    ironlock_observer *obs;
    ironlock_status status;
    bool changed;
    ironlock_leader_info *info;
} observing;

static void *observe_thread(void *arg) {
    observing *o = arg;
    o->status = ironlock_observer_next(o->obs, 3000, &o->changed, &o->info);
    return NULL;
}

/* The line: A leads; B then C queue on their threads; A proclaims, resigns and B leads at once,
   then C; terms grow; the observer sees nobody, A, A's new value, B, C, nobody; a campaign that
   gives up leaves the line; nothing is left on any node. */
static void test_line(harness *h) {
    /* A retry every 3 s: a candidate granted sooner was woken by the resignation. */
    ironlock_manager *m = manager_for(h, 3000);
    ironlock_manager *m2 = manager_for(h, 3000);
    if (!m || !m2) return;
    char name[128];
    unique(name, sizeof name, "line");
    ironlock_leader_info *i_sentinel = (ironlock_leader_info *)&i_sentinel;

    /* Nobody leads: ironlock_leader gives NULL, the observer's first change is "nobody", then
       nothing changes until its timeout. */
    ironlock_leader_info *info = i_sentinel;
    CHECK_STATUS(ironlock_leader(m, name, &info), IRONLOCK_OK, NULL);
    CHECK(info == NULL);
    ironlock_observer *obs = NULL;
    CHECK_STATUS(ironlock_observe(m, name, &obs), IRONLOCK_OK, NULL);
    if (!obs) return;
    bool changed = false;
    info = i_sentinel;
    CHECK_STATUS(ironlock_observer_next(obs, 5000, &changed, &info), IRONLOCK_OK, NULL);
    CHECK(changed && info == NULL);
    long long t0 = now_ms();
    changed = true;
    info = i_sentinel;
    CHECK_STATUS(ironlock_observer_next(obs, 300, &changed, &info), IRONLOCK_OK, NULL);
    CHECK(!changed && info == NULL);
    CHECK(now_ms() - t0 >= 290);

    /* A leads: told only once the record is on a quorum, so the nodes say so at once. */
    ironlock_leadership *a = NULL;
    CHECK_STATUS(ironlock_campaign(m, name, "a:1", 5000, 0, &a), IRONLOCK_OK, NULL);
    if (!a) return;
    CHECK(ironlock_last_report_node_count() == (size_t)h->nodes);
    CHECK(ironlock_leadership_is_leader(a) && !ironlock_leadership_is_lost(a));
    CHECK(ironlock_leadership_term(a) > 0);
    CHECK(strlen(ironlock_leadership_token(a)) == IRONLOCK_TOKEN_LEN);
    CHECK(same(ironlock_leadership_value(a), "a:1"));
    /* Its validity ends a tenth of the ttl before the key's. */
    CHECK(ironlock_leadership_validity_ms(a) <= 4500 && ironlock_leadership_validity_ms(a) > 3000);
    CHECK(leads(m, name, a, "a:1"));
    info = next_leader(obs);
    CHECK(info != NULL && same(ironlock_leader_info_value(info), "a:1") &&
          ironlock_leader_info_term(info) == ironlock_leadership_term(a) &&
          same(ironlock_leader_info_token(info), ironlock_leadership_token(a)));
    ironlock_leader_info_free(info);
    /* Still leading when the wait for a loss times out. */
    CHECK_STATUS(ironlock_leadership_wait_lost(a, 100), IRONLOCK_OK, NULL);

    /* Proclaim: the nodes, the leadership and the observer show the new value, same term. */
    CHECK_STATUS(ironlock_proclaim(a, "a:2"), IRONLOCK_OK, NULL);
    CHECK(same(ironlock_leadership_value(a), "a:2"));
    CHECK(leads(m, name, a, "a:2"));
    info = next_leader(obs);
    CHECK(info != NULL && same(ironlock_leader_info_value(info), "a:2") &&
          ironlock_leader_info_term(info) == ironlock_leadership_term(a));
    ironlock_leader_info_free(info);

    /* A campaign that gives up: CONTENDED, *out untouched, and it left the line on every node. */
    ironlock_leadership *l_sentinel = (ironlock_leadership *)&l_sentinel;
    ironlock_leadership *gave_up = l_sentinel;
    CHECK_STATUS(ironlock_campaign(m2, name, "x", 5000, 300, &gave_up), IRONLOCK_CONTENDED,
                 "could not acquire the leadership of election");
    CHECK(gave_up == l_sentinel);
    for (int node = 0; node < h->nodes; node++) CHECK(line_length(h, node, name, 0) == 0);

    /* Only one observer call at a time: a second one meanwhile is refused, naming it. */
    observing watching = {obs, IRONLOCK_INTERNAL, true, i_sentinel};
    pthread_t w;
    CHECK(pthread_create(&w, NULL, observe_thread, &watching) == 0);
    sleep_ms(500);
    info = i_sentinel;
    CHECK_STATUS(ironlock_observer_next(obs, 100, &changed, &info), IRONLOCK_INVALID_ARGUMENT,
                 "observer: another thread is inside ironlock_observer_next");
    CHECK(info == i_sentinel);
    pthread_join(w, NULL);
    CHECK_STATUS(watching.status, IRONLOCK_OK, NULL);
    CHECK(!watching.changed && watching.info == NULL); /* nothing changed meanwhile */

    /* B queues, then C behind it (each on every node before the next starts). */
    candidate b = {m2, name, "b:1", IRONLOCK_INTERNAL, NULL, 0, 0};
    candidate c = {m2, name, "c:1", IRONLOCK_INTERNAL, NULL, 0, 0};
    pthread_t tb, tc;
    CHECK(pthread_create(&tb, NULL, campaign_thread, &b) == 0);
    for (int node = 0; node < h->nodes; node++) CHECK(line_length(h, node, name, 1) == 1);
    CHECK(pthread_create(&tc, NULL, campaign_thread, &c) == 0);
    for (int node = 0; node < h->nodes; node++) CHECK(line_length(h, node, name, 2) == 2);
    sleep_ms(200);
    CHECK(!atomic_load(&b.done) && !atomic_load(&c.done));
    CHECK(ironlock_leadership_is_leader(a));

    /* A resigns: B, first in line, leads at once (woken, not its 3 s retry); C still waits. */
    long long resigned = now_ms();
    CHECK_STATUS(ironlock_resign(a), IRONLOCK_OK, NULL);
    CHECK(ironlock_last_report_node_count() == (size_t)h->nodes);
    CHECK(!ironlock_leadership_is_leader(a) && !ironlock_leadership_is_lost(a));
    CHECK(ironlock_leadership_validity_ms(a) == 0);
    CHECK_STATUS(ironlock_leadership_wait_lost(a, 0), IRONLOCK_LOST, "was resigned");
    CHECK_STATUS(ironlock_proclaim(a, "a:3"), IRONLOCK_LOST, NULL);
    CHECK_STATUS(ironlock_resign(a), IRONLOCK_OK, NULL); /* again: nothing foreign deleted */
    pthread_join(tb, NULL);
    CHECK_STATUS(b.status, IRONLOCK_OK, NULL);
    if (!b.l) return;
    CHECK(leads(m, name, b.l, "b:1"));
    CHECK(b.granted_ms - resigned < 2500);
    CHECK(ironlock_leadership_term(b.l) > ironlock_leadership_term(a));
    sleep_ms(200);
    CHECK(!atomic_load(&c.done));
    info = next_leader(obs);
    CHECK(info != NULL && same(ironlock_leader_info_token(info), ironlock_leadership_token(b.l)) &&
          same(ironlock_leader_info_value(info), "b:1") &&
          ironlock_leader_info_term(info) == ironlock_leadership_term(b.l));
    ironlock_leader_info_free(info);

    /* B resigns: C leads, with a larger term still. */
    CHECK_STATUS(ironlock_resign(b.l), IRONLOCK_OK, NULL);
    pthread_join(tc, NULL);
    CHECK_STATUS(c.status, IRONLOCK_OK, NULL);
    if (!c.l) return;
    CHECK(leads(m, name, c.l, "c:1"));
    CHECK(ironlock_leadership_term(c.l) > ironlock_leadership_term(b.l));
    info = next_leader(obs);
    CHECK(info != NULL && same(ironlock_leader_info_token(info), ironlock_leadership_token(c.l)) &&
          ironlock_leader_info_term(info) == ironlock_leadership_term(c.l));
    ironlock_leader_info_free(info);

    /* C resigns: the observer says nobody leads; no key or leader record is left anywhere. */
    CHECK_STATUS(ironlock_resign(c.l), IRONLOCK_OK, NULL);
    int nobody = 0;
    for (int i = 0; i < 20 && !nobody; i++) {
        info = i_sentinel;
        CHECK_STATUS(ironlock_observer_next(obs, 500, &changed, &info), IRONLOCK_OK, NULL);
        if (changed && info == NULL) nobody = 1;
        if (info != i_sentinel) ironlock_leader_info_free(info);
    }
    CHECK(nobody);
    info = i_sentinel;
    CHECK_STATUS(ironlock_leader(m, name, &info), IRONLOCK_OK, NULL);
    CHECK(info == NULL);
    for (int node = 0; node < h->nodes; node++) {
        CHECK(election_keys(h, node, name) == 0);
        CHECK(line_length(h, node, name, 0) == 0);
    }
    ironlock_leadership_free(a);
    ironlock_leadership_free(b.l);
    ironlock_leadership_free(c.l);
    ironlock_observer_free(obs);
    ironlock_manager_free(m2);
    ironlock_manager_free(m);
}

/* A leader whose key is deleted behind its back is told it lost; a freed leadership is not
   resigned (its key stays, and the next candidate leads only once it expired); a leadership
   and an observer outlive their manager. */
static void test_loss_and_abandon(harness *h) {
    ironlock_manager *m = manager_for(h, 50);
    if (!m) return;
    char name[128], command[512];
    unique(name, sizeof name, "lost");

    ironlock_leadership *a = NULL;
    CHECK_STATUS(ironlock_campaign(m, name, "a", 1500, 0, &a), IRONLOCK_OK, NULL);
    if (!a) return;
    CHECK(ironlock_leadership_validity_ms(a) <= 1350);
    for (int node = 0; node < 2; node++) {
        snprintf(command, sizeof command, "DEL %s", name);
        CHECK(redis_int(h, node, command) == 1);
    }
    /* The next extension (a third of the ttl before the end) finds no quorum holding it. */
    CHECK_STATUS(ironlock_leadership_wait_lost(a, 10000), IRONLOCK_LOST, "was lost");
    CHECK(ironlock_leadership_is_lost(a) && !ironlock_leadership_is_leader(a));
    CHECK(ironlock_leadership_validity_ms(a) == 0);
    CHECK_STATUS(ironlock_proclaim(a, "a:2"), IRONLOCK_LOST, NULL);
    CHECK_STATUS(ironlock_resign(a), IRONLOCK_OK, NULL);
    ironlock_leadership_free(a);

    /* Freed without resigning: the key and the record stay, the leader is still the nodes'. */
    unique(name, sizeof name, "freed");
    ironlock_leadership *d = NULL;
    CHECK_STATUS(ironlock_campaign(m, name, "d", 1500, 0, &d), IRONLOCK_OK, NULL);
    if (!d) return;
    uint64_t term = ironlock_leadership_term(d);
    long long valid_until = now_ms() + (long long)ironlock_leadership_validity_ms(d);
    ironlock_leadership_free(d);
    snprintf(command, sizeof command, "EXISTS %s %s{%s}:ironlock:leader", name, name, name);
    int kept = 0;
    for (int node = 0; node < h->nodes; node++) kept += redis_int(h, node, command) == 2;
    CHECK(kept >= h->nodes / 2 + 1);
    ironlock_leader_info *info = NULL;
    CHECK_STATUS(ironlock_leader(m, name, &info), IRONLOCK_OK, NULL);
    CHECK(info != NULL && ironlock_leader_info_term(info) == term && same(ironlock_leader_info_value(info), "d"));
    ironlock_leader_info_free(info);
    ironlock_observer *obs = NULL;
    CHECK_STATUS(ironlock_observe(m, name, &obs), IRONLOCK_OK, NULL);

    /* The next candidate leads once the key expired, never while the freed one was valid. */
    ironlock_leadership *e = NULL;
    CHECK_STATUS(ironlock_campaign(m, name, "e", 2000, 10000, &e), IRONLOCK_OK, NULL);
    CHECK(now_ms() >= valid_until);
    if (!e) return;
    CHECK(ironlock_leadership_term(e) > term);

    /* Both the leadership and the observer outlive their manager: the observer's first change
       is who leads now, then the proclaim. */
    ironlock_manager_free(m);
    info = next_leader(obs);
    CHECK(info != NULL && ironlock_leader_info_term(info) == ironlock_leadership_term(e) &&
          same(ironlock_leader_info_value(info), "e"));
    ironlock_leader_info_free(info);
    CHECK(ironlock_leadership_is_leader(e));
    CHECK_STATUS(ironlock_proclaim(e, "e:2"), IRONLOCK_OK, NULL);
    info = next_leader(obs);
    CHECK(info != NULL && same(ironlock_leader_info_value(info), "e:2"));
    ironlock_leader_info_free(info);
    CHECK_STATUS(ironlock_resign(e), IRONLOCK_OK, NULL);
    ironlock_leadership_free(e);
    ironlock_observer_free(obs);
    for (int node = 0; node < h->nodes; node++) CHECK(election_keys(h, node, name) == 0);
}

int main(void) {
    harness h;
    if (harness_start(&h, 3) != 0) {
        fprintf(stderr, "test_election: cannot start nodes\n");
        return 1;
    }
    test_bad_input(&h);
    test_line(&h);
    test_loss_and_abandon(&h);
    harness_stop(&h);
    printf("test_election: %d checks passed, %d failed\n", check_passes, check_failures);
    return check_failures == 0 ? 0 : 1;
}
