package fusemount

import (
	"os"
	"strings"
	"testing"
)

// EnableURing leaves the switch on (as root) or says why it is off.
func TestEnableURing(t *testing.T) {
	on, changed, err := EnableURing()
	b, rerr := os.ReadFile(URingParam)
	switch {
	case rerr != nil:
		if on || err != ErrNoURing {
			t.Fatalf("no %s, yet EnableURing = %v, %v", URingParam, on, err)
		}
	case os.Geteuid() == 0:
		if !on || err != nil || strings.TrimSpace(string(b)) != "Y" {
			t.Fatalf("as root: EnableURing = %v, %v, %v; the switch reads %q", on, changed, err, b)
		}
	default:
		if on != (strings.TrimSpace(string(b)) == "Y") {
			t.Fatalf("EnableURing says on=%v (%v); the switch reads %q", on, err, b)
		}
	}
}
