"""`python scripts/gpu/launch.py -n N script.py ...`: jaxmg.launch, usable even while the jaxmg
package itself does not import (the launcher module has no dependency on the rest of it)."""

import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
try:
    import jaxmg  # noqa: F401
except Exception:  # noqa: BLE001
    for name in [m for m in sys.modules if m == "jaxmg" or m.startswith("jaxmg.")]:
        del sys.modules[name]
    pkg = types.ModuleType("jaxmg")
    pkg.__path__ = [str(ROOT / "jaxmg")]
    sys.modules["jaxmg"] = pkg
from jaxmg import launch  # noqa: E402

sys.exit(launch.main())
