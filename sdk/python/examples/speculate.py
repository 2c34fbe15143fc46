"""Speculate: race three fixes; the first that makes the check pass commits, the slow
one is killed (its `sleep` dies with it) and aborted."""

import os

from _demo import project, show

from arbor.patterns import Speculate


def write(a, text):
    with open(os.path.join(a, "answer.txt"), "w") as f:
        f.write(text)


def quick_fix(a):
    write(a, "quick")
    return a.run("grep -q quick answer.txt").exit_code == 0


def slow_fix(a):
    a.run("sleep 30")  # killed when quick_fix wins
    write(a, "slow")


def wrong_fix(a):
    write(a, "wrong")
    return False


with project({"answer.txt": "unset"}) as (tree, base):
    show(Speculate([slow_fix, quick_fix, wrong_fix], timeout=20)(tree), base, "answer.txt")
