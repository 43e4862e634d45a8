/* Runs every scenario of tests/corpus/scenarios through the C API, with the expectations the
 * Rust core's corpus runner (core/tests/corpus.rs) checks. The `redis` op goes through the
 * harness's `cmd`. Usage: corpus [SCENARIO_DIR] [NAME_FILTER]
 *
 * IRONLOCK_CORPUS_SLOW=1 is for runs under valgrind, which slows this process ~20x while the
 * nodes keep their speed: scenarios that do not set node_timeout_ms get 2000 ms instead of the
 * 50 ms default (else replies that arrived in time are read too late and count as timeouts),
 * and a failing scenario is run once more (reported as RETRY). Native runs never retry. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "harness.h"
#include "ironlock.h"
#include "json.h"

#ifndef IRONLOCK_DEFAULT_CORPUS
#define IRONLOCK_DEFAULT_CORPUS "tests/corpus/scenarios"
#endif

#define MAX_LOCKS 32
#define MAX_SCENARIOS 256

typedef struct {
    char name[64];
    ironlock_lock *lock;
} named_lock;

typedef struct {
    char name[64];
    ironlock_leadership *leadership;
} named_leadership;

/* The leaderships of the scenario being run (scenarios run one at a time). */
static named_leadership leaders[MAX_LOCKS];
static size_t n_leaders;

typedef struct {
    const char *scenario;
    size_t step;
    const char *op;
    char message[1024];
    int failed;
} context;

static void failf(context *cx, const char *fmt, ...) {
    va_list ap;
    if (cx->failed) return;
    cx->failed = 1;
    int n = snprintf(cx->message, sizeof cx->message, "%s step %zu (%s): ", cx->scenario,
                     cx->step, cx->op ? cx->op : "-");
    va_start(ap, fmt);
    vsnprintf(cx->message + n, sizeof cx->message - (size_t)n, fmt, ap);
    va_end(ap);
}

static void sleep_ms(long long ms) {
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static int want_u64(context *cx, const json *v, const char *field, uint64_t *out) {
    if (!v || v->type != JSON_NUMBER || !v->is_integer || v->integer < 0) {
        failf(cx, "field %s: expected a non-negative integer", field);
        return 0;
    }
    *out = (uint64_t)v->integer;
    return 1;
}

static const char *want_str(context *cx, const json *v, const char *field) {
    if (!v || v->type != JSON_STRING) {
        failf(cx, "field %s: expected a string", field);
        return NULL;
    }
    return v->string;
}

static int want_bool(context *cx, const json *v, const char *field, int *out) {
    if (!v || v->type != JSON_BOOL) {
        failf(cx, "field %s: expected a boolean", field);
        return 0;
    }
    *out = v->boolean;
    return 1;
}

static ironlock_status apply_setting(context *cx, ironlock_config *cfg, const char *key, const json *v) {
    uint64_t n = 0;
    int b = 0;
    if (strcmp(key, "drift_factor") == 0) {
        if (!v || v->type != JSON_NUMBER) { failf(cx, "drift_factor: not a number"); return IRONLOCK_INVALID_ARGUMENT; }
        return ironlock_config_set_drift_factor(cfg, v->number);
    }
    if (strcmp(key, "key_prefix") == 0) {
        const char *s = want_str(cx, v, key);
        return s ? ironlock_config_set_key_prefix(cfg, s) : IRONLOCK_INVALID_ARGUMENT;
    }
    if (strcmp(key, "restart_quarantine") == 0) {
        return want_bool(cx, v, key, &b) ? ironlock_config_set_restart_quarantine(cfg, b)
                                         : IRONLOCK_INVALID_ARGUMENT;
    }
    if (strcmp(key, "reseat") == 0) {
        return want_bool(cx, v, key, &b) ? ironlock_config_set_reseat(cfg, b) : IRONLOCK_INVALID_ARGUMENT;
    }
    if (strcmp(key, "fair") == 0) {
        return want_bool(cx, v, key, &b) ? ironlock_config_set_fair(cfg, b) : IRONLOCK_INVALID_ARGUMENT;
    }
    if (!want_u64(cx, v, key, &n)) return IRONLOCK_INVALID_ARGUMENT;
    if (strcmp(key, "retry_count") == 0) return ironlock_config_set_retry_count(cfg, (uint32_t)n);
    if (strcmp(key, "max_extensions") == 0) return ironlock_config_set_max_extensions(cfg, (uint32_t)n);
    if (strcmp(key, "retry_delay_ms") == 0) return ironlock_config_set_retry_delay_ms(cfg, n);
    if (strcmp(key, "retry_jitter_ms") == 0) return ironlock_config_set_retry_jitter_ms(cfg, n);
    if (strcmp(key, "drift_constant_ms") == 0) return ironlock_config_set_drift_constant_ms(cfg, n);
    if (strcmp(key, "node_timeout_ms") == 0) return ironlock_config_set_node_timeout_ms(cfg, n);
    if (strcmp(key, "connect_timeout_ms") == 0) return ironlock_config_set_connect_timeout_ms(cfg, n);
    if (strcmp(key, "max_ttl_ms") == 0) return ironlock_config_set_max_ttl_ms(cfg, n);
    if (strcmp(key, "min_validity_ms") == 0) return ironlock_config_set_min_validity_ms(cfg, n);
    if (strcmp(key, "extension_threshold_ms") == 0) return ironlock_config_set_extension_threshold_ms(cfg, n);
    if (strcmp(key, "queue_timeout_ms") == 0) return ironlock_config_set_queue_timeout_ms(cfg, n);
    failf(cx, "unknown setting %s", key);
    return IRONLOCK_INVALID_ARGUMENT;
}

static ironlock_lock *find_lock(context *cx, named_lock *locks, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++) {
        if (strcmp(locks[i].name, name) == 0) return locks[i].lock;
    }
    failf(cx, "no lock named %s", name ? name : "(null)");
    return NULL;
}

