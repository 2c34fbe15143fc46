package store

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
)

var sampleRecords = []record{
	{ID: 1, Name: "a"},
	{ID: 7, Name: "try-b", Parent: "main", Chain: chainIDs{3}, Snap: 3, ForkGen: 2},
	{ID: 90, Name: "deep", Parent: "mid", Chain: chainIDs{3, 7, 9, 10}, ForkHead: 9, ForkGen: 4, ForkDep: 3, Gen: 12, Stale: true, Quota: 1 << 30},
	{ID: 91, Name: "deeper", Parent: "deep", Chain: chainIDs{12}, ForkDep: 4, Base: 90},
	{ID: 1 << 40, Name: "odd \x01 name {", Parent: "p@q", Chain: chainIDs{90, 5, 1 << 40, 2}, Quota: -1},
}

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range sampleRecords {
		v := appendRecord(nil, &r)
		got, err := decodeRecord(r.Name, v)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if len(r.Chain) == 0 {
			r.Chain = nil
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("%+v -> %x -> %+v", r, v, got)
		}
		// Every strict prefix is refused, never misread.
		for i := range len(v) - 1 {
			if _, err := decodeRecord(r.Name, v[:i]); err == nil {
				t.Fatalf("%+v: the prefix %x of %x decoded", r, v[:i], v)
			}
		}
		if _, err := decodeRecord(r.Name, append(v, 0)); err == nil {
			t.Fatalf("%+v: a trailing byte was accepted", r)
		}
	}
	if _, err := decodeRecord("x", []byte{9, 1}); err == nil {
		t.Fatal("an unknown version decoded")
	}
}

// TestRecordLegacy reads the JSON records of earlier versions: the chain as
// base64 deltas, and before that as an array of numbers.
func TestRecordLegacy(t *testing.T) {
	for _, want := range sampleRecords {
		type legacy struct {
			record
			Chain string `json:"chain"`
		}
		data, err := json.Marshal(legacy{record: want, Chain: base64.RawStdEncoding.EncodeToString(appendChain(nil, want.Chain))})
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRecord(want.Name, data)
		if err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if !slices.Equal(got.Chain, want.Chain) || got.ID != want.ID || got.Parent != want.Parent || got.Stale != want.Stale {
			t.Fatalf("%s -> %+v", data, got)
		}
	}
	r, err := decodeRecord("n", []byte(`{"id":4,"name":"n","chain":[4,5,6]}`))
	if err != nil || !slices.Equal(r.Chain, chainIDs{4, 5, 6}) {
		t.Fatalf("the oldest encoding: %v %v", r.Chain, err)
	}
	for _, bad := range []string{`{"chain":"!!"}`, `{"chain":"/w"}`, `{"chain":7}`, `{`} {
		if _, err := decodeRecord("n", []byte(bad)); err == nil {
			t.Fatalf("%s: no error", bad)
		}
	}
}

