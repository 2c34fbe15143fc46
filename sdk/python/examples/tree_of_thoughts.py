"""TreeOfThoughts: two levels of strategies; each level's best commits into a root
branch, the next level grows from it, and the root commits at the end."""

import os

from _demo import project, show

from arbor.patterns import TreeOfThoughts


def step(word):
    def strategy(a):
        with open(os.path.join(a, "plan.txt"), "a") as f:
            f.write(word + " ")
    return strategy


def evaluate(a):
    with open(os.path.join(a, "plan.txt")) as f:
        return float(len(f.read()))  # the longer plan wins, here


def expand(root, depth):
    return [step("test"), step("refactor-and-test")]


with project({"plan.txt": ""}) as (tree, base):
    o = TreeOfThoughts([step("read"), step("read-docs")], evaluate=evaluate, expand=expand, max_depth=2)(tree)
    show(o, base, "plan.txt")
