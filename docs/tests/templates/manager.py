# Wraps a ```python,setup-manager block: `nodes` and `manager` as the page's earlier examples
# make them (fresh test nodes, so the restart quarantine is off).
import os

import ironlock

nodes = os.environ["IRONLOCK_NODES"].split(",")
manager = ironlock.LockManager(nodes, restart_quarantine=False)
# EXAMPLE
manager.close()
