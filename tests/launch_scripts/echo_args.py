"""Print the rank and argv; end stderr without a newline."""

import os
import sys

print(
    f"rank={os.environ['JAXMG_PROCESS_ID']} of {os.environ['JAXMG_NUM_PROCESSES']} "
    f"platform={os.environ['JAXMG_PLATFORM']} args={sys.argv[1:]}"
)
sys.stderr.write("no newline")
