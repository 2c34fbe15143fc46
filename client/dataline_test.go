package client

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/arbor-dev/arbor/api"
)

// TestDataLine: a file_data line decodes the same with the fast path as
// with encoding/json, and a line it does not recognise whole is left to
// json.
func TestDataLine(t *testing.T) {
	for _, data := range [][]byte{[]byte("x"), bytes.Repeat([]byte{0, 255, '"', '\\'}, 1000)} {
		line, _ := json.Marshal(api.Response{Status: api.StatusFileData, Data: data})
		got, ok := dataLine(append(line, '\n'))
		var want api.Response
		json.Unmarshal(line, &want)
		if !ok || !bytes.Equal(got, want.Data) {
			t.Errorf("%d bytes: fast path %v, %d bytes", len(data), ok, len(got))
		}
	}
	for _, line := range []string{`{"status":"file_data","data_b64":"!!"}`, `{"status":"file_data","data_b64":"eA==","x":1}`, `{"status":"file_read","data_b64":"eA=="}`} {
		if _, ok := dataLine([]byte(line)); ok {
			t.Errorf("%s: taken by the fast path", line)
		}
	}
}
