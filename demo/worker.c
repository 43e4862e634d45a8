/* Demo worker (C): read-modify-write a shared counter under the lock until the deadline.
 * Settings come from the environment set by demo/run.py; prints one JSON summary line. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ironlock.h"

#define MAX_NODES 16
static const char *const VOTES[] = {"for", "against", "error", "timeout", "not_eligible", "pending"};
#define N_VOTES (sizeof VOTES / sizeof VOTES[0])

static char urls[MAX_NODES][256];
static unsigned long counts[MAX_NODES][N_VOTES];
static size_t n_urls;
static unsigned long failures[8];

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Adds the per-node votes of the last call on this thread to the tally. */
static void tally(void) {
    for (size_t i = 0; i < ironlock_last_report_node_count(); i++) {
        const char *url = ironlock_last_report_node_url(i), *vote = ironlock_last_report_node_vote(i);
        if (!url || !vote) continue;
        size_t u = 0;
        while (u < n_urls && strcmp(urls[u], url) != 0) u++;
        if (u == n_urls) {
            if (n_urls == MAX_NODES) continue;
            snprintf(urls[n_urls++], sizeof urls[0], "%s", url);
        }
        for (size_t v = 0; v < N_VOTES; v++)
            if (strcmp(VOTES[v], vote) == 0) counts[u][v]++;
    }
}

/* One RESP request to the referee; copies a bulk/simple reply into out ("" for nil). */
static int referee_call(int fd, const char *out_cmd, char *out, size_t cap) {
    if (write(fd, out_cmd, strlen(out_cmd)) < 0) return -1;
    char buf[512];
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fd, buf + len, sizeof buf - 1 - len);
        if (r <= 0) return -1;
        len += (size_t)r;
        buf[len] = 0;
        char *eol = strstr(buf, "\r\n");
        if (!eol) continue;
        if (buf[0] == '$') {
            long n = strtol(buf + 1, NULL, 10);
            if (n < 0) { out[0] = 0; return 0; }
            if (len < (size_t)(eol - buf) + 2 + (size_t)n + 2) continue;
            snprintf(out, cap, "%.*s", (int)n, eol + 2);
            return 0;
        }
        if (buf[0] == '-') return -1;
        snprintf(out, cap, "%.*s", (int)(eol - buf - 1), buf + 1);
        return 0;
    }
}

int main(void) {
    const char *nodes = getenv("DEMO_NODES"), *resource = getenv("DEMO_RESOURCE");
    const char *counter = getenv("DEMO_COUNTER"), *name = getenv("DEMO_NAME");
    const char *port = getenv("DEMO_REFEREE_PORT"), *seconds = getenv("DEMO_SECONDS");
    if (!nodes || !resource || !counter || !name || !port || !seconds) {
        fprintf(stderr, "worker.c: DEMO_* environment missing\n");
        return 64;
    }
    ironlock_config *cfg = ironlock_config_new();
    char *list = strdup(nodes);
    for (char *save = NULL, *url = strtok_r(list, ",", &save); url; url = strtok_r(NULL, ",", &save))
        ironlock_config_add_node(cfg, url);
    free(list);
    ironlock_config_set_max_ttl_ms(cfg, 2000);
    ironlock_config_set_retry_delay_ms(cfg, 30);
    ironlock_config_set_retry_jitter_ms(cfg, 20);
    ironlock_config_set_node_timeout_ms(cfg, 100);
    ironlock_manager *m = NULL;
    if (ironlock_manager_new(cfg, &m) != IRONLOCK_OK) {
        fprintf(stderr, "worker.c: %s\n", ironlock_last_error());
        return 1;
    }
    ironlock_config_free(cfg);

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        perror("worker.c: referee");
        return 1;
    }
    char get[256], set[320], value[64];
    snprintf(get, sizeof get, "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n", strlen(counter), counter);

    unsigned long acquisitions = 0;
    double deadline = now_s() + atof(seconds);
    const char *resources[] = {resource};
    ironlock_acquire_options opts = {.wait_ms = 2000};
    while (now_s() < deadline) {
        ironlock_lock *lock = NULL;
        ironlock_status st = ironlock_acquire(m, resources, 1, 1000, &opts, &lock);
        tally();
        if (st != IRONLOCK_OK) {
            if (st >= 0 && st < 8) failures[st]++;
            continue;
        }
        if (referee_call(fd, get, value, sizeof value) != 0) return 1;
        char next[32];
        snprintf(next, sizeof next, "%lu", strtoul(value, NULL, 10) + 1);
        snprintf(set, sizeof set, "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(counter), counter,
                 strlen(next), next);
        if (referee_call(fd, set, value, sizeof value) != 0) return 1;
        acquisitions++;
        ironlock_release(lock);
        ironlock_lock_free(lock);
    }
    printf("{\"name\":\"%s\",\"language\":\"c\",\"acquisitions\":%lu,\"failures\":{", name, acquisitions);
    int first = 1;
    for (int s = 1; s < 8; s++)
        if (failures[s]) {
            printf("%s\"%s\":%lu", first ? "" : ",", ironlock_status_str(s), failures[s]);
            first = 0;
        }
    printf("},\"votes\":{");
    for (size_t u = 0; u < n_urls; u++) {
        printf("%s\"%s\":{", u ? "," : "", urls[u]);
        for (size_t v = 0; v < N_VOTES; v++) printf("%s\"%s\":%lu", v ? "," : "", VOTES[v], counts[u][v]);
        printf("}");
    }
    printf("}}\n");
    close(fd);
    ironlock_manager_free(m);
    return 0;
}