static ironlock_leadership *find_leadership(context *cx, const char *name) {
    for (size_t i = 0; name && i < n_leaders; i++) {
        if (strcmp(leaders[i].name, name) == 0) return leaders[i].leadership;
    }
    failf(cx, "no leadership named %s", name ? name : "(null)");
    return NULL;
}

static const char *status_code(ironlock_status s) {
    return s == IRONLOCK_OK ? "ok" : ironlock_status_str(s);
}

/* Every vote named in expect_votes has exactly that count in this thread's last report. */
static void check_votes(context *cx, const json *expected) {
    if (!expected) return;
    if (expected->type != JSON_OBJECT) { failf(cx, "expect_votes: not an object"); return; }
    size_t nodes = ironlock_last_report_node_count();
    if (nodes == 0) { failf(cx, "expect_votes: no report"); return; }
    for (size_t k = 0; k < expected->count; k++) {
        uint64_t want = 0;
        if (!want_u64(cx, expected->items[k], expected->keys[k], &want)) return;
        uint64_t got = 0;
        for (size_t i = 0; i < nodes; i++) {
            if (strcmp(ironlock_last_report_node_vote(i), expected->keys[k]) == 0) got++;
        }
        if (got != want) {
            char votes[256] = "";
            for (size_t i = 0; i < nodes; i++) {
                strncat(votes, ironlock_last_report_node_vote(i), sizeof votes - strlen(votes) - 2);
                strncat(votes, " ", sizeof votes - strlen(votes) - 1);
            }
            failf(cx, "votes %s: got %llu, expected %llu (votes: %s)", expected->keys[k],
                  (unsigned long long)got, (unsigned long long)want, votes);
            return;
        }
    }
}

/* expect_message: each text is in ironlock_last_error(), where {nodeI} stands for node I's
   host:port (the text after the URL's last '/' or '@'). */
static void check_message(context *cx, const json *parts, const harness *h, ironlock_status s) {
    if (!parts) return;
    if (parts->type != JSON_ARRAY) { failf(cx, "expect_message: not an array"); return; }
    const char *message = ironlock_last_error();
    if (s == IRONLOCK_OK || !message) { failf(cx, "expect_message: no error message"); return; }
    for (size_t k = 0; k < parts->count; k++) {
        const char *part = want_str(cx, parts->items[k], "expect_message[]");
        if (!part) return;
        char want[512] = "";
        while (*part && strlen(want) < sizeof want - 80) {
            int node = -1, used = 0;
            if (sscanf(part, "{node%d}%n", &node, &used) == 1 && used > 0 && node >= 0 && node < h->nodes) {
                const char *url = h->urls[node], *addr = url;
                for (const char *c = url; *c; c++) {
                    if (*c == '/' || *c == '@') addr = c + 1;
                }
                strncat(want, addr, sizeof want - strlen(want) - 1);
                part += used;
            } else {
                size_t len = strlen(want);
                want[len] = *part++;
                want[len + 1] = '\0';
            }
        }
        if (!strstr(message, want)) {
            failf(cx, "\"%s\" not in the message \"%s\"", want, message);
            return;
        }
    }
}

