/*
 * Chaos worker (C): contends for one resource through libironlock. Same CHAOS_* environment
 * and same JSON log lines as worker.py (see run.py): times are CLOCK_MONOTONIC seconds, the
 * clock Python's time.monotonic() and Node's process.hrtime read, so logs compare across
 * processes and languages. With CHAOS_RW=1 it takes the read or the write side of a read-write
 * lock instead (ironlock_acquire_read / ironlock_acquire_write), as worker.py does; with
 * CHAOS_ELECT=1 it is a candidate of a leader election (elect(), as worker.py's).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ironlock.h"

static const char *FENCED_WRITE =
    "local cur = tonumber(redis.call('GET', KEYS[1]) or '0') "
    "if tonumber(ARGV[1]) > cur then redis.call('SET', KEYS[1], ARGV[1]) return 1 end "
    "return 0";

/* The read-write referee (resp.py's RW_ENTER): the conflicting holders the entrant found. */
static const char *RW_ENTER =
    "if ARGV[1] == 'write' then "
    "local w = redis.call('INCR', KEYS[1]) "
    "return w - 1 + tonumber(redis.call('GET', KEYS[2]) or '0') end "
    "redis.call('INCRBY', KEYS[2], 1) "
    "return tonumber(redis.call('GET', KEYS[1]) or '0')";

static void die(const char *what) {
    fprintf(stderr, "worker_c: %s\n", what);
    exit(2);
}

static const char *env(const char *name) {
    const char *v = getenv(name);
    if (!v) {
        fprintf(stderr, "worker_c: %s is not set\n", name);
        exit(2);
    }
    return v;
}

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s) {
    struct timespec ts;
    if (s <= 0) {
        return;
    }
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- a minimal RESP client: commands of bulk strings, integer replies only ---- */

static int referee_connect(int port) {
    struct sockaddr_in a;
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        die("socket");
    }
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        die("cannot connect to the referee");
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void send_all(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            die("referee write failed");
        }
        buf += w;
        n -= (size_t)w;
    }
}

/* Sends one command (argc bulk strings) and returns its integer reply. */
static long long referee_command(int fd, int argc, ...) {
    char buf[4096];
    size_t len = 0;
    va_list ap;
    char c;
    int i;
    len += (size_t)snprintf(buf + len, sizeof buf - len, "*%d\r\n", argc);
    va_start(ap, argc);
    for (i = 0; i < argc; i++) {
        const char *arg = va_arg(ap, const char *);
        len += (size_t)snprintf(buf + len, sizeof buf - len, "$%zu\r\n%s\r\n", strlen(arg), arg);
        if (len >= sizeof buf) {
            die("referee command too long");
        }
    }
    va_end(ap);
    send_all(fd, buf, len);
    /* read one line: ":<int>\r\n" (anything else is an error here) */
    len = 0;
    for (;;) {
        ssize_t r = read(fd, &c, 1);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            die("referee closed the connection");
        }
        if (c == '\n') {
            break;
        }
        if (len + 1 < sizeof buf) {
            buf[len++] = c;
        }
    }
    buf[len] = '\0';
    if (buf[0] != ':') {
        fprintf(stderr, "worker_c: unexpected referee reply %s\n", buf);
        exit(2);
    }
    return strtoll(buf + 1, NULL, 10);
}

/* splitmix64: the read-or-write choice, seeded per worker */
static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* A manager of the first `limit` nodes of CHAOS_NODES (0 = all of them). */
static struct ironlock_manager *new_manager(int limit) {
    struct ironlock_config *cfg;
    struct ironlock_manager *mgr = NULL;
    char nodes[4096];
    char *tok, *save = NULL;
    int count = 0;

