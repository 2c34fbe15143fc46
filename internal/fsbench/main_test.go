package fsbench

import (
	"os"
	"testing"
)

// TestMain serves an Arbor mount when re-executed as its server (NewArbor).
func TestMain(m *testing.M) {
	if os.Getenv(ServeEnv) != "" {
		os.Exit(Serve(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}
