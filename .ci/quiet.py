"""How long kjit's set-up and test commands may go without printing a line: the one number behind the
promise that README.md, docs/install.md and .ci/setup.sh make ("a line at least every 20 s"), kept by
.ci/phase.py (each set-up phase), .ci/test_report.py (ctest and pytest) and checked by CI (.ci/nonroot.sh
runs the demo's set-up under `phase.py --watch`). tests/python/test_setup_promises.py checks that the
pages state this number and that the scripts keep it.

Standard library only, and nothing but constants: phase.py imports it with the system's python3, before
any environment exists.
"""

QUIET_S = 20  # the promise: never longer than this without a line
# The scripts look at the clock once a second (TICK_S) and a loaded machine (CI's 2 CPUs, both compiling)
# runs them late, so they speak after HEARTBEAT_S of silence: the promise holds with a tick and four seconds
# to spare.
TICK_S = 1.0
HEARTBEAT_S = QUIET_S - 5 * TICK_S