static void op_acquire(context *cx, const json *step, const harness *h, ironlock_manager *m, named_lock *locks, size_t *n_locks) {
    const json *res = json_get(step, "resources");
    const char *as = want_str(cx, json_get(step, "as"), "as");
    const char *expect = want_str(cx, json_get(step, "expect"), "expect");
    uint64_t ttl = 0;
    if (!as || !expect || !want_u64(cx, json_get(step, "ttl_ms"), "ttl_ms", &ttl)) return;
    if (!res || res->type != JSON_ARRAY) { failf(cx, "resources: not an array"); return; }
    const char *names[16];
    if (res->count > 16) { failf(cx, "too many resources"); return; }
    for (size_t i = 0; i < res->count; i++) {
        names[i] = want_str(cx, res->items[i], "resources[]");
        if (!names[i]) return;
    }
    ironlock_acquire_options opts = {0};
    /* fair: -1 = not given (the manager's setting), else 0 / 1; only the extensible options
       (ironlock_acquire_opts) carry it. */
    int fair = -1;
    /* min_hold_ms: 0 = not given; only the extensible options carry it. */
    uint64_t min_hold = 0;
    const json *o = json_get(step, "options");
    if (o) {
        for (size_t i = 0; i < o->count; i++) {
            const char *k = o->keys[i];
            uint64_t n = 0;
            int b = 0;
            if (strcmp(k, "retry_count") == 0 && want_u64(cx, o->items[i], k, &n)) {
                opts.has_retry_count = true;
                opts.retry_count = (uint32_t)n;
            } else if (strcmp(k, "wait_ms") == 0 && want_u64(cx, o->items[i], k, &n)) {
                opts.wait_ms = n;
            } else if (strcmp(k, "fencing") == 0 && want_bool(cx, o->items[i], k, &b)) {
                opts.fencing = b;
            } else if (strcmp(k, "fair") == 0 && want_bool(cx, o->items[i], k, &b)) {
                fair = b;
            } else if (strcmp(k, "min_hold_ms") == 0 && want_u64(cx, o->items[i], k, &n)) {
                min_hold = n;
            } else {
                failf(cx, "bad option %s", k);
            }
        }
        if (cx->failed) return;
    }
    ironlock_lock *lock = NULL;
    ironlock_status s;
    const json *limit = json_get(step, "limit");
    /* access: "read" or "write", a side of the read-write lock resources[0]. */
    const json *access_field = json_get(step, "access");
    ironlock_access access = IRONLOCK_ACCESS_NONE;
    if (access_field) {
        const char *a = want_str(cx, access_field, "access");
        if (!a) return;
        if (strcmp(a, "read") == 0) access = IRONLOCK_ACCESS_READ;
        else if (strcmp(a, "write") == 0) access = IRONLOCK_ACCESS_WRITE;
        else { failf(cx, "unknown access %s", a); return; }
        if (limit) { failf(cx, "access and limit: a step takes one or the other"); return; }
    }
    if (limit || access != IRONLOCK_ACCESS_NONE || fair >= 0 || min_hold) {
        /* A permit of the semaphore resources[0], a side of the read-write lock resources[0], a
           fair acquire or a minimum hold: through the extensible options. */
        ironlock_acquire_opts *po = ironlock_acquire_opts_new();
        if (opts.wait_ms) ironlock_acquire_opts_set_wait_ms(po, opts.wait_ms);
        if (opts.has_retry_count) ironlock_acquire_opts_set_retry_count(po, opts.retry_count);
        ironlock_acquire_opts_set_fencing(po, opts.fencing);
        if (fair >= 0) ironlock_acquire_opts_set_fair(po, fair);
        if (min_hold) ironlock_acquire_opts_set_min_hold(po, min_hold);
        uint64_t k = 0;
        if (access != IRONLOCK_ACCESS_NONE) {
            if (res->count != 1) {
                ironlock_acquire_opts_free(po);
                failf(cx, "access: one resource");
                return;
            }
            s = access == IRONLOCK_ACCESS_READ ? ironlock_acquire_read(m, names[0], ttl, po, &lock)
                                               : ironlock_acquire_write(m, names[0], ttl, po, &lock);
        } else if (!limit) {
            s = ironlock_acquire_with(m, names, res->count, ttl, po, &lock);
        } else if (!want_u64(cx, limit, "limit", &k) || res->count != 1) {
            ironlock_acquire_opts_free(po);
            failf(cx, "limit: one resource and a count");
            return;
        } else {
            s = ironlock_acquire_permit(m, names[0], (uint32_t)k, ttl, po, &lock);
        }
        ironlock_acquire_opts_free(po);
    } else {
        /* res->count may be 0: pass a valid pointer with a zero count (the library must refuse). */
        s = ironlock_acquire(m, names, res->count, ttl, o ? &opts : NULL, &lock);
    }
    if (strcmp(status_code(s), expect) != 0) {
        failf(cx, "acquire returned %s, expected %s (%s)", status_code(s), expect, ironlock_last_error());
        ironlock_lock_free(lock);
        return;
    }
    if (s != IRONLOCK_OK && lock != NULL) { failf(cx, "out-parameter written on failure"); return; }
    /* A granted lock says which side of a read-write lock it holds (none for locks, permits). */
    if (lock && ironlock_lock_access(lock) != access) {
        failf(cx, "lock_access is %d, expected %d", (int)ironlock_lock_access(lock), (int)access);
        ironlock_lock_free(lock);
        return;
    }
    check_votes(cx, json_get(step, "expect_votes"));
    check_message(cx, json_get(step, "expect_message"), h, s);
    const json *rounds = json_get(step, "expect_rounds");
    if (rounds) {
        /* On success the lock's report; on failure the thread's last report is the error's. */
        if (lock && ironlock_lock_report(lock) != IRONLOCK_OK) failf(cx, "lock_report failed");
        uint64_t want = 0;
        if (want_u64(cx, rounds, "expect_rounds", &want) && ironlock_last_report_rounds() != want) {
            failf(cx, "rounds %u, expected %llu", ironlock_last_report_rounds(), (unsigned long long)want);
        }
        if (ironlock_last_report_elapsed_us() == 0) failf(cx, "elapsed is 0");
    }
    if (lock) {
        if (*n_locks == MAX_LOCKS) { failf(cx, "too many locks"); ironlock_lock_free(lock); return; }
        /* A name reused by a later acquire replaces the earlier lock (as the Rust runner's map). */
        for (size_t i = 0; i < *n_locks; i++) {
            if (strcmp(locks[i].name, as) == 0) {
                ironlock_lock_free(locks[i].lock);
                locks[i].lock = lock;
                return;
            }
        }
        snprintf(locks[*n_locks].name, sizeof locks[*n_locks].name, "%s", as);
        locks[(*n_locks)++].lock = lock;
    }
}

