package lineapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/metrics"
)

// Filer is a Handler that serves the streamed files verbs (the engine
// does): file_read's data and file_write's input go in chunks, never
// whole. Without it file_read and file_write go through Do (one reply,
// one request line).
type Filer interface {
	OpenFile(ctx context.Context, req api.Request) (io.ReadCloser, api.FileInfo, error)
	WriteFile(ctx context.Context, req api.Request, r io.Reader) (api.FileInfo, error)
}

// InputExecer is an Execer that takes a command's standard input and a
// tty's window sizes from the connection (tree_exec with input).
type InputExecer interface {
	ExecInput(ctx context.Context, req api.Request, stdin io.Reader, resize <-chan api.Input, out func(api.ExecOutput) error) (api.ExecExit, error)
}

// Logger is a Handler that serves exec_logs.
type Logger interface {
	Logs(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (*api.ExecExit, error)
}

// readInput reads the next api.Input line of the connection.
func (c *conn) readInput() (api.Input, error) {
	line, err := readLine(c.br, c.s.cfg.MaxLineBytes, &c.s.pending)
	if err != nil {
		if len(bytes.TrimSpace(line)) == 0 {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return api.Input{}, err
		}
	}
	if d, ok := inputData(line); ok {
		return api.Input{Data: d}, nil
	}
	var in api.Input
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if derr := dec.Decode(&in); derr != nil {
		return api.Input{}, api.Errorf(api.ErrBadRequest, "invalid input line: %s", jsonProblem(derr))
	}
	return in, nil
}

// inputPrefix begins a data line as the Go client writes it.
var inputPrefix = []byte(`{"data":"`)

// inputData decodes a {"data":BASE64} line without the JSON decoder, whose
// scanning of half a megabyte of base64 costs more than the bytes' copy;
// ok false leaves any other line to it.
func inputData(line []byte) (data []byte, ok bool) {
	line = bytes.TrimRight(line, "\r\n ")
	if !bytes.HasPrefix(line, inputPrefix) || !bytes.HasSuffix(line, []byte(`"}`)) {
		return nil, false
	}
	enc := line[len(inputPrefix) : len(line)-2]
	data = make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
	n, err := base64.StdEncoding.Decode(data, enc)
	if err != nil {
		return nil, false
	}
	return data[:n], true
}

// inputReader is the data of the input lines that follow a request, up to
// the one with EOF; a connection that ends before it is
// io.ErrUnexpectedEOF. Resize lines go to resize (nil: dropped).
type inputReader struct {
	c      *conn
	buf    []byte
	eof    bool
	err    error
	resize chan<- api.Input
	ctx    context.Context
}

func (r *inputReader) Read(b []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.eof {
			return 0, io.EOF
		}
		// An upload may pause: the idle timeout bounds each line.
		r.c.deadline(r.c.nc.SetReadDeadline)
		in, err := r.c.readInput()
		if err != nil {
			r.err = err
			return 0, err
		}
		if in.Rows != 0 || in.Cols != 0 {
			if r.resize != nil {
				select {
				case r.resize <- in:
				case <-r.ctx.Done():
				}
			}
		}
		r.buf, r.eof = in.Data, in.EOF
	}
	n := copy(b, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// drain reads the input to its EOF line; false if the connection cannot
// go on (it ended, or sent something else).
func (r *inputReader) drain() bool {
	_, err := io.Copy(io.Discard, r)
	return err == nil
}

// fileRead streams a file_read: StatusFileData lines of api.MaxInputChunk
// bytes, then one "file_read" line with the last chunk (possibly empty)
// and the file's description. Two chunks are held at most.
func (c *conn) fileRead(ctx context.Context, f Filer, req api.Request, start time.Time) bool {
	fail := func(err error) bool {
		resp := errorResponse(err)
		c.s.record(ctx, req, resp.Code, start)
		return c.reply(resp) == nil
	}
	rc, fi, err := f.OpenFile(ctx, req)
	if err != nil {
		return fail(err)
	}
	defer rc.Close()
	cur, next := make([]byte, api.MaxInputChunk), make([]byte, api.MaxInputChunk)
	n, err := io.ReadFull(rc, cur)
	for {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return fail(err)
		}
		m, rerr := io.ReadFull(rc, next)
		if m == 0 && (rerr == io.EOF || rerr == io.ErrUnexpectedEOF) {
			break
		}
		if werr := c.write(api.Response{Status: api.StatusFileData, Data: cur[:n]}); werr != nil {
			return false
		}
		if c.flush() != nil {
			return false
		}
		cur, next, n, err = next, cur, m, rerr
	}
	c.s.record(ctx, req, metrics.CodeOK, start)
	data := cur[:n]
	if data == nil {
		data = []byte{}
	}
	return c.reply(api.Response{Status: api.OpFileRead, TreeID: req.TreeID, NodeID: req.NodeID, Data: data, File: &fi}) == nil
}

// fileWrite serves a file_write whose data follows as input lines: they
// are streamed into the file (WriteFile makes it atomic). A write that
// fails before the input's end drains the rest, so the connection goes on.
func (c *conn) fileWrite(ctx context.Context, f Filer, req api.Request, start time.Time) bool {
	in := &inputReader{c: c, ctx: ctx}
	fi, err := f.WriteFile(ctx, req, in)
	if err != nil {
		if in.err != nil && !errors.Is(in.err, api.ErrBadRequest) {
			c.s.record(ctx, req, api.Code(err), start)
			return false // the connection ended mid-input
		}
		resp := errorResponse(err)
		c.s.record(ctx, req, resp.Code, start)
		if in.err != nil || !in.drain() {
			if c.write(resp) == nil {
				c.flush()
			}
			return false // what follows is not a request line
		}
		return c.reply(resp) == nil
	}
	if !in.eof || len(in.buf) > 0 {
		if !in.drain() {
			return false
		}
	}
	c.s.record(ctx, req, metrics.CodeOK, start)
	return c.reply(api.Response{Status: "file_written", TreeID: req.TreeID, NodeID: req.NodeID, File: &fi}) == nil
}

// logs streams an exec_logs: api.StatusExecOutput lines, then one
// "exec_logs" line (with the exit once the process ended).
func (c *conn) logs(ctx context.Context, req api.Request, start time.Time) bool {
	l, ok := c.s.cfg.Handler.(Logger)
	if !ok {
		c.s.record(ctx, req, api.CodeNotSupported, start)
		return c.reply(errorResponse(api.Errorf(api.ErrNotSupported, "exec_logs: not served here"))) == nil
	}
	if req.Follow {
		// A followed log may be silent for long: notice the client leaving
		// by reading (and dropping) its input, as a watch does; the
		// connection ends with the stream.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		c.nc.SetReadDeadline(time.Time{})
		c.wg.Go(func() {
			io.Copy(io.Discard, c.br)
			cancel()
		})
		defer c.nc.Close()
	}
	var werr error
	x, err := l.Logs(ctx, req, c.output(&werr))
	if werr != nil {
		return false
	}
	if req.Follow {
		resp := api.Response{Status: api.OpExecLogs, TreeID: req.TreeID, NodeID: req.NodeID, ProcessID: req.ProcessID, Exit: x}
		code := metrics.CodeOK
		if err != nil {
			resp = errorResponse(err)
			code = resp.Code
		}
		c.s.record(ctx, req, code, start)
		if c.write(resp) == nil {
			c.flush()
		}
		return false
	}
	if err != nil {
		resp := errorResponse(err)
		c.s.record(ctx, req, resp.Code, start)
		return c.reply(resp) == nil
	}
	c.s.record(ctx, req, metrics.CodeOK, start)
	return c.reply(api.Response{Status: api.OpExecLogs, TreeID: req.TreeID, NodeID: req.NodeID, ProcessID: req.ProcessID, Exit: x}) == nil
}

// output writes each chunk of a command's output as a line, flushed; the
// first write error is kept in *werr (the client went: the command ends).
func (c *conn) output(werr *error) func(api.ExecOutput) error {
	return func(o api.ExecOutput) error {
		if *werr = c.write(api.Response{Status: api.StatusExecOutput, Output: &o}); *werr == nil {
			*werr = c.flush()
		}
		return *werr
	}
}

var errNoInput = fmt.Errorf("%w: this op takes no input lines", api.ErrBadRequest)
