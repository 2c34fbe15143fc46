// Package facetest is the conformance suite of Arbor's API faces: the same
// scenarios run over JSON-lines and over HTTP against Fake, an in-memory
// engine (Run), or against any real handler such as the daemon's (RunTarget).
// Only tests import it.
//
// Fake implements the faces' Handler interface (Do and Watch) with a small
// tree: first-commit-wins by fork generation, protection refusing prune,
// suspend and resume, and an event stream. It is a test double, not a model
// of the engine's budgets.
package facetest
