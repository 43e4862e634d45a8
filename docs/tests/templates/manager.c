/* Wraps a ```c,setup-manager block: `manager` over the nodes given as arguments (fresh test
 * nodes, so the restart quarantine is off); the block may `return 1` on failure. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <ironlock.h>

static int example(ironlock_manager *manager) {
    // EXAMPLE
    return 0;
}

int main(int argc, char **argv) {
    ironlock_config *config = ironlock_config_new();
    for (int i = 1; i < argc; i++) ironlock_config_add_node(config, argv[i]);
    ironlock_config_set_restart_quarantine(config, false);
    ironlock_manager *manager = NULL;
    ironlock_status status = ironlock_manager_new(config, &manager);
    ironlock_config_free(config);
    if (status != IRONLOCK_OK) {
        fprintf(stderr, "manager: %s: %s\n", ironlock_status_str(status), ironlock_last_error());
        return 1;
    }
    int rc = example(manager);
    ironlock_manager_free(manager);
    return rc;
}
