/*
 * Chaos worker (C): contends for one resource through libironlock. Same CHAOS_* environment
 * and same JSON log lines as worker.py (see run.py): times are CLOCK_MONOTONIC seconds, the
 * clock Python's time.monotonic() and Node's process.hrtime read, so logs compare across
 * processes and languages.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

int main(void) {
    int wid, self_stop, n = 0, referee, keep;
    double end, hold, wait, margin;
    uint64_t ttl_ms;
    const char *resource, *counter, *fence_key;
    char nodes[4096];
    char *tok, *save = NULL;
    struct ironlock_config *cfg;
    struct ironlock_manager *mgr = NULL;
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

    cfg = ironlock_config_new();
    if (!cfg) {
        die("ironlock_config_new");
    }
    snprintf(nodes, sizeof nodes, "%s", env("CHAOS_NODES"));
    for (tok = strtok_r(nodes, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
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
    referee = referee_connect(atoi(env("CHAOS_REFEREE_PORT")));
    log = fopen(env("CHAOS_LOG"), "a");
    if (!log) {
        die("cannot open the log");
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

        memset(&opts, 0, sizeof opts);
        opts.fencing = true;
        left = left < wait ? left : wait;
        opts.wait_ms = (uint64_t)(left > 0.01 ? left * 1000.0 : 10.0);
        res[0] = resource;
        st = ironlock_acquire(mgr, res, 1, ttl_ms, &opts, &lock);
        if (st != IRONLOCK_OK) {
            errors[st >= 0 && st < 8 ? st : 7]++;
            fprintf(log, "{\"worker\": %d, \"lang\": \"c\", \"fail\": %d, \"invoke\": %.9f, \"at\": %.9f}\n",
                    wid, (int)st, invoke, mono());
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
        if (deadline - enter > margin) {
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
        fprintf(log, "\"enter\": %.9f, \"deadline\": %.9f, \"leave\": %.9f, ", enter, deadline,
                leave);
        if (lost) {
            fprintf(log, "\"lost\": true, ");
        }
        if (ref >= 0) {
            fprintf(log, "\"referee\": %lld, \"fenced_write\": %lld, ", ref, accepted);
        } else {
            fprintf(log, "\"skipped\": true, ");
        }
        fprintf(log, "\"released\": %s}\n", released_ok && held ? "true" : "false");
        fflush(log);
        ironlock_lock_free(lock);
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
    ironlock_manager_free(mgr);
    return 0;
}