// FuzzDecodeRecord: no input panics, and what decodes encodes back to the
// same bytes (a binary record has one encoding).
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range sampleRecords {
		f.Add(appendRecord(nil, &r))
	}
	f.Add([]byte(`{"id":4,"chain":[4,5,6]}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := decodeRecord("k", v)
		if err != nil || v[0] != recordV1 {
			return
		}
		if again := appendRecord(nil, &r); !slices.Equal(again, v) {
			t.Fatalf("%x -> %+v -> %x", v, r, again)
		}
	})
}

// TestOpenLegacyRecords opens a store whose records an earlier version
// wrote (JSON): every branch reads as before, and the records written from
// then on are binary, next to the JSON ones until those are rewritten.
func TestOpenLegacyRecords(t *testing.T) {
	f := newFixture(t, map[string]string{"a": "base"})
	f.fork(Main, "x")
	f.write(f.br("x"), "a", "x1")
	f.fork("x", "y", "z")
	f.write(f.br("y"), "b", "y1")
	f.write(f.br("z"), "a", "z1")
	want := map[string]record{}
	for _, n := range []string{"x", "y", "z"} {
		want[n] = wholeRecord(f.s, f.br(n))
	}
	if err := f.s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(f.dir, "meta.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		bb := tx.Bucket(bucketBranches)
		for n, r := range want {
			type legacy struct {
				record
				Chain string `json:"chain"`
			}
			v, err := json.Marshal(legacy{record: r, Chain: base64.RawStdEncoding.EncodeToString(appendChain(nil, r.Chain))})
			if err != nil {
				return err
			}
			if err := bb.Put([]byte(n), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	f.open()
	for n, r := range want {
		if got := wholeRecord(f.s, f.br(n)); !reflect.DeepEqual(got, r) {
			t.Fatalf("%s: %+v, want %+v", n, got, r)
		}
	}
	if got := f.read(f.br("y"), "a"); got != "x1" {
		t.Fatalf("y/a = %q", got)
	}
	f.write(f.br("y"), "c", "y2") // rewrites nothing yet: y's record is JSON still
	f.fork("y", "w")              // y's record is rewritten, binary; w's is new
	f.reopen()
	if got := f.read(f.br("w"), "c"); got != "y2" {
		t.Fatalf("w/c = %q", got)
	}
	if got := f.read(f.br("z"), "a"); got != "z1" {
		t.Fatalf("z/a = %q", got)
	}
	if _, err := f.s.Commit("w", false); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	if got := f.read(f.br("y"), "c"); got != "y2" {
		t.Fatalf("after the commit, y/c = %q", got)
	}
}

// wholeRecord is b's record with its chain whole, as earlier versions wrote.
func wholeRecord(s *Store, b *Branch) record {
	r := s.recordOf(b)
	r.Base, r.Chain = 0, make(chainIDs, len(b.chain))
	for i, l := range b.chain {
		r.Chain[i] = l.id
	}
	return r
}

// TestRecordsRefer: a live branch's record refers to its parent's for the
// chain it inherited; a stale one's holds its chain whole; both read back.
func TestRecordsRefer(t *testing.T) {
	f := newFixture(t, map[string]string{"a": "base"})
	parent := chainOf(f, 6, true)
	f.fork(parent, "x", "y")
	f.write(f.br("x"), "a", "x")
	f.write(f.br("y"), "a", "y")
	f.fork("y", "y1")
	f.commit("x", false) // into level-6: y and y1 stale
	before := chainsOf(f.s)
	if err := f.s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(f.dir, "meta.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	recs := map[string]record{}
	db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBranches).ForEach(func(k, v []byte) error {
			r, err := decodeRecord(string(k), v)
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			recs[string(k)] = r
			return nil
		})
	})
	db.Close()
	for i := 2; i <= 6; i++ {
		n := fmt.Sprintf("level-%d", i)
		if r := recs[n]; r.Base != recs[fmt.Sprintf("level-%d", i-1)].ID || len(r.Chain) >= len(before[n]) {
			t.Fatalf("%s: %+v, want a reference to its parent's chain", n, r)
		}
	}
	if r := recs["level-1"]; r.Base != 0 {
		t.Fatalf("a child of main refers: %+v", r)
	}
	for _, n := range []string{"y", "y1"} {
		if r := recs[n]; !r.Stale || r.Base != 0 || len(r.Chain) != len(before[n]) {
			t.Fatalf("stale %s: %+v, want its chain whole", n, r)
		}
	}
	f.open()
	if after := chainsOf(f.s); !maps.EqualFunc(before, after, slices.Equal) {
		t.Fatalf("chains changed at reopen:\n%v\n%v", before, after)
	}
	if got := f.read(f.br(parent), "a"); got != "x" {
		t.Fatalf("%s/a = %q after the commit", parent, got)
	}
}

// TestOpenRefusesBadRecords: records that decode but cannot be a branch
// fail Open with the branch named, rather than a panic at a later verb.
func TestOpenRefusesBadRecords(t *testing.T) {
	whole := func(r record) []byte { return appendRecord(nil, &r) }
	for name, tc := range map[string]struct {
		key string
		v   []byte
	}{
		"fork depth past the chain":  {"c", whole(record{ID: 100, Parent: "p", Chain: chainIDs{5}, ForkDep: 2})},
		"negative fork depth (JSON)": {"c", []byte(`{"id":100,"name":"c","parent":"p","chain":[3,5],"fork_depth":-1}`)},
		"a record for main":          {"main", whole(record{ID: 100, Parent: "p", Chain: chainIDs{5}})},
		"JSON named not as its key":  {"c", []byte(`{"id":100,"name":"d","parent":"p","chain":[3,5]}`)},
		"a missing base":             {"c", whole(record{ID: 100, Parent: "p", Chain: chainIDs{5}, ForkDep: 1, Base: 77})},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, map[string]string{"a": "a0"})
			f.fork(Main, "p")
			f.write(f.br("p"), "a", "p")
			f.fork("p", "c")
			if err := f.s.Close(); err != nil {
				t.Fatal(err)
			}
			f.s = nil
			db, err := bolt.Open(filepath.Join(f.dir, "meta.db"), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketBranches).Put([]byte(tc.key), tc.v) })
			db.Close()
			if err != nil {
				t.Fatal(err)
			}
			s, err := Open(Config{Dir: f.dir, Base: f.base})
			if err == nil {
				s.Close()
				t.Fatal("Open accepted the record")
			}
			t.Log(err)
		})
	}
}

// TestDecodeRecordLengths: a length past what int32 holds is refused on
// every platform (int is 32 bits on some).
func TestDecodeRecordLengths(t *testing.T) {
	v := []byte{recordV1}
	v = binary.AppendUvarint(v, 5)
	v = binary.AppendUvarint(v, 1<<31) // the parent's length
	v = append(v, 0)
	if _, err := decodeRecord("x", v); err == nil {
		t.Fatal("decoded")
	}
}