    cfg = ironlock_config_new();
    if (!cfg) {
        die("ironlock_config_new");
    }
    snprintf(nodes, sizeof nodes, "%s", env("CHAOS_NODES"));
    for (tok = strtok_r(nodes, " ", &save); tok && (limit == 0 || count < limit);
         tok = strtok_r(NULL, " ", &save), count++) {
        if (ironlock_config_add_node(cfg, tok) != IRONLOCK_OK) {
            die(ironlock_last_error());
        }
    }
    if (ironlock_config_set_retry_count(cfg, 3) != IRONLOCK_OK ||
        ironlock_config_set_retry_delay_ms(cfg, 50) != IRONLOCK_OK ||
        ironlock_config_set_node_timeout_ms(cfg, (uint64_t)atoll(env("CHAOS_NODE_TIMEOUT_MS"))) !=
            IRONLOCK_OK ||
        ironlock_config_set_max_ttl_ms(cfg, (uint64_t)atoll(env("CHAOS_MAX_TTL_MS"))) !=
            IRONLOCK_OK ||
        ironlock_config_set_restart_quarantine(cfg, strcmp(env("CHAOS_QUARANTINE"), "1") == 0) !=
            IRONLOCK_OK ||
        ironlock_config_set_reseat(cfg, !getenv("CHAOS_RESEAT") || strcmp(getenv("CHAOS_RESEAT"), "1") == 0) !=
            IRONLOCK_OK ||
        ironlock_config_set_fair(cfg, getenv("CHAOS_FAIR") && strcmp(getenv("CHAOS_FAIR"), "1") == 0) !=
            IRONLOCK_OK ||
        ironlock_manager_new(cfg, &mgr) != IRONLOCK_OK) {
        die(ironlock_last_error());
    }
    ironlock_config_free(cfg);
    return mgr;
}

/* ---- leader election (CHAOS_ELECT=1): see worker.py's elect() ---- */

static pthread_mutex_t log_mutex = PTHREAD_MUTEX_INITIALIZER;

struct watch {
    struct ironlock_observer *observer;
    FILE *log;
    int wid, life;
    volatile int stop;
};

/* The observer: logs every change of leader it sees, in order, until told to stop. */
static void *watch_changes(void *arg) {
    struct watch *w = arg;
    while (!w->stop) {
        bool changed = false;
        struct ironlock_leader_info *info = NULL;
        ironlock_status st = ironlock_observer_next(w->observer, 100, &changed, &info);
        if (st != IRONLOCK_OK) {
            pthread_mutex_lock(&log_mutex);
            fprintf(w->log,
                    "{\"worker\": %d, \"lang\": \"c\", \"life\": %d, \"observer_error\": %d, "
                    "\"at\": %.9f}\n",
                    w->wid, w->life, (int)st, mono());
            fflush(w->log);
            pthread_mutex_unlock(&log_mutex);
            return NULL;
        }
        if (!changed) {
            continue;
        }
        pthread_mutex_lock(&log_mutex);
        fprintf(w->log, "{\"worker\": %d, \"lang\": \"c\", \"life\": %d, \"observed\": ", w->wid,
                w->life);
        if (info) {
            /* values are the candidates' own "wN/L/K": no JSON escaping needed */
            fprintf(w->log, "{\"term\": %llu, \"value\": \"%s\"}",
                    (unsigned long long)ironlock_leader_info_term(info),
                    ironlock_leader_info_value(info));
        } else {
            fprintf(w->log, "null");
        }
        fprintf(w->log, ", \"at\": %.9f}\n", mono());
        fflush(w->log);
        pthread_mutex_unlock(&log_mutex);
        ironlock_leader_info_free(info);
    }
    return NULL;
}

/* A candidate: campaigns again and again, leads for a random 50 ms to CHAOS_HOLD_MS checking
 * every 20 ms that it still leads, then resigns (8 in 10), drops the leadership without
 * resigning (1 in 10: ironlock_leadership_free, as if the process had died, and campaigns on)
 * or kills itself with SIGKILL while leading (1 in 10, and at the CHAOS_DIE_AT-th leadership of
 * its first life; the orchestrator starts it again). */
