/* Drives ironlock-harness (tests/harness): real redis-server nodes on loopback ports. */
#ifndef IRONLOCK_TEST_HARNESS_H
#define IRONLOCK_TEST_HARNESS_H

#include <stdio.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HARNESS_MAX_NODES 8

typedef struct {
    pid_t pid;
    FILE *to;   /* harness stdin */
    FILE *from; /* harness stdout */
    int nodes;
    char urls[HARNESS_MAX_NODES][64];
} harness;

/* Starts `nodes` fresh nodes; 0 on success, -1 with a message on stderr. */
int harness_start(harness *h, int nodes);
/* The same, each node started with the extra redis-server arguments `extra` (NULL-terminated). */
int harness_start_with(harness *h, int nodes, const char *const *extra);
/* Sends one command line; copies the one-line answer (without newline) to reply. 0 on success. */
int harness_send(harness *h, const char *command, char *reply, size_t reply_len);
/* Closes the harness: it kills every node and exits. */
void harness_stop(harness *h);
/* The harness binary: $IRONLOCK_HARNESS, else the build's default. */
const char *harness_path(void);

#ifdef __cplusplus
}
#endif

#endif
