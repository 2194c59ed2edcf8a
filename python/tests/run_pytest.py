# SPDX-License-Identifier: MIT
"""ctest's entry to the python tests: pytest on this folder, or exit 77
(ctest SKIP) when this interpreter has no numpy or no pytest, saying which.
Usage: python3 run_pytest.py TESTS_DIR [pytest args...]"""
import sys

SKIP = 77


def main():
    missing = []
    for mod in ("numpy", "pytest"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        print("SKIP: %s cannot import %s (Debian: apt-get install %s; or "
              "configure with -DFA_PYTHON=/path/to/python3)" % (
                  sys.executable, " and ".join(missing),
                  " ".join("python3-" + m for m in missing)))
        return SKIP
    import pytest
    # -p no:cacheprovider: no .pytest_cache written into the source tree.
    return pytest.main(["-q", "-rs", "-p", "no:cacheprovider"] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
