package store

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// chainIDs are the layer IDs of a branch's chain, bottom first, persisted
// as one base64 string of zigzag varint deltas (a chain 64 deep is ~100
// bytes instead of ~300 of JSON numbers, and cheaper to encode: a record
// is written at every fork and commit). A JSON array of numbers, the
// encoding of earlier versions, is read too.
type chainIDs []uint64

func (c chainIDs) MarshalJSON() ([]byte, error) {
	buf := make([]byte, 0, len(c)*2)
	var prev uint64
	for _, id := range c {
		buf = binary.AppendVarint(buf, int64(id-prev))
		prev = id
	}
	out := make([]byte, 0, base64.RawStdEncoding.EncodedLen(len(buf))+2)
	out = append(out, '"')
	out = base64.RawStdEncoding.AppendEncode(out, buf)
	return append(out, '"'), nil
}

func (c *chainIDs) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '[' {
		var ids []uint64
		if err := json.Unmarshal(data, &ids); err != nil {
			return err
		}
		*c = ids
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("chain: %w", err)
	}
	buf, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("chain: %w", err)
	}
	var ids []uint64
	var prev uint64
	for len(buf) > 0 {
		d, n := binary.Varint(buf)
		if n <= 0 {
			return fmt.Errorf("chain: bad varint")
		}
		prev += uint64(d)
		ids = append(ids, prev)
		buf = buf[n:]
	}
	*c = ids
	return nil
}