/* Expected reply with "$name" replaced by the token of that lock or leadership (top-level
   strings, as in Rust). */
static int reply_matches(context *cx, const json *expected, const json *got, named_lock *locks, size_t n) {
    if (expected->type == JSON_STRING && expected->string[0] == '$') {
        const char *name = expected->string + 1, *token = NULL;
        for (size_t i = 0; i < n && !token; i++) {
            if (strcmp(locks[i].name, name) == 0) token = ironlock_lock_token(locks[i].lock);
        }
        if (!token) {
            ironlock_leadership *l = find_leadership(cx, name);
            token = l ? ironlock_leadership_token(l) : NULL;
        }
        return token && got->type == JSON_STRING && strcmp(got->string, token) == 0;
    }
    return json_equal(expected, got);
}

static void op_redis(context *cx, const json *step, harness *h, named_lock *locks, size_t n_locks) {
    uint64_t node = 0;
    const json *args = json_get(step, "args");
    if (!want_u64(cx, json_get(step, "node"), "node", &node)) return;
    if (!args || args->type != JSON_ARRAY || args->count == 0) { failf(cx, "args: not a non-empty array"); return; }
    char command[1024];
    int at = snprintf(command, sizeof command, "cmd %llu", (unsigned long long)node);
    for (size_t i = 0; i < args->count; i++) {
        const char *a = want_str(cx, args->items[i], "args[]");
        if (!a) return;
        if (strpbrk(a, " \t\n") || !*a) { failf(cx, "arg %s cannot go through the harness", a); return; }
        at += snprintf(command + at, sizeof command - (size_t)at, " %s", a);
        if ((size_t)at >= sizeof command) { failf(cx, "command too long"); return; }
    }
    const json *expect = json_get(step, "expect");
    const json *gt = json_get(step, "expect_gt");
    /* A read that does not match yet is retried for up to 200 ms (tests/corpus/README.md:
       requests a round stopped waiting for reach the other nodes in the background). */
    static const char *read_only[] = {"GET", "EXISTS", "PTTL", "TTL", "DBSIZE", "ZCARD", "HGET", NULL};
    int retry = 0;
    for (int i = 0; read_only[i]; i++) retry |= strcasecmp(args->items[0]->string, read_only[i]) == 0;
    char reply[4096], err[128];
    json *got = NULL;
    for (int tries = 1;; tries++) {
        if (harness_send(h, command, reply, sizeof reply) != 0) { failf(cx, "harness: %s failed", command); return; }
        got = json_parse(reply, err, sizeof err);
        if (!got) { failf(cx, "harness reply %s: %s", reply, err); return; }
        int ok = (!expect || reply_matches(cx, expect, got, locks, n_locks)) &&
                 (!gt || (gt->is_integer && got->type == JSON_NUMBER && got->is_integer && got->integer > gt->integer));
        if (ok || !retry || tries == 40) break;
        json_free(got);
        sleep_ms(5);
    }
    if (expect && !reply_matches(cx, expect, got, locks, n_locks)) {
        char want[256];
        json_render(expect, want, sizeof want);
        failf(cx, "%s replied %s, expected %s", command, reply, want);
    }
    if (gt && !(gt->is_integer && got->type == JSON_NUMBER && got->is_integer && got->integer > gt->integer)) {
        failf(cx, "%s replied %s, expected more than %lld", command, reply, gt->integer);
    }
    json_free(got);
}

