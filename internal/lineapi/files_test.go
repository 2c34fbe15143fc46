package lineapi_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/lineapi"
)

// memFiles is a Filer over one file in memory: a test double of the
// engine's (the real one is internal/daemon's TestFilesOverFaces).
type memFiles struct {
	noWatch
	data    []byte
	written []byte
}

type noWatch struct{}

func (noWatch) Do(ctx context.Context, req api.Request) (api.Response, error) {
	return api.Response{Status: "pong"}, nil
}

func (noWatch) Watch(ctx context.Context, id string) (api.Response, <-chan api.Event, error) {
	return api.Response{}, nil, api.Errorf(api.ErrNotFound, "no trees")
}

func (m *memFiles) OpenFile(ctx context.Context, req api.Request) (io.ReadCloser, api.FileInfo, error) {
	if req.Path != "f" {
		return nil, api.FileInfo{}, api.Errorf(api.ErrNotFound, "%s", req.Path)
	}
	return io.NopCloser(bytes.NewReader(m.data)), api.FileInfo{Name: "f", Size: int64(len(m.data))}, nil
}

func (m *memFiles) WriteFile(ctx context.Context, req api.Request, r io.Reader) (api.FileInfo, error) {
	if req.Path != "f" {
		return api.FileInfo{}, api.Errorf(api.ErrNotFound, "%s", req.Path)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return api.FileInfo{}, err
	}
	m.written = b
	return api.FileInfo{Name: "f", Size: int64(len(b))}, nil
}

// TestFileStreams: file_read comes in chunks of api.MaxInputChunk, the
// last one on the file_read line; an empty file is one line; file_write's
// input lines are the data; a write refused before its input ends drains
// the input, and the connection serves the next request; a malformed
// input line is a bad request that ends the connection.
func TestFileStreams(t *testing.T) {
	m := &memFiles{data: bytes.Repeat([]byte("0123456789"), api.MaxInputChunk/5+3)} // 2 chunks and 30 bytes
	path := serve(t, m, lineapi.Config{})
	rs := rawLines(t, path, `{"op":"file_read","tree_id":"t","node_id":"n1","path":"f"}`+"\n"+`{"op":"ping"}`+"\n")
	var got []byte
	var statuses []string
	for _, r := range rs {
		statuses = append(statuses, r.Status)
		got = append(got, r.Data...)
	}
	if strings.Join(statuses, " ") != "file_data file_data file_read pong" || !bytes.Equal(got, m.data) {
		t.Fatalf("read: %v, %d bytes (equal %v)", statuses, len(got), bytes.Equal(got, m.data))
	}
	m.data = nil
	rs = rawLines(t, path, `{"op":"file_read","tree_id":"t","node_id":"n1","path":"f"}`+"\n")
	if len(rs) != 1 || rs[0].Status != api.OpFileRead || rs[0].File == nil {
		t.Fatalf("read of an empty file: %+v", rs)
	}

	in := `{"op":"file_write","tree_id":"t","node_id":"n1","path":"f","input":true}` + "\n" +
		`{"data":"aGVs"}` + "\n" + `{"data":"bG8="}` + "\n" + `{"eof":true}` + "\n" + `{"op":"ping"}` + "\n"
	rs = rawLines(t, path, in)
	if len(rs) != 2 || rs[0].Status != "file_written" || rs[0].File.Size != 5 || string(m.written) != "hello" || rs[1].Status != "pong" {
		t.Fatalf("write: %+v, wrote %q", rs, m.written)
	}
	rs = rawLines(t, path, strings.Replace(in, `"path":"f"`, `"path":"g"`, 1))
	if len(rs) != 2 || rs[0].Code != api.CodeNotFound || rs[1].Status != "pong" {
		t.Fatalf("a refused write: %+v", rs)
	}
	rs = rawLines(t, path, `{"op":"file_write","tree_id":"t","node_id":"n1","path":"f","input":true}`+"\n"+`{"bogus":1}`+"\n"+`{"op":"ping"}`+"\n")
	if len(rs) != 1 || rs[0].Code != api.CodeBadRequest {
		t.Fatalf("a malformed input line: %+v", rs)
	}
	rs = rawLines(t, path, `{"op":"ping","input":true}`+"\n")
	if len(rs) != 1 || rs[0].Code != api.CodeBadRequest {
		t.Fatalf("input on an op that takes none: %+v", rs)
	}
}
