package wire

import (
	"bytes"
	"errors"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	for _, m := range []*Msg{{Op: OpPing, ID: 1}, {Op: OpOut, ID: 2, Stream: "stdout", Data: []byte{0, 1, 2}}} {
		f, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(f)
	}
	r := NewReader(&buf)
	if m, err := r.Read(); err != nil || m.Op != OpPing || m.ID != 1 {
		t.Fatalf("%+v %v", m, err)
	}
	if m, err := r.Read(); err != nil || !bytes.Equal(m.Data, []byte{0, 1, 2}) {
		t.Fatalf("%+v %v", m, err)
	}
}

func TestMalformed(t *testing.T) {
	for name, in := range map[string]string{
		"magic":  "XXXX\x00\x00\x00\x02{}",
		"length": "ARB1\xff\xff\xff\xff",
		"json":   "ARB1\x00\x00\x00\x03{{{",
		"no op":  "ARB1\x00\x00\x00\x02{}",
	} {
		if _, err := NewReader(bytes.NewReader([]byte(in))).Read(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	if _, err := Encode(&Msg{Op: OpFile, Data: make([]byte, MaxFrame)}); !errors.Is(err, ErrMalformed) {
		t.Errorf("encode of an oversized message: %v", err)
	}
}

// TestScan: the rest of an old stream (a cut frame, garbage, a frame with a
// bad length) is skipped up to the frame wanted.
func TestScan(t *testing.T) {
	hello, _ := Encode(&Msg{Op: OpHello, Session: "s2"})
	old, _ := Encode(&Msg{Op: OpOut, ID: 9, Data: []byte("old output")})
	var in []byte
	in = append(in, old[5:]...) // a cut frame
	in = append(in, "ARB1\xff\xff\xff\xffjunk"...)
	in = append(in, old...)
	in = append(in, hello...)
	m, err := NewReader(bytes.NewReader(in)).Scan(1<<20, func(m *Msg) bool { return m.Op == OpHello })
	if err != nil || m.Session != "s2" {
		t.Fatalf("%+v %v", m, err)
	}
	if _, err := NewReader(bytes.NewReader(bytes.Repeat([]byte("x"), 5000))).Scan(1000, func(*Msg) bool { return true }); !errors.Is(err, ErrMalformed) {
		t.Fatalf("scan of garbage past its limit: %v", err)
	}
}