static void op_campaign(context *cx, const json *step, const harness *h, ironlock_manager *m) {
    const char *as = want_str(cx, json_get(step, "as"), "as");
    const char *election = want_str(cx, json_get(step, "election"), "election");
    const char *value = want_str(cx, json_get(step, "value"), "value");
    const char *expect = want_str(cx, json_get(step, "expect"), "expect");
    uint64_t ttl = 0, wait = 0;
    if (!as || !election || !value || !expect || !want_u64(cx, json_get(step, "ttl_ms"), "ttl_ms", &ttl)) return;
    const json *w = json_get(step, "wait_ms");
    if (w && (!want_u64(cx, w, "wait_ms", &wait) || wait == 0)) { failf(cx, "wait_ms: at least 1"); return; }
    ironlock_leadership *l = NULL;
    ironlock_status s = ironlock_campaign(m, election, value, ttl, wait, &l);
    if (strcmp(status_code(s), expect) != 0) {
        failf(cx, "campaign returned %s, expected %s (%s)", status_code(s), expect, ironlock_last_error());
        ironlock_leadership_free(l);
        return;
    }
    if (s != IRONLOCK_OK && l != NULL) { failf(cx, "out-parameter written on failure"); return; }
    check_message(cx, json_get(step, "expect_message"), h, s);
    if (!l) return;
    if (n_leaders == MAX_LOCKS) { failf(cx, "too many leaderships"); ironlock_leadership_free(l); return; }
    snprintf(leaders[n_leaders].name, sizeof leaders[n_leaders].name, "%s", as);
    leaders[n_leaders++].leadership = l;
}

/* leader: expect null (nobody leads), {"value", "leadership"} (that leadership leads with that
   value: same term and token, validity above 0) or an error code. */
static void op_leader(context *cx, const json *step, ironlock_manager *m) {
    const char *election = want_str(cx, json_get(step, "election"), "election");
    const json *want = json_get(step, "expect");
    if (!election || !want) { failf(cx, "election and expect are required"); return; }
    ironlock_leader_info *who = NULL;
    ironlock_status s = ironlock_leader(m, election, &who);
    if (want->type == JSON_STRING) {
        if (strcmp(status_code(s), want->string) != 0) failf(cx, "leader returned %s, expected %s", status_code(s), want->string);
    } else if (s != IRONLOCK_OK) {
        failf(cx, "leader returned %s (%s)", status_code(s), ironlock_last_error());
    } else if (want->type == JSON_NULL) {
        if (who) failf(cx, "%s leads, expected nobody", ironlock_leader_info_value(who));
    } else if (!who) {
        failf(cx, "nobody leads");
    } else {
        const char *value = want_str(cx, json_get(want, "value"), "expect.value");
        ironlock_leadership *l = find_leadership(cx, want_str(cx, json_get(want, "leadership"), "expect.leadership"));
        if (value && l) {
            if (strcmp(ironlock_leader_info_value(who), value) != 0) {
                failf(cx, "leader value %s, expected %s", ironlock_leader_info_value(who), value);
            } else if (ironlock_leader_info_term(who) != ironlock_leadership_term(l) ||
                       strcmp(ironlock_leader_info_token(who), ironlock_leadership_token(l)) != 0) {
                failf(cx, "leader term %llu, expected %llu (or another token)",
                      (unsigned long long)ironlock_leader_info_term(who),
                      (unsigned long long)ironlock_leadership_term(l));
            } else if (ironlock_leader_info_validity_ms(who) == 0) {
                failf(cx, "leader validity is 0");
            }
        }
    }
    ironlock_leader_info_free(who);
}

