/* Starts ironlock-harness as a child with two pipes and speaks its one-line protocol. */
#define _POSIX_C_SOURCE 200809L
#include "harness.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "json.h"

#ifndef IRONLOCK_DEFAULT_HARNESS
#define IRONLOCK_DEFAULT_HARNESS "target/debug/ironlock-harness"
#endif

const char *harness_path(void) {
    const char *env = getenv("IRONLOCK_HARNESS");
    return env && *env ? env : IRONLOCK_DEFAULT_HARNESS;
}

static int read_line(FILE *f, char *buf, size_t len) {
    if (!fgets(buf, (int)len, f)) return -1;
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = '\0';
    return 0;
}

int harness_start(harness *h, int nodes) { return harness_start_with(h, nodes, NULL); }

int harness_start_with(harness *h, int nodes, const char *const *extra) {
    int in[2], out[2];
    memset(h, 0, sizeof *h);
    if (nodes < 1 || nodes > HARNESS_MAX_NODES) return -1;
    if (pipe(in) != 0) return -1;
    if (pipe(out) != 0) { close(in[0]); close(in[1]); return -1; }
    char count[16];
    snprintf(count, sizeof count, "%d", nodes);
    const char *path = harness_path();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]); close(in[1]); close(out[0]); close(out[1]);
        const char *argv[64] = {path, "--nodes", count};
        int argc = 3;
        if (extra) {
            argv[argc++] = "--";
            for (int i = 0; extra[i] && argc < 63; i++) argv[argc++] = extra[i];
        }
        argv[argc] = NULL;
        execv(path, (char *const *)argv);
        fprintf(stderr, "harness: cannot exec %s\n", path);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    h->pid = pid;
    h->to = fdopen(in[1], "w");
    h->from = fdopen(out[0], "r");
    if (!h->to || !h->from) { harness_stop(h); return -1; }
    char line[4096], err[128];
    if (read_line(h->from, line, sizeof line) != 0) {
        fprintf(stderr, "harness: %s printed nothing (is it built? cargo build -p ironlock-harness)\n", path);
        harness_stop(h);
        return -1;
    }
    json *doc = json_parse(line, err, sizeof err);
    const json *urls = json_get(doc, "urls");
    if (!urls || urls->type != JSON_ARRAY || (int)urls->count != nodes) {
        fprintf(stderr, "harness: unexpected first line: %s\n", line);
        json_free(doc);
        harness_stop(h);
        return -1;
    }
    for (int i = 0; i < nodes; i++) {
        snprintf(h->urls[i], sizeof h->urls[i], "%s", urls->items[i]->string);
    }
    h->nodes = nodes;
    json_free(doc);
    return 0;
}

int harness_send(harness *h, const char *command, char *reply, size_t reply_len) {
    if (!h->to || fprintf(h->to, "%s\n", command) < 0 || fflush(h->to) != 0) return -1;
    if (read_line(h->from, reply, reply_len) != 0) return -1;
    if (strncmp(reply, "error:", 6) == 0) {
        fprintf(stderr, "harness: %s -> %s\n", command, reply);
        return -1;
    }
    return 0;
}

void harness_stop(harness *h) {
    if (h->to) { fprintf(h->to, "quit\n"); fclose(h->to); h->to = NULL; }
    if (h->from) { fclose(h->from); h->from = NULL; }
    if (h->pid > 0) {
        int status;
        waitpid(h->pid, &status, 0);
        h->pid = 0;
    }
}
