"""BestOfN: eight attempts at a parameter, each scored; the best one commits."""

import os

from _demo import project, show

from arbor.patterns import BestOfN


def attempt(a):
    value = (a.index * 37) % 11  # a scripted policy: attempt i proposes this
    with open(os.path.join(a, "param.txt"), "w") as f:
        f.write(str(value))
    return True, float(-abs(value - 7))  # (ok, score): closer to 7 is better


with project({"param.txt": "0"}) as (tree, base):
    show(BestOfN(attempt, n=7)(tree), base, "param.txt")
