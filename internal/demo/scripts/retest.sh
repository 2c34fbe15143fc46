# retest.sh: after the winner's commit, run the tests again in the source.
set -eu
: "${PYTHON:=python3}"
# __pycache__ is part of the evidence: never let the environment turn it off or move it.
unset PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX
echo "== unittest (source, after the commit of ${WINNER:-?})" >> .agent-log
rc=0
"$PYTHON" -m unittest tests.test_add -v >> .agent-log 2>&1 || rc=$?
echo "== unittest exit $rc" >> .agent-log