static int elect(struct ironlock_manager *mgr, int referee, FILE *log, int wid, double end) {
    const char *name = env("CHAOS_RESOURCE"), *counter = env("CHAOS_COUNTER_KEY");
    const char *fence_key = env("CHAOS_FENCE_KEY");
    uint64_t ttl_ms = (uint64_t)atoll(env("CHAOS_TTL_MS"));
    double hold = atof(env("CHAOS_HOLD_MS")) / 1000.0, wait = atof(env("CHAOS_WAIT_MS")) / 1000.0;
    int life = atoi(getenv("CHAOS_INCARNATION") ? getenv("CHAOS_INCARNATION") : "0"), n = 0;
    uint64_t rng = (uint64_t)atoll(getenv("CHAOS_SEED") ? getenv("CHAOS_SEED") : "7") * 1000003ULL +
                   (uint64_t)wid * 1009ULL + (uint64_t)life;
    unsigned long contended = 0, other = 0;
    int die_at = life == 0 && getenv("CHAOS_DIE_AT") ? atoi(getenv("CHAOS_DIE_AT")) : 0;
    struct watch w;
    pthread_t watcher;

    memset(&w, 0, sizeof w);
    w.log = log;
    w.wid = wid;
    w.life = life;
    if (ironlock_observe(mgr, name, &w.observer) != IRONLOCK_OK) {
        die(ironlock_last_error());
    }
    if (pthread_create(&watcher, NULL, watch_changes, &w) != 0) {
        die("pthread_create");
    }
    while (mono() < end) {
        struct ironlock_leadership *me = NULL;
        char value[64], term_str[32];
        double left = end - mono(), invoke = mono(), enter, deadline, leave, until;
        uint64_t term;
        long long ref, accepted;
        int lost = 0, roll;
        const char *ending;
        bool resigned = false;
        ironlock_status st;

        snprintf(value, sizeof value, "w%d/%d/%d", wid, life, n);
        left = left < wait ? left : wait;
        st = ironlock_campaign(mgr, name, value, ttl_ms,
                               (uint64_t)(left > 0.01 ? left * 1000.0 : 10.0), &me);
        if (st != IRONLOCK_OK) {
            if (st == IRONLOCK_CONTENDED) {
                contended++;
            } else {
                other++;
            }
            sleep_s(0.01);
            continue;
        }
        enter = mono();
        deadline = enter + (double)ironlock_leadership_validity_ms(me) / 1000.0;
        n++;
        term = ironlock_leadership_term(me);
        roll = n == die_at ? 0 : (int)(next_random(&rng) % 10);
        ending = roll == 0 && mono() < end ? "die" : roll == 1 ? "abandon" : "resign";
        ref = referee_command(referee, 2, "INCR", counter);
        snprintf(term_str, sizeof term_str, "%llu", (unsigned long long)term);
        accepted = referee_command(referee, 5, "EVAL", FENCED_WRITE, "1", fence_key, term_str);
        until = enter + 0.05 + (double)(next_random(&rng) % 1000) / 1000.0 * (hold - 0.05);
        while (mono() < until) {
            double rem = (double)ironlock_leadership_validity_ms(me) / 1000.0, step;
            if (!ironlock_leadership_is_leader(me)) {
                lost = 1;
                break;
            }
            deadline = mono() + rem;
            step = until - mono();
            sleep_s(step < 0.02 ? (step > 0 ? step : 0) : 0.02);
        }
        referee_command(referee, 2, "DECR", counter);
        leave = mono();
        if (strcmp(ending, "resign") == 0) {
            resigned = ironlock_resign(me) == IRONLOCK_OK;
        }
        pthread_mutex_lock(&log_mutex);
        fprintf(log,
                "{\"worker\": %d, \"lang\": \"c\", \"life\": %d, \"term\": %llu, \"token\": "
                "\"%s\", \"value\": \"%s\", \"invoke\": %.9f, \"enter\": %.9f, \"deadline\": "
                "%.9f, \"leave\": %.9f, \"ending\": \"%s\", \"referee\": %lld, "
                "\"fenced_write\": %lld, \"resigned\": %s%s}\n",
                wid, life, (unsigned long long)term, ironlock_leadership_token(me),
                ironlock_leadership_value(me), invoke, enter, deadline, leave, ending, ref,
                accepted, resigned ? "true" : "false", lost ? ", \"lost\": true" : "");
        fflush(log);
        pthread_mutex_unlock(&log_mutex);
        if (strcmp(ending, "die") == 0) {
            kill(getpid(), SIGKILL); /* leading, unresigned: the orchestrator restarts us */
        }
        ironlock_leadership_free(me); /* without ironlock_resign: abandoned, not handed over */
    }
    w.stop = 1;
    pthread_join(watcher, NULL);
    ironlock_observer_free(w.observer);
    fprintf(log,
            "{\"worker\": %d, \"lang\": \"c\", \"life\": %d, \"summary\": true, \"acquired\": %d, "
            "\"errors\": {\"contended\": %lu, \"other\": %lu}}\n",
            wid, life, n, contended, other);
    fclose(log);
    close(referee);
    ironlock_manager_free(mgr);
    return 0;
}

