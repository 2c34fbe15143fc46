# rewrite.sh: rewrite add from scratch, with type checks.
set -eu
: "${PYTHON:=python3}"
# __pycache__ is part of the evidence: never let the environment turn it off or move it.
unset PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX
echo "== strategy rewrite: add rewritten with an isinstance check" >> .agent-log
cat > mathy/__init__.py <<'PY'
"""mathy: a tiny package; add rewritten with type checks."""

import numbers


def add(a, b):
    """Return a + b. Both must be numbers; bool is refused."""
    for name, value in (("a", a), ("b", b)):
        if isinstance(value, bool) or not isinstance(value, numbers.Number):
            raise TypeError(
                "add: %s must be a number, not %s" % (name, type(value).__name__)
            )
    return a + b


def double(x):
    return x * 2
PY
echo "== unittest (rewrite)" >> .agent-log
rc=0
"$PYTHON" -m unittest tests.test_add -v >> .agent-log 2>&1 || rc=$?
echo "== unittest exit $rc" >> .agent-log
