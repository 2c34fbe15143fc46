package testenv

import "testing"

func TestRequired(t *testing.T) {
	for _, c := range []struct {
		env, capability string
		want            bool
	}{
		{"", Root, false},
		{"all", FUSE, true},
		{"root", Root, true},
		{"root", FUSE, false},
		{"fuse, python3", Python, true},
		{"fuse,python3", Root, false},
		{"1", Root, false}, // not a capability: names only
	} {
		t.Setenv(Env, c.env)
		if got := Required(c.capability); got != c.want {
			t.Errorf("%s=%q: Required(%s) = %v, want %v", Env, c.env, c.capability, got, c.want)
		}
	}
}