int main(void) {
    int wid, self_stop, n = 0, referee, keep, rw, writes_1_in;
    double write_pause;
    uint64_t rng;
    char writers_key[600], readers_key[600];
    struct ironlock_acquire_opts *rw_opts = NULL;
    double end, hold, wait, margin;
    uint64_t ttl_ms;
    const char *resource, *counter, *fence_key;
    struct ironlock_manager *mgr = NULL, *readers = NULL;
    int minority;
    FILE *log;
    unsigned long errors[8] = {0};

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    wid = atoi(env("CHAOS_WORKER"));
    end = atof(env("CHAOS_END_MONO"));
    ttl_ms = (uint64_t)atoll(env("CHAOS_TTL_MS"));
    hold = atof(env("CHAOS_HOLD_MS")) / 1000.0;
    wait = atof(env("CHAOS_WAIT_MS")) / 1000.0;
    margin = atof(env("CHAOS_MARGIN_MS")) / 1000.0;
    self_stop = atoi(getenv("CHAOS_SELF_STOP") ? getenv("CHAOS_SELF_STOP") : "0");
    resource = env("CHAOS_RESOURCE");
    counter = env("CHAOS_COUNTER_KEY");
    fence_key = env("CHAOS_FENCE_KEY");
    /* Long holds under auto-extension (the rolling-restart-held scenarios). */
    keep = getenv("CHAOS_KEEP") && strcmp(getenv("CHAOS_KEEP"), "1") == 0;
    /* The read or the write side of a read-write lock: 1 in CHAOS_RW_WRITES writes. */
    rw = getenv("CHAOS_RW") && strcmp(getenv("CHAOS_RW"), "1") == 0;
    writes_1_in = atoi(getenv("CHAOS_RW_WRITES") ? getenv("CHAOS_RW_WRITES") : "4");
    write_pause = atof(getenv("CHAOS_RW_PAUSE_MS") ? getenv("CHAOS_RW_PAUSE_MS") : "0") / 1000.0;
    rng = (uint64_t)atoll(getenv("CHAOS_SEED") ? getenv("CHAOS_SEED") : "7") * 1000003ULL +
          (uint64_t)wid;
    snprintf(writers_key, sizeof writers_key, "%s:writers", counter);
    snprintf(readers_key, sizeof readers_key, "%s:readers", counter);
    minority = atoi(getenv("CHAOS_RW_READ_NODES") ? getenv("CHAOS_RW_READ_NODES") : "0");
    if (writes_1_in < 1) {
        die("CHAOS_RW_WRITES must be at least 1");
    }

    mgr = new_manager(0);
    /* The negative control: reads through a manager of only the first k nodes (a minority). */
    readers = minority > 0 ? new_manager(minority) : mgr;
    referee = referee_connect(atoi(env("CHAOS_REFEREE_PORT")));
    log = fopen(env("CHAOS_LOG"), "a");
    if (!log) {
        die("cannot open the log");
    }
    if (getenv("CHAOS_ELECT") && strcmp(getenv("CHAOS_ELECT"), "1") == 0) {
        return elect(mgr, referee, log, wid, end);
    }

    while (mono() < end) {
        struct ironlock_lock *lock = NULL;
        ironlock_acquire_options opts;
        const char *res[1];
        double left = end - mono(), enter, deadline, leave;
        double invoke = mono(); /* the history's invoke (tests/history) */
        uint64_t fence = 0;
        bool held = false;
        long long ref = -1, accepted = -1;
        int have_fence, released_ok, lost = 0;
        ironlock_status st;
        char fence_str[32];
        const char *side = NULL, *access = "null";

        memset(&opts, 0, sizeof opts);
        opts.fencing = true;
        left = left < wait ? left : wait;
        opts.wait_ms = (uint64_t)(left > 0.01 ? left * 1000.0 : 10.0);
        res[0] = resource;
        if (rw) {
            /* the extensible options (the read-write calls take ironlock_acquire_opts) */
            side = next_random(&rng) % (uint64_t)writes_1_in == 0 ? "write" : "read";
            if (!rw_opts) {
                rw_opts = ironlock_acquire_opts_new();
                if (!rw_opts || ironlock_acquire_opts_set_fencing(rw_opts, true) != IRONLOCK_OK) {
                    die("ironlock_acquire_opts");
                }
            }
            if (ironlock_acquire_opts_set_wait_ms(rw_opts, opts.wait_ms) != IRONLOCK_OK) {
                die(ironlock_last_error());
            }
            st = side[0] == 'w' ? ironlock_acquire_write(mgr, resource, ttl_ms, rw_opts, &lock)
                                : ironlock_acquire_read(readers, resource, ttl_ms, rw_opts, &lock);
        } else {
            st = ironlock_acquire(mgr, res, 1, ttl_ms, &opts, &lock);
        }
        if (st != IRONLOCK_OK) {
            errors[st >= 0 && st < 8 ? st : 7]++;
            fprintf(log, "{\"worker\": %d, \"lang\": \"c\", \"fail\": %d, ", wid, (int)st);
            if (side) {
                fprintf(log, "\"access\": \"%s\", ", side);
            }
            fprintf(log, "\"invoke\": %.9f, \"at\": %.9f}\n", invoke, mono());
            sleep_s(0.01);
            continue;
        }
        enter = mono();
        deadline = enter + (double)ironlock_lock_validity_ms(lock) / 1000.0;
        n++;
        have_fence = ironlock_lock_fence(lock, &fence) == IRONLOCK_OK;
        if (keep && ironlock_lock_auto_extend(lock, NULL, NULL) != IRONLOCK_OK) {
            die(ironlock_last_error());
        }
        if (rw) {
            switch (ironlock_lock_access(lock)) { /* as the binding reports it */
            case IRONLOCK_ACCESS_READ:
                access = "\"read\"";
                break;
            case IRONLOCK_ACCESS_WRITE:
                access = "\"write\"";
                break;
            default:
                access = "null";
            }
        }
        if (rw && deadline - enter > margin) {
            double h;
            /* A write must see neither another writer nor a reader, a read no writer. */
            ref = referee_command(referee, 6, "EVAL", RW_ENTER, "2", writers_key, readers_key, side);
            h = deadline - margin - mono();
            sleep_s(hold < h ? hold : h);
            if (side[0] == 'w') {
                snprintf(fence_str, sizeof fence_str, "%llu", (unsigned long long)fence);
                accepted =
                    referee_command(referee, 5, "EVAL", FENCED_WRITE, "1", fence_key, fence_str);
                referee_command(referee, 2, "DECR", writers_key);
            } else {
                referee_command(referee, 3, "DECRBY", readers_key, "1");
            }
        } else if (!rw && deadline - enter > margin) {
            ref = referee_command(referee, 2, "INCR", counter);
            if (self_stop && n == self_stop) {
                kill(getpid(), SIGSTOP);
            }
            if (keep) {
                /* Work until the hold ends or the lock is lost; the deadline is the last validity
                 * seen while the lock was neither lost nor about to expire. */
                double until = enter + hold;
                while (mono() < until) {
                    double rem = (double)ironlock_lock_validity_ms(lock) / 1000.0, step;
                    if (ironlock_lock_is_lost(lock) || rem <= margin) {
                        lost = 1;
                        break;
                    }
                    deadline = mono() + rem;
                    step = until - mono();
                    sleep_s(step < 0.02 ? (step > 0 ? step : 0) : 0.02);
                }
            } else {
                double h = deadline - margin - mono();
                sleep_s(hold < h ? hold : h);
            }
            snprintf(fence_str, sizeof fence_str, "%llu", (unsigned long long)fence);
            accepted = referee_command(referee, 5, "EVAL", FENCED_WRITE, "1", fence_key, fence_str);
            referee_command(referee, 2, "DECR", counter);
        }
        leave = mono();
        if (keep) {
            ironlock_lock_stop_auto_extend(lock);
        }
        released_ok = ironlock_release_held(lock, &held) == IRONLOCK_OK;
        if (!released_ok) {
            errors[7]++;
        }
        fprintf(log, "{\"worker\": %d, \"lang\": \"c\", \"token\": \"%s\", ", wid,
                ironlock_lock_token(lock));
        if (have_fence) {
            fprintf(log, "\"fence\": %llu, ", (unsigned long long)fence);
        } else {
            fprintf(log, "\"fence\": null, ");
        }
        fprintf(log, "\"invoke\": %.9f, ", invoke);
        if (rw) {
            fprintf(log, "\"access\": %s, \"asked\": \"%s\", ", access, side);
        }
        fprintf(log, "\"enter\": %.9f, \"deadline\": %.9f, \"leave\": %.9f, ", enter, deadline,
                leave);
        if (lost) {
            fprintf(log, "\"lost\": true, ");
        }
        if (ref >= 0 && accepted >= 0) {
            fprintf(log, "\"referee\": %lld, \"fenced_write\": %lld, ", ref, accepted);
        } else if (ref >= 0) {
            fprintf(log, "\"referee\": %lld, ", ref);
        } else {
            fprintf(log, "\"skipped\": true, ");
        }
        fprintf(log, "\"released\": %s}\n", released_ok && held ? "true" : "false");
        fflush(log);
        ironlock_lock_free(lock);
        if (rw && side[0] == 'w') {
            sleep_s(write_pause); /* a waiting writer holds back readers: let them in */
        }
    }
    fprintf(log,
            "{\"worker\": %d, \"lang\": \"c\", \"summary\": true, \"acquired\": %d, \"errors\": "
            "{\"contended\": %lu, \"unavailable\": %lu, \"connection\": %lu, \"other\": %lu}}\n",
            wid, n, errors[IRONLOCK_CONTENDED], errors[IRONLOCK_UNAVAILABLE],
            errors[IRONLOCK_CONNECTION],
            errors[IRONLOCK_LOST] + errors[IRONLOCK_INVALID_ARGUMENT] + errors[IRONLOCK_INTERNAL] +
                errors[7]);
    fclose(log);
    close(referee);
    ironlock_acquire_opts_free(rw_opts);
    if (readers != mgr) {
        ironlock_manager_free(readers);
    }
    ironlock_manager_free(mgr);
    return 0;
}
