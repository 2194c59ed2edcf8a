# SPDX-License-Identifier: MIT
# Run the tests against the package in this checkout (python/flashattn)
# unless PYTHONPATH already names one; FLASHATTN_LIBRARY picks the library
# (ctest sets it to the build tree's).
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
if not any(os.path.isdir(os.path.join(p, "flashattn"))
           for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p):
    sys.path.insert(0, os.path.dirname(here))