static void op_election(context *cx, const json *step, const harness *h, ironlock_manager *m) {
    const char *op = cx->op;
    if (strcmp(op, "campaign") == 0) {
        op_campaign(cx, step, h, m);
    } else if (strcmp(op, "leader") == 0) {
        op_leader(cx, step, m);
    } else if (strcmp(op, "proclaim") == 0) {
        const char *value = want_str(cx, json_get(step, "value"), "value");
        const char *expect = want_str(cx, json_get(step, "expect"), "expect");
        ironlock_leadership *l = find_leadership(cx, want_str(cx, json_get(step, "leadership"), "leadership"));
        if (!l || !value || !expect) return;
        ironlock_status s = ironlock_proclaim(l, value);
        if (strcmp(status_code(s), expect) != 0) {
            failf(cx, "proclaim returned %s, expected %s (%s)", status_code(s), expect, ironlock_last_error());
        }
    } else if (strcmp(op, "resign") == 0) {
        ironlock_leadership *l = find_leadership(cx, want_str(cx, json_get(step, "leadership"), "leadership"));
        if (l && ironlock_resign(l) != IRONLOCK_OK) failf(cx, "resign failed (%s)", ironlock_last_error());
    } else if (strcmp(op, "expect_leading") == 0) {
        int want = 0;
        ironlock_leadership *l = find_leadership(cx, want_str(cx, json_get(step, "leadership"), "leadership"));
        if (!l || !want_bool(cx, json_get(step, "leading"), "leading", &want)) return;
        if (ironlock_leadership_is_leader(l) != (bool)want) failf(cx, "is_leader is %d, expected %d", !want, want);
    } else if (strcmp(op, "expect_terms_increasing") == 0) {
        const json *names = json_get(step, "leaderships");
        uint64_t prev = 0;
        if (!names || names->type != JSON_ARRAY) { failf(cx, "leaderships: not an array"); return; }
        for (size_t i = 0; i < names->count; i++) {
            ironlock_leadership *l = find_leadership(cx, want_str(cx, names->items[i], "leaderships[]"));
            if (!l) return;
            uint64_t t = ironlock_leadership_term(l);
            if (i > 0 && t <= prev) { failf(cx, "term %llu not above %llu", (unsigned long long)t, (unsigned long long)prev); return; }
            prev = t;
        }
    } else {
        failf(cx, "unknown op");
    }
}

static void run_step(context *cx, const json *step, harness *h, ironlock_manager *m, named_lock *locks, size_t *n_locks) {
    const char *op = cx->op;
    if (strcmp(op, "acquire") == 0) {
        op_acquire(cx, step, h, m, locks, n_locks);
    } else if (strcmp(op, "extend") == 0) {
        uint64_t ttl = 0;
        const char *expect = want_str(cx, json_get(step, "expect"), "expect");
        ironlock_lock *l = find_lock(cx, locks, *n_locks, want_str(cx, json_get(step, "lock"), "lock"));
        if (!l || !expect || !want_u64(cx, json_get(step, "ttl_ms"), "ttl_ms", &ttl)) return;
        ironlock_status s = ironlock_extend(l, ttl);
        if (strcmp(status_code(s), expect) != 0) {
            failf(cx, "extend returned %s, expected %s (%s)", status_code(s), expect, ironlock_last_error());
        }
    } else if (strcmp(op, "release") == 0) {
        int want = 0;
        ironlock_lock *l = find_lock(cx, locks, *n_locks, want_str(cx, json_get(step, "lock"), "lock"));
        if (!l || !want_bool(cx, json_get(step, "expect_held"), "expect_held", &want)) return;
        bool held = !want; /* the opposite, so an unwritten out-parameter fails the check */
        ironlock_status s = ironlock_release_held(l, &held);
        if (s != IRONLOCK_OK) failf(cx, "release returned %s", status_code(s));
        else if (held != (bool)want) failf(cx, "release: held %d, expected %d", held, want);
    } else if (strcmp(op, "finish") == 0) {
        const char *expect = want_str(cx, json_get(step, "expect"), "expect");
        ironlock_lock *l = find_lock(cx, locks, *n_locks, want_str(cx, json_get(step, "lock"), "lock"));
        if (!l || !expect) return;
        ironlock_status s = ironlock_lock_finish(l);
        if (strcmp(status_code(s), expect) != 0) {
            failf(cx, "finish returned %s, expected %s (%s)", status_code(s), expect, ironlock_last_error());
        }
    } else if (strcmp(op, "keep_alive") == 0) {
        ironlock_lock *l = find_lock(cx, locks, *n_locks, want_str(cx, json_get(step, "lock"), "lock"));
        if (!l) return;
        ironlock_status s = ironlock_lock_auto_extend(l, NULL, NULL);
        if (s != IRONLOCK_OK) failf(cx, "auto_extend returned %s (%s)", status_code(s), ironlock_last_error());
    } else if (strcmp(op, "expect_lost") == 0) {
        int want = 0;
        ironlock_lock *l = find_lock(cx, locks, *n_locks, want_str(cx, json_get(step, "lock"), "lock"));
        if (!l || !want_bool(cx, json_get(step, "lost"), "lost", &want)) return;
        if (ironlock_lock_is_lost(l) != (bool)want) failf(cx, "is_lost is %d, expected %d", !want, want);
    } else if (strcmp(op, "expect_valid") == 0) {
        int want = 0;
        ironlock_lock *l = find_lock(cx, locks, *n_locks, want_str(cx, json_get(step, "lock"), "lock"));
        if (!l || !want_bool(cx, json_get(step, "valid"), "valid", &want)) return;
        if (ironlock_lock_is_valid(l) != (bool)want) failf(cx, "is_valid is %d, expected %d", !want, want);
    } else if (strcmp(op, "expect_fence") == 0) {
        int want = 0;
        uint64_t fence = 0;
        ironlock_lock *l = find_lock(cx, locks, *n_locks, want_str(cx, json_get(step, "lock"), "lock"));
        if (!l || !want_bool(cx, json_get(step, "present"), "present", &want)) return;
        ironlock_status s = ironlock_lock_fence(l, &fence);
        if ((s == IRONLOCK_OK) != want) failf(cx, "fence status %s, expected present=%d", status_code(s), want);
    } else if (strcmp(op, "expect_fence_increasing") == 0) {
        const json *names = json_get(step, "locks");
        uint64_t prev = 0;
        if (!names || names->type != JSON_ARRAY) { failf(cx, "locks: not an array"); return; }
        for (size_t i = 0; i < names->count; i++) {
            uint64_t f = 0;
            ironlock_lock *l = find_lock(cx, locks, *n_locks, want_str(cx, names->items[i], "locks[]"));
            if (!l) return;
            if (ironlock_lock_fence(l, &f) != IRONLOCK_OK) { failf(cx, "lock %zu has no fence", i); return; }
            if (i > 0 && f <= prev) { failf(cx, "fence %llu not above %llu", (unsigned long long)f, (unsigned long long)prev); return; }
            prev = f;
        }
    } else if (strcmp(op, "redis") == 0) {
        op_redis(cx, step, h, locks, *n_locks);
    } else if (strcmp(op, "kill") == 0 || strcmp(op, "start") == 0 || strcmp(op, "restart") == 0 ||
               strcmp(op, "pause") == 0 || strcmp(op, "resume") == 0) {
        uint64_t node = 0;
        char command[64], reply[256];
        if (!want_u64(cx, json_get(step, "node"), "node", &node)) return;
        snprintf(command, sizeof command, "%s %llu", op, (unsigned long long)node);
        if (harness_send(h, command, reply, sizeof reply) != 0) failf(cx, "harness: %s failed", command);
    } else if (strcmp(op, "sleep") == 0) {
        uint64_t ms = 0;
        if (want_u64(cx, json_get(step, "ms"), "ms", &ms)) sleep_ms((long long)ms);
    } else {
        op_election(cx, step, h, m);
    }
}

