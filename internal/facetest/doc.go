// Package facetest is the conformance suite of Arbor's API faces: the same
// scenarios run over JSON-lines and over HTTP (and through the Go client)
// against the real engine over the directory-copy files layer (Run,
// NewEngine: no FUSE, no root), or against any real handler such as the
// daemon's (RunTarget). Only tests import it.
package facetest
