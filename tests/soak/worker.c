/*
 * Soak worker (C): manager churn, then lock cycles through one manager while auto-extended
 * locks stay held. Driven by tests/soak/run.py; the protocol (SOAK_* environment, JSON lines)
 * is in tests/soak/README.md. Built by tests/c/Makefile (soak_worker-shared / -static).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "ironlock.h"

#define MAX_NODES 16
#define MAX_HELD 64
#define RING 16
#define KINDS 16 /* status codes counted in `failed` */
#define UNCLEAR 5

static const char *env(const char *name) {
    const char *v = getenv(name);
    if (!v) {
        fprintf(stderr, "soak worker.c: %s is not set (run tests/soak/run.py)\n", name);
        exit(2);
    }
    return v;
}

static uint64_t env_u64(const char *name) {
    char *end = NULL;
    const char *v = env(name);
    unsigned long long n = strtoull(v, &end, 10);
    if (*v == '\0' || *end != '\0') {
        fprintf(stderr, "soak worker.c: %s is not a number\n", name);
        exit(2);
    }
    return (uint64_t)n;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static const char *control;
static double max_ms;

static bool control_exists(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", control, name);
    return access(path, F_OK) == 0;
}

/* Waits until the control file `name` appears, or SOAK_MAX_SECONDS have passed. */
static void wait_for(const char *name) {
    double until = now_ms() + max_ms;
    while (!control_exists(name) && now_ms() < until) {
        sleep_ms(50);
    }
}

/* Writes `s` as a JSON string. */
static void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            printf("\\%c", c);
        } else if (c < 0x20) {
            printf("\\u%04x", c);
        } else {
            putchar(c);
        }
    }
    putchar('"');
}

/* A manager with the soak's settings, or NULL (the message is in ironlock_last_error()). */
static struct ironlock_manager *new_manager(char **nodes, size_t n_nodes) {
    struct ironlock_manager *m = NULL;
    struct ironlock_config *cfg = ironlock_config_new();
    bool ok = cfg != NULL;
    for (size_t i = 0; ok && i < n_nodes; i++) {
        ok = ironlock_config_add_node(cfg, nodes[i]) == IRONLOCK_OK;
    }
    ok = ok && ironlock_config_set_retry_count(cfg, 0) == IRONLOCK_OK &&
         ironlock_config_set_node_timeout_ms(cfg, env_u64("SOAK_NODE_TIMEOUT_MS")) == IRONLOCK_OK &&
         ironlock_config_set_max_ttl_ms(cfg, env_u64("SOAK_MAX_TTL_MS")) == IRONLOCK_OK &&
         ironlock_manager_new(cfg, &m) == IRONLOCK_OK;
    ironlock_config_free(cfg);
    return ok ? m : NULL;
}

static struct ironlock_lock *acquire(struct ironlock_manager *m, const char *resource,
                                     uint64_t ttl, ironlock_status *status) {
    struct ironlock_lock *lock = NULL;
    *status = ironlock_acquire_with(m, &resource, 1, ttl, NULL, &lock);
    return *status == IRONLOCK_OK ? lock : NULL;
}

