"""Reflexion: retry in a fresh branch each time, with the critique of the last try."""

import os

from _demo import project, show

from arbor.patterns import Reflexion


def task(a, attempt, feedback):
    guess = 40 if feedback is None else int(feedback.split()[-1])
    with open(os.path.join(a, "guess.txt"), "w") as f:
        f.write(str(guess))
    return guess == 5


def critique(a):
    with open(os.path.join(a, "guess.txt")) as f:
        g = int(f.read())
    return f"{g} is too high; try {g // 2}"


with project({"guess.txt": "?"}) as (tree, base):
    show(Reflexion(task, max_retries=4, critique=critique)(tree), base, "guess.txt")
