/* C benchmark driver: ironlock through libironlock.so (release build), same command line and
 * JSON line as bench/rust, bench/py and bench/node.
 *
 *   driver --workload a|b|c|d|e --urls U1,U2,.. [--cycles N] [--concurrency C] [--prefix P]
 *          [--time-limit SECS]
 *
 * Concurrency is one POSIX thread per in-flight operation over ONE thread-safe manager.
 * Settings: restart_quarantine off (fresh nodes); (c) retry off; otherwise the defaults. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <ironlock.h>

#define TTL_MS 10000
#define HOLD_TTL_MS 60000 /* the longest ttl ironlock allows by default (max_ttl) */

static const char *workload = NULL;
static char *urls = NULL;
static long cycles = 1000, concurrency = 1;
static const char *prefix = NULL;
static double time_limit = 30.0;
static long hold_us = 0; /* (c)/(d): hold each grant this long */

static ironlock_manager *manager;
static atomic_long next_index, done_count, ok_count, failed_count;
static double deadline;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char first_error[512];

struct worker {
    pthread_t thread;
    const char *run_prefix;
    long total;
    int mode; /* 0 cycles, 1 contended, 2 hold */
    double *lat;
    size_t nlat, cap;
    ironlock_lock **held;
    size_t nheld, capheld;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_us(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static long current_rss_kb(void) {
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
        fclose(f);
    }
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static void die(const char *msg) {
    fprintf(stderr, "c driver: %s\n", msg);
    exit(2);
}

static void note_error(ironlock_status st) {
    pthread_mutex_lock(&mu);
    if (!first_error[0])
        snprintf(first_error, sizeof first_error, "%s: %s", ironlock_status_str(st), ironlock_last_error());
    pthread_mutex_unlock(&mu);
}

static void push_lat(struct worker *w, double us) {
    if (w->nlat == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 1024;
        w->lat = realloc(w->lat, w->cap * sizeof *w->lat);
        if (!w->lat) die("out of memory");
    }
    w->lat[w->nlat++] = us;
}

static void *run(void *arg) {
    struct worker *w = arg;
    char key[256];
    ironlock_acquire_options opts = {0};
    unsigned int seed = (unsigned int)(uintptr_t)w ^ (unsigned int)getpid();
    if (w->mode == 1) {
        snprintf(key, sizeof key, "%s:hot", prefix);
        const char *res[] = {key};
        int driver_pause = strcmp(workload, "c") == 0;
        while (atomic_load(&done_count) < w->total && now_s() < deadline) {
            double t0 = now_s();
            for (;;) {
                ironlock_lock *lock = NULL;
                ironlock_status st = ironlock_acquire(manager, res, 1, TTL_MS, &opts, &lock);
                if (st == IRONLOCK_OK) {
                    if (hold_us > 0) usleep((useconds_t)hold_us);
                    ironlock_release(lock);
                    ironlock_lock_free(lock);
                    atomic_fetch_add(&done_count, 1);
                    atomic_fetch_add(&ok_count, 1);
                    push_lat(w, (now_s() - t0) * 1e6);
                    break;
                }
                if (st != IRONLOCK_CONTENDED && st != IRONLOCK_UNAVAILABLE) note_error(st);
                atomic_fetch_add(&failed_count, 1);
                if (atomic_load(&done_count) >= w->total || now_s() >= deadline) return NULL;
                if (driver_pause) usleep((useconds_t)(rand_r(&seed) % 2001));
            }
        }
        return NULL;
    }
    for (;;) {
        long i = atomic_fetch_add(&next_index, 1);
        if (i >= w->total || now_s() >= deadline) return NULL;
        snprintf(key, sizeof key, "%s:%ld", w->run_prefix, i);
        const char *res[] = {key};
        double t0 = now_s();
        ironlock_lock *lock = NULL;
        ironlock_status st =
            ironlock_acquire(manager, res, 1, w->mode == 2 ? HOLD_TTL_MS : TTL_MS, &opts, &lock);
        if (st != IRONLOCK_OK) {
            note_error(st);
            atomic_fetch_add(&failed_count, 1);
            continue;
        }
        if (w->mode == 2) {
            if (w->nheld == w->capheld) {
                w->capheld = w->capheld ? w->capheld * 2 : 256;
                w->held = realloc(w->held, w->capheld * sizeof *w->held);
                if (!w->held) die("out of memory");
            }
            w->held[w->nheld++] = lock;
            atomic_fetch_add(&ok_count, 1);
            continue;
        }
        st = ironlock_release(lock);
        ironlock_lock_free(lock);
        if (st != IRONLOCK_OK) {
            note_error(st);
            atomic_fetch_add(&failed_count, 1);
            continue;
        }
        atomic_fetch_add(&ok_count, 1);
        push_lat(w, (now_s() - t0) * 1e6);
    }
}

static struct worker *start_workers(const char *run_prefix, long total, int mode) {
    struct worker *ws = calloc((size_t)concurrency, sizeof *ws);
    if (!ws) die("out of memory");
    atomic_store(&next_index, 0);
    atomic_store(&done_count, 0);
    atomic_store(&ok_count, 0);
    atomic_store(&failed_count, 0);
    for (long i = 0; i < concurrency; i++) {
        ws[i].run_prefix = run_prefix;
        ws[i].total = total;
        ws[i].mode = mode;
        if (pthread_create(&ws[i].thread, NULL, run, &ws[i]) != 0) die("pthread_create");
    }
    for (long i = 0; i < concurrency; i++) pthread_join(ws[i].thread, NULL);
    return ws;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    char default_prefix[64];
    snprintf(default_prefix, sizeof default_prefix, "bench:%d", (int)getpid());
    prefix = default_prefix;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--workload")) workload = v;
        else if (!strcmp(k, "--urls")) urls = strdup(v);
        else if (!strcmp(k, "--cycles")) cycles = atol(v);
        else if (!strcmp(k, "--concurrency")) concurrency = atol(v);
        else if (!strcmp(k, "--prefix")) prefix = v;
        else if (!strcmp(k, "--time-limit")) time_limit = atof(v);
        else if (!strcmp(k, "--hold-ms")) hold_us = (long)(atof(v) * 1000.0);
        else if (!strcmp(k, "--client")) { /* always ironlock */ }
        else die("unknown argument");
    }
    if (!workload || !urls || concurrency <= 0) die("--workload and --urls are required");

    ironlock_config *config = ironlock_config_new();
    for (char *save = NULL, *u = strtok_r(urls, ",", &save); u; u = strtok_r(NULL, ",", &save))
        ironlock_config_add_node(config, u);
    ironlock_config_set_restart_quarantine(config, false);
    if (!strcmp(workload, "c")) ironlock_config_set_retry_count(config, 0);
    ironlock_status st = ironlock_manager_new(config, &manager);
    ironlock_config_free(config);
    if (st != IRONLOCK_OK) {
        fprintf(stderr, "c driver: manager: %s\n", ironlock_last_error());
        return 2;
    }

    char warm_prefix[256];
    snprintf(warm_prefix, sizeof warm_prefix, "%s:warm", prefix);
    deadline = now_s() + 10;
    long warm_n = concurrency * 4 > 50 ? concurrency * 4 : 50;
    struct worker *ws = start_workers(warm_prefix, warm_n, 0);
    if (atomic_load(&ok_count) == 0) {
        fprintf(stderr, "c driver: warm-up failed: %s\n", first_error);
        return 2;
    }
    for (long i = 0; i < concurrency; i++) free(ws[i].lat);
    free(ws);
    first_error[0] = 0;

    int mode = (!strcmp(workload, "c") || !strcmp(workload, "d")) ? 1 : !strcmp(workload, "e") ? 2 : 0;
    long base_rss = current_rss_kb();
    deadline = now_s() + time_limit;
    double c0 = cpu_us(), t0 = now_s();
    ws = start_workers(prefix, cycles, mode);
    double secs = now_s() - t0, cpu = cpu_us() - c0;
    long ok = atomic_load(&ok_count), failed = atomic_load(&failed_count);

    size_t n = 0;
    for (long i = 0; i < concurrency; i++) n += ws[i].nlat;
    double *lat = malloc((n ? n : 1) * sizeof *lat);
    if (!lat) die("out of memory");
    n = 0;
    for (long i = 0; i < concurrency; i++) {
        if (ws[i].nlat) memcpy(lat + n, ws[i].lat, ws[i].nlat * sizeof *lat);
        n += ws[i].nlat;
    }
    qsort(lat, n, sizeof *lat, cmp_double);
    double p50 = n ? lat[(size_t)((double)(n - 1) * 0.5 + 0.5)] : 0;
    double p99 = n ? lat[(size_t)((double)(n - 1) * 0.99 + 0.5)] : 0;
    int complete = ok >= cycles;
    printf("{\"ok\":%ld,\"failed\":%ld,\"target\":%ld,\"complete\":%s,\"seconds\":%.6f,\"cps\":%.3f,"
           "\"p50_us\":%.1f,\"p99_us\":%.1f,\"cpu_us_per_cycle\":%.3f",
           ok, failed, cycles, complete ? "true" : "false", secs, ok / secs, p50, p99,
           ok ? cpu / (double)ok : 0.0);
    if (mode == 2) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf(",\"rss_base_kb\":%ld,\"rss_peak_kb\":%ld", base_rss, ru.ru_maxrss > current_rss_kb() ? ru.ru_maxrss : current_rss_kb());
        for (long i = 0; i < concurrency; i++)
            for (size_t j = 0; j < ws[i].nheld; j++) {
                ironlock_release(ws[i].held[j]);
                ironlock_lock_free(ws[i].held[j]);
            }
    }
    if (first_error[0] && mode != 1) {
        printf(",\"error\":\"");
        for (const char *p = first_error; *p; p++)
            if (*p == '"' || *p == '\\') printf("\\%c", *p);
            else if ((unsigned char)*p >= 0x20) putchar(*p);
        printf("\"");
    }
    printf("}\n");
    fflush(stdout);
    ironlock_manager_free(manager);
    return complete ? 0 : 3;
}
