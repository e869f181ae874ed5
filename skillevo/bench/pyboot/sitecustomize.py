"""skillevo's interpreter boot for the verify and oracle phases (on PYTHONPATH, read-only, outside the workspace).

With PYTHONSAFEPATH=1 nothing the agent wrote is on sys.path when the test runner is imported; the code
under test is appended here, after the standard library and site-packages, so a workspace file named like
the runner, one of its modules or a plugin (pytest.py, _pytest/, pluggy.py) can never stand in for it.
"""

import os
import sys

_code = os.environ.get("SKILLEVO_CODE_DIR")
if _code and _code not in sys.path:
    sys.path.append(_code)
