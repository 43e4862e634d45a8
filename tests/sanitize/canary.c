/* Proves that tests/sanitize/run.sh can fail: built with the same flags as the tests, each mode
 * commits one error the sanitizers must report. run.sh requires a report from every mode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "overflow") == 0) { /* AddressSanitizer: heap-buffer-overflow */
        volatile char *buf = malloc(8);
        volatile size_t i = 8;
        buf[i] = 'x';
        free((void *)buf);
        return 0;
    }
    if (strcmp(mode, "use-after-free") == 0) { /* AddressSanitizer: heap-use-after-free */
        char *buf = malloc(8);
        free(buf);
        volatile char c = buf[0];
        return c == 'x';
    }
    if (strcmp(mode, "leak") == 0) { /* LeakSanitizer: detected memory leaks */
        void *volatile p = malloc(64);
        p = NULL;
        return p != NULL;
    }
    fprintf(stderr, "usage: canary overflow|use-after-free|leak\n");
    return 2;
}
