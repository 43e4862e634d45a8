/* ironlock quick start in C: take a lock on three Redis nodes, work, release.
 * Build: cc basic.c $(pkg-config --cflags --libs ironlock) -o basic
 * Run:   ./basic redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003 */
#include <stdio.h>

#include <ironlock.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s REDIS_URL...\n", argv[0]);
        return 2;
    }
    ironlock_config *config = ironlock_config_new();
    for (int i = 1; i < argc; i++) ironlock_config_add_node(config, argv[i]);
    /* Fresh nodes (uptime 0) would sit out the restart quarantine (max_ttl + drift + 1 s).
     * Switch it off only for nodes that persist with appendfsync always, or for a demo. */
    ironlock_config_set_restart_quarantine(config, false);

    ironlock_manager *manager = NULL;
    ironlock_status status = ironlock_manager_new(config, &manager);
    ironlock_config_free(config); /* the manager keeps its own copy */
    if (status != IRONLOCK_OK) {
        fprintf(stderr, "manager: %s: %s\n", ironlock_status_str(status), ironlock_last_error());
        return 1;
    }

    const char *resources[] = {"invoice:42"};
    ironlock_acquire_options options = {0}; /* defaults */
    options.fencing = true;
    ironlock_lock *lock = NULL;
    status = ironlock_acquire(manager, resources, 1, 10000 /* ttl ms */, &options, &lock);
    if (status != IRONLOCK_OK) {
        fprintf(stderr, "acquire: %s: %s\n", ironlock_status_str(status), ironlock_last_error());
        ironlock_manager_free(manager);
        return 1;
    }
    uint64_t fence = 0;
    ironlock_lock_fence(lock, &fence);
    printf("locked invoice:42 for %llu ms (fence %llu, %zu nodes voted)\n",
           (unsigned long long)ironlock_lock_validity_ms(lock), (unsigned long long)fence,
           ironlock_last_report_node_count());

    /* ... the critical section: keep it shorter than ironlock_lock_validity_ms(lock) ... */

    bool held = false; /* false if the lock had expired or been taken over before the release */
    status = ironlock_release_held(lock, &held); /* explicit: ironlock_lock_free never releases */
    printf("released (still held until release: %s)\n", held ? "yes" : "no");
    ironlock_lock_free(lock);
    ironlock_manager_free(manager);
    return status == IRONLOCK_OK ? 0 : 1;
}
