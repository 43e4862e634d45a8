/*
 * LD_PRELOAD shim for the chaos suite: gives one redis-server a wall clock that runs fast or
 * jumps, without touching the machine's clock or CLOCK_MONOTONIC.
 *
 * fake(t) = base + (t - base) * rate + offset, where t is the real CLOCK_REALTIME, base is the
 * real time when the process started, and "rate offset" (two numbers, seconds) are read from
 * the file named by IRONLOCK_CHAOS_CLOCK_FILE at most every 10 ms of monotonic time (a missing
 * or unreadable file means "1 0"). Overrides clock_gettime(CLOCK_REALTIME*), gettimeofday and
 * time; every other clock passes through to the real clock_gettime.
 *
 * Build: cc -shared -fPIC -O2 -o clockshim.so clockshim.c -ldl -lpthread
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*cgt_fn)(clockid_t, struct timespec *);

static cgt_fn real_cgt;
/* a copy: redis-server's setproctitle() overwrites the original environment strings */
static char clock_file_buf[4096];
static const char *clock_file;
static double base_real = -1.0;
static volatile double rate = 1.0;
static volatile double offset = 0.0;
static double last_read = -1.0;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static double read_clock(clockid_t c) {
    struct timespec ts;
    if (!real_cgt) {
        real_cgt = (cgt_fn)dlsym(RTLD_NEXT, "clock_gettime");
    }
    real_cgt(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((constructor)) static void shim_init(void) {
    base_real = read_clock(CLOCK_REALTIME);
    const char *p = getenv("IRONLOCK_CHAOS_CLOCK_FILE");
    size_t i;
    if (!p) {
        return;
    }
    for (i = 0; p[i] && i + 1 < sizeof clock_file_buf; i++) {
        clock_file_buf[i] = p[i];
    }
    clock_file_buf[i] = '\0';
    clock_file = clock_file_buf;
}

/* Re-reads the control file; called with `mu` held. Uses only open/read (no malloc). */
static void reload(double real, double mono) {
    char buf[128];
    int fd;
    ssize_t n;
    char *end;
    double r, o;
    if (!clock_file || (last_read >= 0 && mono - last_read < 0.01)) {
        return;
    }
    last_read = mono;
    fd = open(clock_file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return;
    }
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) {
        return;
    }
    buf[n] = '\0';
    r = strtod(buf, &end);
    if (end == buf) {
        return;
    }
    o = strtod(end, NULL);
    /* a rate change takes effect from now on (the fake clock stays continuous) */
    if (r != rate) {
        o += (real - base_real) * (rate - r);
        rate = r;
    }
    offset = o; /* the file's offset is absolute */
}

static double fake_now(void) {
    double real = read_clock(CLOCK_REALTIME);
    if (pthread_mutex_trylock(&mu) == 0) {
        reload(real, read_clock(CLOCK_MONOTONIC));
        pthread_mutex_unlock(&mu);
    }
    if (base_real < 0) {
        base_real = real;
    }
    return base_real + (real - base_real) * rate + offset;
}

int clock_gettime(clockid_t c, struct timespec *ts) {
    if (c == CLOCK_REALTIME || c == CLOCK_REALTIME_COARSE) {
        double t = fake_now();
        ts->tv_sec = (time_t)t;
        ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
        return 0;
    }
    if (!real_cgt) {
        real_cgt = (cgt_fn)dlsym(RTLD_NEXT, "clock_gettime");
    }
    return real_cgt(c, ts);
}

int gettimeofday(struct timeval *tv, void *tz) {
    double t = fake_now();
    (void)tz;
    tv->tv_sec = (time_t)t;
    tv->tv_usec = (suseconds_t)((t - (double)tv->tv_sec) * 1e6);
    return 0;
}

time_t time(time_t *out) {
    time_t t = (time_t)fake_now();
    if (out) {
        *out = t;
    }
    return t;
}
