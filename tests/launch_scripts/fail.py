"""Rank 1 exits with status 3; the others record their pid and sleep.

argv: PID_DIR [--ignore-sigterm]
"""

import os
import signal
import sys
import time

rank = int(os.environ["JAXMG_PROCESS_ID"])
pid_dir = sys.argv[1]
if "--ignore-sigterm" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(os.path.join(pid_dir, f"rank{rank}.pid"), "w") as f:
    f.write(str(os.getpid()))
print("started", flush=True)
if rank == 1:
    time.sleep(0.5)  # let the others start
    sys.exit(3)
time.sleep(120)
