package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// record is a branch as persisted, under its name in bucketBranches.
type record struct {
	ID       uint64   `json:"id"`
	Name     string   `json:"name"`
	Parent   string   `json:"parent,omitempty"`
	Chain    chainIDs `json:"chain"`
	ForkHead uint64   `json:"fork_head,omitempty"`
	ForkGen  uint64   `json:"fork_gen,omitempty"`
	Snap     uint64   `json:"snap,omitempty"`
	ForkDep  int      `json:"fork_depth,omitempty"`
	Gen      uint64   `json:"gen,omitempty"`
	Stale    bool     `json:"stale,omitempty"`
	Quota    int64    `json:"quota,omitempty"`
	// Base, if not 0, is the ID of the branch whose chain's first ForkDep
	// layers begin this one's, and Chain holds only the layers above them
	// (see Store.chainBase): a tree 64 deep holds 64 short records rather
	// than chains of 1 to 64 layers each, whose bytes every transaction
	// touching the bucket had to page through.
	Base uint64 `json:"-"`
}

// recordV1 starts a binary record. Records of earlier versions are JSON
// objects, starting with '{'. A record is written at every fork, commit and
// abort; JSON was a quarter of a commit's time in the store, and its bytes
// (a record ~200, with field names) made a tree's bucket span more pages,
// each of which a transaction that touches it rewrites.
const recordV1 = 1

// appendRecord appends r's binary encoding to buf: the version byte, then
// varints of the fields in order, the strings and the chain prefixed by
// their lengths. The name is the record's key and is not repeated.
func appendRecord(buf []byte, r *record) []byte {
	buf = append(buf, recordV1)
	buf = binary.AppendUvarint(buf, r.ID)
	buf = binary.AppendUvarint(buf, uint64(len(r.Parent)))
	buf = append(buf, r.Parent...)
	buf = binary.AppendUvarint(buf, r.ForkHead)
	buf = binary.AppendUvarint(buf, r.ForkGen)
	buf = binary.AppendUvarint(buf, r.Snap)
	buf = binary.AppendUvarint(buf, uint64(r.ForkDep))
	buf = binary.AppendUvarint(buf, r.Gen)
	var flags uint64
	if r.Stale {
		flags |= flagStale
	}
	if r.Base != 0 {
		flags |= flagBase
	}
	buf = binary.AppendUvarint(buf, flags)
	if r.Base != 0 {
		buf = binary.AppendUvarint(buf, r.Base)
	}
	buf = binary.AppendVarint(buf, r.Quota)
	buf = binary.AppendUvarint(buf, uint64(len(r.Chain)))
	return appendChain(buf, r.Chain)
}

// The flags of a binary record.
const (
	flagStale = 1 << iota
	flagBase  // Base follows the flags
)

var errRecord = errors.New("truncated or malformed record")

// decodeRecord reads the record stored under name, in either encoding.
func decodeRecord(name string, v []byte) (record, error) {
	var r record
	if len(v) == 0 {
		return r, errRecord
	}
	if v[0] == '{' {
		err := json.Unmarshal(v, &r)
		return r, err
	}
	if v[0] != recordV1 {
		return r, fmt.Errorf("record version %d: written by a newer arbor", v[0])
	}
	d := decoder{buf: v[1:]}
	r.Name = name
	r.ID = d.uvarint()
	r.Parent = d.str()
	r.ForkHead = d.uvarint()
	r.ForkGen = d.uvarint()
	r.Snap = d.uvarint()
	r.ForkDep = d.int()
	r.Gen = d.uvarint()
	flags := d.uvarint()
	r.Stale = flags&flagStale != 0
	if flags&flagBase != 0 {
		if r.Base = d.uvarint(); r.Base == 0 {
			return r, errRecord
		}
	}
	r.Quota = d.varint()
	n := d.int()
	if d.err != nil {
		return r, d.err
	}
	if n > len(d.buf) { // every delta takes at least a byte
		return r, errRecord
	}
	chain, rest, err := decodeChain(d.buf, n)
	if err != nil {
		return r, err
	}
	if len(rest) != 0 || flags&^(flagStale|flagBase) != 0 {
		return r, errRecord
	}
	r.Chain = chain
	return r, nil
}

// decoder reads varints from buf, remembering the first error.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Uvarint(d.buf)
	if n <= 0 || n != uvarintLen(x) {
		d.err = errRecord
		return 0
	}
	d.buf = d.buf[n:]
	return x
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Varint(d.buf)
	if n <= 0 || n != varintLen(x) {
		d.err = errRecord
		return 0
	}
	d.buf = d.buf[n:]
	return x
}

// int is a uvarint that must fit a non-negative int.
func (d *decoder) int() int {
	x := d.uvarint()
	if x > math.MaxInt32 {
		d.err = errRecord
		return 0
	}
	return int(x)
}

func (d *decoder) str() string {
	n := d.int()
	if d.err != nil {
		return ""
	}
	if n > len(d.buf) {
		d.err = errRecord
		return ""
	}
	s := string(d.buf[:n])
	d.buf = d.buf[n:]
	return s
}

// uvarintLen is the length of x's shortest encoding: a record holds only
// that one (an overlong varint is malformed).
func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

func varintLen(x int64) int { return uvarintLen(uint64(x)<<1 ^ uint64(x>>63)) }
