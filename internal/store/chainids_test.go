package store

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestChainIDsRoundTrip(t *testing.T) {
	for _, c := range []chainIDs{nil, {1}, {3, 7, 9, 10}, {90, 5, 1 << 40, 2}} {
		data, err := json.Marshal(record{Chain: c})
		if err != nil {
			t.Fatal(err)
		}
		var r record
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if !slices.Equal(r.Chain, c) {
			t.Fatalf("%v -> %s -> %v", c, data, r.Chain)
		}
	}
	var r record
	if err := json.Unmarshal([]byte(`{"chain":[4,5,6]}`), &r); err != nil || !slices.Equal(r.Chain, chainIDs{4, 5, 6}) {
		t.Fatalf("the older encoding: %v %v", r.Chain, err)
	}
	for _, bad := range []string{`{"chain":"!!"}`, `{"chain":"/w"}`, `{"chain":7}`} {
		if err := json.Unmarshal([]byte(bad), &r); err == nil {
			t.Fatalf("%s: no error", bad)
		}
	}
}
