"""Every rank records its pid, says it is ready, and sleeps.  argv: PID_DIR"""

import os
import sys
import time

rank = int(os.environ["JAXMG_PROCESS_ID"])
with open(os.path.join(sys.argv[1], f"rank{rank}.pid"), "w") as f:
    f.write(str(os.getpid()))
print("ready", flush=True)
time.sleep(120)