/* Fields every step may carry, per op (a runner fails on a field it does not know). */
static int known_field(const char *op, const char *field) {
    static const char *common[] = {"op", "why", NULL};
    static const struct { const char *op; const char *fields[12]; } table[] = {
        {"acquire", {"as", "resources", "ttl_ms", "options", "expect", "expect_votes", "expect_rounds", "expect_message", "limit", "access", NULL}},
        {"finish", {"lock", "expect", NULL}},
        {"keep_alive", {"lock", NULL}},
        {"expect_lost", {"lock", "lost", NULL}},
        {"extend", {"lock", "ttl_ms", "expect", NULL}},
        {"release", {"lock", "expect_held", NULL}},
        {"expect_valid", {"lock", "valid", NULL}},
        {"expect_fence", {"lock", "present", NULL}},
        {"expect_fence_increasing", {"locks", NULL}},
        {"redis", {"node", "args", "expect", "expect_gt", NULL}},
        {"kill", {"node", NULL}}, {"start", {"node", NULL}}, {"restart", {"node", NULL}},
        {"pause", {"node", NULL}}, {"resume", {"node", NULL}},
        {"sleep", {"ms", NULL}},
        {"campaign", {"as", "election", "value", "ttl_ms", "wait_ms", "expect", "expect_message", NULL}},
        {"proclaim", {"leadership", "value", "expect", NULL}},
        {"resign", {"leadership", NULL}},
        {"leader", {"election", "expect", NULL}},
        {"expect_leading", {"leadership", "leading", NULL}},
        {"expect_terms_increasing", {"leaderships", NULL}},
    };
    for (int i = 0; common[i]; i++) if (strcmp(common[i], field) == 0) return 1;
    for (size_t t = 0; t < sizeof table / sizeof table[0]; t++) {
        if (strcmp(table[t].op, op) != 0) continue;
        for (int i = 0; table[t].fields[i]; i++) if (strcmp(table[t].fields[i], field) == 0) return 1;
    }
    return 0;
}

