package api

import "unicode/utf8"

// Collector gathers an exec's output into the collected form (ExecResult):
// the last max bytes of each stream, in a ring, so a chatty command costs
// a bounded amount of memory. The zero value keeps MaxExecCollect bytes.
type Collector struct {
	Max            int // bytes kept per stream; 0: MaxExecCollect
	stdout, stderr ring
}

// Add takes one chunk of output.
func (c *Collector) Add(o ExecOutput) {
	m := c.Max
	if m <= 0 {
		m = MaxExecCollect
	}
	if o.Stream == "stderr" {
		c.stderr.write(o.Data, m)
	} else {
		c.stdout.write(o.Data, m)
	}
}

// Result is the collected form of the output with how the command ended.
func (c *Collector) Result(x ExecExit) ExecResult {
	r := ExecResult{Status: StatusExecExit, ExitCode: x.ExitCode, Signal: x.Signal, DurationNS: x.DurationNS,
		Truncated: c.stdout.truncated || c.stderr.truncated}
	out, errb := c.stdout.bytes(), c.stderr.bytes()
	if utf8.Valid(out) {
		r.Stdout = string(out)
	} else {
		r.StdoutB64 = out
	}
	if utf8.Valid(errb) {
		r.Stderr = string(errb)
	} else {
		r.StderrB64 = errb
	}
	return r
}

// Bytes are what the collector kept of each stream.
func (c *Collector) Bytes() (stdout, stderr []byte) { return c.stdout.bytes(), c.stderr.bytes() }

// ring keeps the last bytes written to it.
type ring struct {
	buf       []byte
	pos       int // next write once full
	full      bool
	truncated bool
}

func (r *ring) write(p []byte, max int) {
	if len(p) > max {
		p, r.truncated = p[len(p)-max:], true
		r.buf, r.pos, r.full = append(r.buf[:0], p...), 0, true
		return
	}
	if !r.full {
		room := max - len(r.buf)
		if len(p) < room {
			r.buf = append(r.buf, p...)
			return
		}
		r.buf = append(r.buf, p[:room]...)
		p, r.full, r.pos = p[room:], true, 0
	}
	if len(p) > 0 {
		r.truncated = true
	}
	for len(p) > 0 {
		n := copy(r.buf[r.pos:], p)
		p, r.pos = p[n:], (r.pos+n)%len(r.buf)
	}
}

func (r *ring) bytes() []byte {
	if !r.full || r.pos == 0 {
		return append([]byte{}, r.buf...)
	}
	return append(append([]byte{}, r.buf[r.pos:]...), r.buf[:r.pos]...)
}
