# minimal.sh: the smallest fix, one sed.
set -eu
: "${PYTHON:=python3}"
# __pycache__ is part of the evidence: never let the environment turn it off or move it.
unset PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX
echo "== strategy minimal: sed 'return a - b' -> 'return a + b'" >> .agent-log
sed -i 's/return a - b/return a + b/' mathy/__init__.py
echo "== unittest (minimal)" >> .agent-log
rc=0
"$PYTHON" -m unittest tests.test_add -v >> .agent-log 2>&1 || rc=$?
echo "== unittest exit $rc" >> .agent-log