int main(void) {
    char *nodes[MAX_NODES];
    size_t n_nodes = 0;
    char *list = strdup(env("SOAK_NODES"));
    uint64_t ttl = env_u64("SOAK_TTL_MS");
    uint64_t managers = env_u64("SOAK_MANAGERS");
    uint64_t held_count = env_u64("SOAK_HELD");
    const char *prefix = env("SOAK_PREFIX");
    char name[512];
    ironlock_status st;

    prctl(PR_SET_PDEATHSIG, SIGKILL); /* die with run.py */
    control = env("SOAK_CONTROL");
    max_ms = (double)env_u64("SOAK_MAX_SECONDS") * 1e3;
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n_nodes == MAX_NODES) {
            fprintf(stderr, "soak worker.c: more than %d nodes\n", MAX_NODES);
            return 2;
        }
        nodes[n_nodes++] = tok;
    }
    if (held_count > MAX_HELD) {
        fprintf(stderr, "soak worker.c: SOAK_HELD above %d\n", MAX_HELD);
        return 2;
    }

    /* Managers: create, sometimes lock once, free. */
    double last = now_ms();
    uint64_t manager_errors = 0;
    /* SOAK_MANAGERS_MARKS: the counts after which run.py samples, comma-separated. */
    uint64_t marks[8];
    size_t n_marks = 0;
    for (const char *p = getenv("SOAK_MANAGERS_MARKS"); p && *p && n_marks < 8;) {
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p) {
            break;
        }
        marks[n_marks++] = v;
        p = *end == ',' ? end + 1 : end;
    }
    if (n_marks == 0) {
        fprintf(stderr, "soak worker.c: SOAK_MANAGERS_MARKS is not set (run tests/soak/run.py)\n");
        return 2;
    }
    snprintf(name, sizeof name, "%s:churn", prefix);
    for (uint64_t k = 0; k < managers; k++) {
        struct ironlock_manager *m = new_manager(nodes, n_nodes);
        if (!m) {
            manager_errors++;
        } else {
            if (k % 10 == 0) {
                struct ironlock_lock *lock = acquire(m, name, ttl, &st);
                if (lock) {
                    ironlock_release(lock);
                    ironlock_lock_free(lock);
                }
            }
            ironlock_manager_free(m);
        }
        if (now_ms() - last >= 500) {
            printf("{\"event\":\"progress\",\"phase\":\"managers\",\"done\":%llu}\n",
                   (unsigned long long)(k + 1));
            fflush(stdout);
            last = now_ms();
        }
        for (size_t i = 0; i < n_marks; i++) {
            if (k + 1 == marks[i]) {
                char file[64];
                printf("{\"event\":\"managers_mark\",\"done\":%llu}\n",
                       (unsigned long long)(k + 1));
                fflush(stdout);
                snprintf(file, sizeof file, "mark-%llu", (unsigned long long)(k + 1));
                wait_for(file);
            }
        }
    }
    printf("{\"event\":\"managers_done\",\"done\":%llu,\"manager_errors\":%llu}\n",
           (unsigned long long)managers, (unsigned long long)manager_errors);
    fflush(stdout);
    wait_for("go");

    /* Cycles through one manager while `held_count` locks stay held under auto-extension. */
    struct ironlock_manager *m = new_manager(nodes, n_nodes);
    if (!m) {
        fprintf(stderr, "soak worker.c: %s\n", ironlock_last_error());
        return 2;
    }
    struct ironlock_lock *held[MAX_HELD];
    for (uint64_t i = 0; i < held_count; i++) {
        snprintf(name, sizeof name, "%s:held:%llu", prefix, (unsigned long long)i);
        held[i] = acquire(m, name, ttl, &st);
        if (!held[i] || ironlock_lock_auto_extend(held[i], NULL, NULL) != IRONLOCK_OK) {
            fprintf(stderr, "soak worker.c: held lock %llu: %s\n", (unsigned long long)i,
                    ironlock_last_error());
            return 2;
        }
    }
    char ring[RING][512];
    for (int i = 0; i < RING; i++) {
        snprintf(ring[i], sizeof ring[i], "%s:cycle:%d", prefix, i);
    }
    uint64_t done = 0, granted = 0, failed[KINDS] = {0};
    char *unclear[UNCLEAR];
    int n_unclear = 0;
    double max_acquire = 0, max_release = 0;
    double started = now_ms();
    for (;;) {
        if (done % 64 == 0 && (control_exists("stop") || now_ms() - started >= max_ms)) {
            break;
        }
        const char *resource = ring[done % RING];
        double t = now_ms();
        struct ironlock_lock *lock = acquire(m, resource, ttl, &st);
        double took = now_ms() - t;
        max_acquire = took > max_acquire ? took : max_acquire;
        done++;
        if (lock) {
            granted++;
            t = now_ms();
            ironlock_release(lock);
            took = now_ms() - t;
            max_release = took > max_release ? took : max_release;
            ironlock_lock_free(lock);
        } else {
            failed[st >= 0 && st < KINDS ? st : KINDS - 1]++;
            const char *msg = ironlock_last_error();
            bool clear = st == IRONLOCK_UNAVAILABLE && strstr(msg, resource) != NULL;
            if (!clear && n_unclear < UNCLEAR) {
                size_t len = strlen(ironlock_status_str(st)) + strlen(msg) + 3;
                unclear[n_unclear] = malloc(len);
                if (unclear[n_unclear]) {
                    snprintf(unclear[n_unclear++], len, "%s: %s", ironlock_status_str(st), msg);
                }
            }
        }
        if (now_ms() - last >= 500) {
            uint64_t failures = 0;
            for (int i = 0; i < KINDS; i++) {
                failures += failed[i];
            }
            printf("{\"event\":\"progress\",\"phase\":\"cycles\",\"done\":%llu,\"granted\":%llu,"
                   "\"failed\":%llu}\n",
                   (unsigned long long)done, (unsigned long long)granted,
                   (unsigned long long)failures);
            fflush(stdout);
            last = now_ms();
        }
    }
    uint64_t held_lost = 0;
    for (uint64_t i = 0; i < held_count; i++) {
        if (ironlock_lock_is_lost(held[i]) || !ironlock_lock_is_valid(held[i])) {
            held_lost++;
        }
        ironlock_lock_stop_auto_extend(held[i]);
        ironlock_release(held[i]);
        ironlock_lock_free(held[i]);
    }
    printf("{\"event\":\"end\",\"done\":%llu,\"granted\":%llu,\"failed\":{",
           (unsigned long long)done, (unsigned long long)granted);
    bool first = true;
    for (int i = 0; i < KINDS; i++) {
        if (failed[i]) {
            printf("%s\"%s\":%llu", first ? "" : ",", ironlock_status_str(i),
                   (unsigned long long)failed[i]);
            first = false;
        }
    }
    printf("},\"unclear\":[");
    for (int i = 0; i < n_unclear; i++) {
        if (i) {
            putchar(',');
        }
        json_string(unclear[i]);
        free(unclear[i]);
    }
    printf("],\"max_acquire_ms\":%.3f,\"max_release_ms\":%.3f,\"held\":%llu,\"held_lost\":%llu}\n",
           max_acquire, max_release, (unsigned long long)held_count,
           (unsigned long long)held_lost);
    fflush(stdout);
    wait_for("quit");
    ironlock_manager_free(m);
    free(list);
    return 0;
}
