/* 8 threads share one manager and contend for one resource, N acquisitions each. Inside the
 * lock each thread reads a plain (non-atomic) counter, sleeps, and writes it back plus one:
 * if two holders ever overlapped, an update would be lost and the final count would be short.
 * Usage: test_threads [N]   (default 20; env IRONLOCK_THREAD_ROUNDS overrides) */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "ironlock.h"

#define THREADS 8

static long counter = 0;     /* guarded only by the distributed lock */
static char resource[128];
static int rounds = 20;

typedef struct {
    ironlock_manager *manager;
    int done;
    int failures;
    char error[512];
} worker;

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static void *work(void *arg) {
    worker *w = arg;
    const char *res[] = {resource};
    ironlock_acquire_options opts = {0};
    opts.wait_ms = 60000; /* bounded: fail rather than hang */
    for (int i = 0; i < rounds; i++) {
        ironlock_lock *lock = NULL;
        ironlock_status s = ironlock_acquire(w->manager, res, 1, 10000, &opts, &lock);
        if (s != IRONLOCK_OK) {
            w->failures++;
            snprintf(w->error, sizeof w->error, "acquire: %s: %s", ironlock_status_str(s), ironlock_last_error());
            continue;
        }
        long seen = counter;
        sleep_us(1000);
        counter = seen + 1;
        if (!ironlock_lock_is_valid(lock)) w->failures++;
        bool held = false;
        s = ironlock_release_held(lock, &held);
        if (s != IRONLOCK_OK || !held) {
            w->failures++;
            snprintf(w->error, sizeof w->error, "release: %s held=%d", ironlock_status_str(s), held);
        }
        ironlock_lock_free(lock);
        w->done++;
    }
    return NULL;
}

int main(int argc, char **argv) {
    const char *env = getenv("IRONLOCK_THREAD_ROUNDS");
    if (argc > 1) rounds = atoi(argv[1]);
    else if (env && *env) rounds = atoi(env);
    if (rounds < 1 || rounds > 10000) rounds = 20;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(resource, sizeof resource, "c-test:threads:%ld:%ld", (long)now.tv_sec, now.tv_nsec);

    harness h;
    if (harness_start(&h, 3) != 0) return 1;
    ironlock_config *cfg = ironlock_config_new();
    for (int i = 0; i < h.nodes; i++) ironlock_config_add_node(cfg, h.urls[i]);
    ironlock_config_set_restart_quarantine(cfg, false);
    ironlock_config_set_retry_delay_ms(cfg, 10);
    ironlock_config_set_retry_jitter_ms(cfg, 5);
    /* Generous: under valgrind a reply can take longer than the 50 ms default, and a release
     * that times out on a majority would report held = false without any overlap. */
    ironlock_config_set_node_timeout_ms(cfg, 2000);
    ironlock_manager *m = NULL;
    ironlock_status s = ironlock_manager_new(cfg, &m);
    ironlock_config_free(cfg);
    if (s != IRONLOCK_OK) {
        fprintf(stderr, "manager_new: %s\n", ironlock_last_error());
        harness_stop(&h);
        return 1;
    }
    pthread_t threads[THREADS];
    worker workers[THREADS];
    memset(workers, 0, sizeof workers);
    for (int i = 0; i < THREADS; i++) {
        workers[i].manager = m;
        if (pthread_create(&threads[i], NULL, work, &workers[i]) != 0) return 1;
    }
    int done = 0, failures = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        done += workers[i].done;
        failures += workers[i].failures;
        if (workers[i].failures) fprintf(stderr, "thread %d: %s\n", i, workers[i].error);
    }
    ironlock_manager_free(m);
    char reply[256], command[256];
    snprintf(command, sizeof command, "cmd 0 EXISTS %s", resource);
    /* The last release returned at a quorum; its other deletes finish in the background. */
    int left = 1;
    for (int i = 0; i < 40 && left; i++) {
        if (i) nanosleep(&(struct timespec){0, 5000000}, NULL);
        left = harness_send(&h, command, reply, sizeof reply) == 0 && strcmp(reply, "0") == 0 ? 0 : 1;
    }
    harness_stop(&h);
    long expected = (long)THREADS * rounds;
    int ok = counter == expected && done == THREADS * rounds && failures == 0 && !left;
    printf("test_threads: %d threads x %d acquisitions, counter %ld of %ld, %d failures, key left: %s: %s\n",
           THREADS, rounds, counter, expected, failures, left ? "yes" : "no", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
