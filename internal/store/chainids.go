package store

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// chainIDs are the layer IDs of a branch's chain, bottom first. A record
// holds them as zigzag varint deltas (appendChain): a chain 64 deep takes
// about 100 bytes. Records of earlier versions were JSON, with the same
// deltas as one base64 string or, before that, an array of numbers; both
// are still read (UnmarshalJSON).
type chainIDs []uint64

// appendChain appends c to buf as zigzag varint deltas.
func appendChain(buf []byte, c chainIDs) []byte {
	var prev uint64
	for _, id := range c {
		buf = binary.AppendVarint(buf, int64(id-prev))
		prev = id
	}
	return buf
}

var errChain = errors.New("chain: bad varint")

// decodeChain reads n deltas of appendChain from buf (every delta in buf
// for n < 0) and returns the IDs and the bytes after them.
func decodeChain(buf []byte, n int) (chainIDs, []byte, error) {
	var ids chainIDs
	if n > 0 {
		ids = make(chainIDs, 0, n)
	}
	var prev uint64
	for i := 0; n < 0 && len(buf) > 0 || i < n; i++ {
		d, k := binary.Varint(buf)
		if k <= 0 || k != varintLen(d) {
			return nil, nil, errChain
		}
		prev += uint64(d)
		ids = append(ids, prev)
		buf = buf[k:]
	}
	return ids, buf, nil
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
	ids, _, err := decodeChain(buf, -1)
	if err != nil {
		return err
	}
	*c = ids
	return nil
}