static int slow_mode(void) {
    const char *slow = getenv("IRONLOCK_CORPUS_SLOW");
    return slow && strcmp(slow, "1") == 0;
}

static int run_scenario(const char *path, char *message, size_t message_len) {
    char err[256];
    json *sc = json_parse_file(path, err, sizeof err);
    if (!sc) { snprintf(message, message_len, "%s: %s", path, err); return 0; }
    context cx = {0};
    const json *name = json_get(sc, "name");
    cx.scenario = name && name->type == JSON_STRING ? name->string : path;
    uint64_t nodes = 0;
    harness h;
    int started = 0;
    ironlock_config *cfg = NULL;
    ironlock_manager *m = NULL;
    named_lock locks[MAX_LOCKS];
    size_t n_locks = 0;
    const json *steps = json_get(sc, "steps");
    if (!want_u64(&cx, json_get(sc, "nodes"), "nodes", &nodes)) goto done;
    if (!steps || steps->type != JSON_ARRAY) { failf(&cx, "steps: not an array"); goto done; }
    if (harness_start(&h, (int)nodes) != 0) { failf(&cx, "cannot start %llu nodes", (unsigned long long)nodes); goto done; }
    started = 1;
    cfg = ironlock_config_new();
    for (int i = 0; i < h.nodes; i++) {
        if (ironlock_config_add_node(cfg, h.urls[i]) != IRONLOCK_OK) failf(&cx, "add_node: %s", ironlock_last_error());
    }
    /* Runner defaults (tests/corpus/README.md). */
    ironlock_config_set_restart_quarantine(cfg, false);
    ironlock_config_set_retry_count(cfg, 0);
    if (slow_mode()) ironlock_config_set_node_timeout_ms(cfg, 2000);
    const json *settings = json_get(sc, "settings");
    for (size_t i = 0; settings && i < settings->count && !cx.failed; i++) {
        if (apply_setting(&cx, cfg, settings->keys[i], settings->items[i]) != IRONLOCK_OK) {
            failf(&cx, "setting %s: %s", settings->keys[i], ironlock_last_error());
        }
    }
    if (cx.failed) goto done;
    if (ironlock_manager_new(cfg, &m) != IRONLOCK_OK) { failf(&cx, "manager_new: %s", ironlock_last_error()); goto done; }
    for (size_t i = 0; i < steps->count && !cx.failed; i++) {
        const json *step = steps->items[i];
        cx.step = i;
        cx.op = want_str(&cx, json_get(step, "op"), "op");
        if (!cx.op) break;
        for (size_t f = 0; f < step->count; f++) {
            if (!known_field(cx.op, step->keys[f])) failf(&cx, "unknown field %s", step->keys[f]);
        }
        if (!cx.failed) run_step(&cx, step, &h, m, locks, &n_locks);
    }
done:
    for (size_t i = 0; i < n_locks; i++) ironlock_lock_free(locks[i].lock);
    for (size_t i = 0; i < n_leaders; i++) ironlock_leadership_free(leaders[i].leadership);
    n_leaders = 0;
    ironlock_manager_free(m);
    ironlock_config_free(cfg);
    if (started) harness_stop(&h);
    snprintf(message, message_len, "%s", cx.message);
    json_free(sc);
    return !cx.failed;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : getenv("IRONLOCK_CORPUS");
    if (!dir || !*dir) dir = IRONLOCK_DEFAULT_CORPUS;
    const char *filter = argc > 2 ? argv[2] : NULL;
    DIR *d = opendir(dir);
    if (!d) { fprintf(stderr, "corpus: cannot open %s\n", dir); return 2; }
    char *files[MAX_SCENARIOS];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < MAX_SCENARIOS) {
        size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".json") == 0) files[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(files, n, sizeof files[0], by_name);
    int passed = 0, failed = 0, retried = 0;
    for (size_t i = 0; i < n; i++) {
        if (filter && !strstr(files[i], filter)) { free(files[i]); continue; }
        char path[4096], message[8192];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        int ok = run_scenario(path, message, sizeof message);
        if (!ok && slow_mode()) {
            printf("RETRY %s: %s\n", files[i], message);
            retried++;
            ok = run_scenario(path, message, sizeof message);
        }
        if (ok) {
            passed++;
            printf("ok   %s\n", files[i]);
        } else {
            failed++;
            printf("FAIL %s: %s\n", files[i], message);
        }
        fflush(stdout);
        free(files[i]);
    }
    printf("corpus: %d passed, %d failed, %d retried\n", passed, failed, retried);
    if (!filter && passed + failed < 20) {
        printf("corpus: expected at least 20 scenarios in %s\n", dir);
        return 1;
    }
    return failed == 0 && passed > 0 ? 0 : 1;
}
