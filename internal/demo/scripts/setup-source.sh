# setup-source.sh: the source agent's work before the fork, step by step as in
# forkd's recipes/coding-agent-fork/setup-source.sh. Its working directory is the
# source's workspace: /tmp/workspace in the node's sandbox (jail), or the node's
# files for a host process (dir); PYTHON and VENDORED_BYTES come from the demo.
set -eu
: "${PYTHON:=python3}"
# __pycache__ is part of the evidence: never let the environment turn it off or move it.
unset PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX
: "${VENDORED_BYTES:=52428800}"

# 1. A clean workspace.
rm -rf mathy tests __pycache__ build-artifacts .agent-log
mkdir -p mathy tests build-artifacts

# 2. The package, with its planted bug: add returns a - b.
cat > mathy/__init__.py <<'PY'
"""mathy: a tiny package with a planted bug."""


def add(a, b):
    return a - b


def double(x):
    return x * 2
PY

# 3. Four unittest tests. The workspace is found from this file's own path, so
# the tests run the same at every node's path.
cat > tests/test_add.py <<'PY'
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mathy import add, double  # noqa: E402


class AddTests(unittest.TestCase):
    def test_add_positive(self):
        self.assertEqual(add(2, 3), 5)

    def test_add_zero(self):
        self.assertEqual(add(0, 0), 0)

    def test_add_negative(self):
        self.assertEqual(add(-1, 1), 0)

    def test_double(self):
        self.assertEqual(double(5), 10)


if __name__ == "__main__":
    unittest.main()
PY

# 4. Expensive build artifacts: random bytes that no prompt could carry.
head -c "$VENDORED_BYTES" /dev/urandom > build-artifacts/vendored.bin

# 5. Run the tests (two fail); this populates __pycache__.
echo "== unittest (source, baseline)" >> .agent-log
rc=0
"$PYTHON" -m unittest tests.test_add -v >> .agent-log 2>&1 || rc=$?
echo "== unittest exit $rc" >> .agent-log

# 6. The file list and the baseline code.
echo "== files" >> .agent-log
find . -type f ! -name .agent-log | LC_ALL=C sort >> .agent-log
echo "== baseline mathy/__init__.py" >> .agent-log
cat mathy/__init__.py >> .agent-log

# 7. forkd prints a marker and sleeps for the host to branch; here the script
# just ends and the demo forks.
echo ready_to_branch
