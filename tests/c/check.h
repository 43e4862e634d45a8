/* Assertion helpers shared by the C tests: count failures, never abort mid-test. */
#ifndef IRONLOCK_TEST_CHECK_H
#define IRONLOCK_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

#include "ironlock.h"

static int check_failures = 0;
static int check_passes = 0;

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (cond) {                                                                 \
            check_passes++;                                                         \
        } else {                                                                    \
            check_failures++;                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, \
                    __LINE__, #cond, ironlock_last_error());                        \
        }                                                                           \
    } while (0)

static int check_contains(const char *text, const char *needle) {
    return needle == NULL || strstr(text, needle) != NULL;
}

/* A call returns `expected` and, on failure, ironlock_last_error() contains `needle`. */
#define CHECK_STATUS(call, expected, needle)                                               \
    do {                                                                                   \
        ironlock_status got_ = (call);                                                     \
        const char *err_ = ironlock_last_error();                                          \
        if (got_ == (expected) && check_contains(err_, (needle))) {         \
            check_passes++;                                                                \
        } else {                                                                           \
            check_failures++;                                                              \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s with \"%s\" (error: %s)\n", \
                    __FILE__, __LINE__, #call, ironlock_status_str(got_),                  \
                    ironlock_status_str(expected), check_contains("", (needle)) ? "" : (needle), err_);        \
        }                                                                                  \
    } while (0)

#endif
