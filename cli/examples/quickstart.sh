#!/bin/sh
# The command line's quick start (docs/src/start/cli.md). cli/tests/example.rs runs it against
# three fresh nodes.
set -e
export IRONLOCK_NODES="${IRONLOCK_NODES:-redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003}"
# A node that restarted less than --max-ttl (60 s) ago does not count toward the quorum. The
# tests start fresh nodes, so they set IRONLOCK_QUARANTINE=off.
Q=""
if [ "${IRONLOCK_QUARANTINE:-on}" = off ]; then Q=--no-restart-quarantine; fi

# 1. Are the nodes up, and do their votes count?
ironlock check $Q

# 2. Run a command under the lock, waiting up to 10 s for it. The lock is extended while the
#    command runs and released when it exits; the command sees the lock in its environment.
ironlock run $Q --ttl 10 --wait 10 backup:nightly -- \
  sh -c 'echo "holding $IRONLOCK_RESOURCE with token $IRONLOCK_TOKEN"'

# 3. While it is held, a second run with -n gives up at once with the -E exit code.
ironlock run $Q --fencing backup:nightly -- sh -c "
  echo \"fencing token \$IRONLOCK_FENCE\"
  ironlock run $Q -n -E 3 backup:nightly -- echo never printed || echo \"busy: exit code \$?\""

# 4. Nobody holds it now.
ironlock status $Q backup:nightly
