// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FUSE over io_uring (Documentation/filesystems/fuse-io-uring.rst).
//
// The kernel keeps one queue per possible CPU and puts a request on
// the queue of the CPU its caller runs on. The server registers
// entries on every queue (FUSE_IO_URING_CMD_REGISTER, an
// IORING_OP_URING_CMD on the /dev/fuse fd whose SQE points at two
// buffers: a struct fuse_uring_req_header and a payload). Once every
// queue has an entry, the kernel completes a pending command for
// each request, with the request in the entry's buffers, and the
// server answers with FUSE_IO_URING_CMD_COMMIT_AND_FETCH, which
// both delivers the reply and makes the entry wait for the next
// request: one io_uring_enter per request, against a read and a
// write of /dev/fuse.
//
// Here each queue has one worker on its own locked OS thread, bound
// to the queue's CPU, which owns the queue's ring and serves its
// requests inline.

const (
	fuseURingCmdRegister       = 1
	fuseURingCmdCommitAndFetch = 2

	// struct fuse_uring_req_header: in_out[128], op_in[128],
	// struct fuse_uring_ent_in_out.
	uringOpInOffset  = 128
	uringEntOffset   = 256
	uringHeaderSize  = 288
	uringInHdrOffset = uringOpInOffset - int(unsafe.Sizeof(InHeader{}))

	defaultIOUringQueueDepth = 2
)

// uringEntInOut is struct fuse_uring_ent_in_out.
type uringEntInOut struct {
	flags     uint64
	commitID  uint64
	payloadSz uint32
	padding   uint32
	reserved  uint64
}

type uringTransport struct {
	ms     *Server
	queues []*uringQueue
	served atomic.Uint64
}

type uringQueue struct {
	t           *uringTransport
	qid         int
	depth       int
	payloadSize int
	ring        *ioURing
	entries     []*uringEntry

	start chan bool  // true: register and serve; false: tear down
	ready chan error // setup, then registration results
}

type uringEntry struct {
	mem     []byte // one mapping: the header page, then the payload
	hdr     []byte
	payload []byte
	iov     [2]unix.Iovec
	req     requestAlloc
}

// possibleCPUs counts the CPUs in /sys/devices/system/cpu/possible,
// which is the kernel's number of FUSE queues.
func possibleCPUs() (int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("possible CPUs %q: %w", b, err)
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil {
				return 0, fmt.Errorf("possible CPUs %q: %w", b, err)
			}
		}
		n += z - a + 1
	}
	return n, nil
}

// uringPayloadSizeForTest, if set, replaces the payload size: too small,
// it makes the kernel refuse the registration.
var uringPayloadSizeForTest int

// uringPayloadSize is at least the kernel's max_payload_sz:
// max(FUSE_MIN_READ_BUFFER, max_write, max_pages * PAGE_SIZE).
func uringPayloadSize(maxWrite int) int {
	page := syscall.Getpagesize()
	maxPages := (maxWrite-1)/page + 1
	size := max(_FUSE_MIN_READ_BUFFER, maxWrite, maxPages*page, 32*page)
	return (size + page - 1) / page * page
}

// prepareURing makes the rings and buffers of every queue, each on
// its worker's thread, before the mount: INIT offers io_uring only
// when this succeeded, so that nothing can fail between INIT and
// registration (the kernel holds requests until every queue has
// registered).
func prepareURing(ms *Server) (*uringTransport, error) {
	// Without the switch on, INIT would not offer io_uring: spare
	// the threads and rings.
	const param = "/sys/module/fuse/parameters/enable_uring"
	if b, err := os.ReadFile(param); err != nil {
		return nil, fmt.Errorf("the kernel has no FUSE over io_uring (%w)", err)
	} else if v := strings.TrimSpace(string(b)); v != "Y" && v != "1" {
		return nil, fmt.Errorf("%s is %s", param, v)
	}
	nq, err := possibleCPUs()
	if err != nil {
		return nil, err
	}
	depth := ms.opts.IOUringQueueDepth
	if depth <= 0 {
		depth = defaultIOUringQueueDepth
	}
	payload := uringPayloadSize(ms.opts.MaxWrite)
	if uringPayloadSizeForTest > 0 {
		payload = uringPayloadSizeForTest
	}
	t := &uringTransport{ms: ms}
	var errs []error
	for qid := 0; qid < nq; qid++ {
		q := &uringQueue{t: t, qid: qid, depth: depth, payloadSize: payload,
			start: make(chan bool, 1), ready: make(chan error, 1)}
		go q.run()
		if err := <-q.ready; err != nil {
			errs = append(errs, fmt.Errorf("queue %d: %w", qid, err))
			break
		}
		t.queues = append(t.queues, q)
	}
	if len(errs) > 0 {
		t.stop()
		return nil, errors.Join(errs...)
	}
	return t, nil
}

// stop ends workers that have not been started.
func (t *uringTransport) stop() {
	if t == nil {
		return
	}
	for _, q := range t.queues {
		q.start <- false
	}
	t.queues = nil
}

// startURing registers the queues' entries when INIT negotiated
// io_uring, and sets ms.transport.
func (ms *Server) startURing() {
	t := ms.uring
	if t == nil {
		return
	}
	if ms.negotiatedFlags&CAP_OVER_IO_URING == 0 {
		t.stop()
		ms.uring = nil
		ms.transport = "dev (io_uring: the kernel did not offer FUSE_OVER_IO_URING in INIT; is /sys/module/fuse/parameters/enable_uring Y?)"
		return
	}
	queues := t.queues
	t.queues = nil
	for _, q := range queues {
		ms.fuseFD.loops.Add(1)
		q.start <- true
	}
	var errs []string
	for _, q := range queues {
		if err := <-q.ready; err != nil {
			errs = append(errs, fmt.Sprintf("queue %d: %v", q.qid, err))
		}
	}
	if len(errs) > 0 {
		// The kernel turns io_uring off for the connection when a
		// registration fails, and requests keep coming through
		// /dev/fuse.
		ms.transport = "dev (io_uring: register: " + strings.Join(errs, "; ") + ")"
		ms.opts.Logger.Printf("FUSE over io_uring not in use: %s", ms.transport)
		return
	}
	ms.transport = "io_uring"
}

func (q *uringQueue) run() {
	// The thread is never unlocked: it ends with the worker, and its
	// CPU binding with it.
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(q.qid)
	_ = unix.SchedSetaffinity(0, &set) // best effort: a cpuset may forbid it

	err := q.setup()
	q.ready <- err
	if err != nil {
		q.teardown()
		return
	}
	if !<-q.start {
		q.teardown()
		return
	}
	defer q.t.ms.fuseFD.loops.Done()
	defer q.teardown()

	var fd int
	if err := q.t.ms.fuseFD.withFD(func(f int) { fd = f }); err != nil {
		q.ready <- err
		return
	}
	for i := range q.entries {
		q.register(fd, i)
	}
	if err := q.ring.enter(0); err != nil {
		q.ready <- fmt.Errorf("io_uring_enter: %w", err)
		return
	}
	// A registration the kernel refuses completes at once.
	var regErr error
	q.ring.reap(func(ud uint64, res int32) {
		if res < 0 {
			regErr = fmt.Errorf("FUSE_IO_URING_CMD_REGISTER: %w", syscall.Errno(-res))
			return
		}
		q.serve(fd, int(ud))
	})
	q.ready <- regErr
	if regErr != nil {
		return
	}
	for {
		if err := q.ring.enter(1); err != nil {
			q.t.ms.opts.Logger.Printf("io_uring queue %d: io_uring_enter: %v", q.qid, err)
			return
		}
		stop := false
		q.ring.reap(func(ud uint64, res int32) {
			if res >= 0 {
				q.serve(fd, int(ud))
				return
			}
			switch errno := syscall.Errno(-res); errno {
			case syscall.ENOTCONN, syscall.ECONNABORTED, syscall.ECANCELED, syscall.ENODEV:
				// The connection is gone (unmount or abort).
				stop = true
			default:
				q.t.ms.opts.Logger.Printf("io_uring queue %d entry %d: %v; registering it again", q.qid, ud, errno)
				q.register(fd, int(ud))
			}
		})
		if stop {
			return
		}
	}
}

func (q *uringQueue) setup() error {
	ring, err := newIOURing(uint32(q.depth))
	if err != nil {
		return err
	}
	q.ring = ring
	page := syscall.Getpagesize()
	for i := 0; i < q.depth; i++ {
		mem, err := unix.Mmap(-1, 0, page+q.payloadSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return fmt.Errorf("mmap of a ring entry: %w", err)
		}
		e := &uringEntry{mem: mem, hdr: mem[:uringHeaderSize], payload: mem[page:]}
		e.iov[0].Base, e.iov[0].Len = &e.hdr[0], uint64(len(e.hdr))
		e.iov[1].Base, e.iov[1].Len = &e.payload[0], uint64(len(e.payload))
		e.req.cancel = make(chan struct{})
		q.entries = append(q.entries, e)
	}
	return nil
}

func (q *uringQueue) teardown() {
	if q.ring != nil {
		q.ring.close()
	}
	for _, e := range q.entries {
		unix.Munmap(e.mem)
	}
	q.entries = nil
}

func (q *uringQueue) register(fd, i int) {
	e := q.entries[i]
	cmd := prepURingCmd(q.ring.getSQE(), fd, fuseURingCmdRegister, uintptr(unsafe.Pointer(&e.iov[0])), 2, uint64(i))
	*(*uint16)(unsafe.Pointer(&cmd[16])) = uint16(q.qid)
}

// serve answers the request in entry i and queues its
// COMMIT_AND_FETCH.
func (q *uringQueue) serve(fd, i int) {
	e := q.entries[i]
	ent := (*uringEntInOut)(unsafe.Pointer(&e.hdr[uringEntOffset]))
	commitID := ent.commitID
	q.handle(e, ent)
	q.t.served.Add(1)
	cmd := prepURingCmd(q.ring.getSQE(), fd, fuseURingCmdCommitAndFetch, 0, 0, uint64(i))
	*(*uint64)(unsafe.Pointer(&cmd[8])) = commitID
	*(*uint16)(unsafe.Pointer(&cmd[16])) = uint16(q.qid)
}

// handle runs the request in e through the protocol server and
// leaves the reply in e: the out header in in_out, the out
// arguments in the payload, their size in ent.payloadSz.
func (q *uringQueue) handle(e *uringEntry, ent *uringEntInOut) {
	ms := q.t.ms
	if ms.opts.SingleThreaded {
		ms.requestProcessingMu.Lock()
		defer ms.requestProcessingMu.Unlock()
	}
	// The kernel puts fuse_in_header in in_out and the opcode's
	// first argument in op_in; moving the header right before
	// op_in makes them the contiguous input go-fuse parses.
	copy(e.hdr[uringInHdrOffset:uringOpInOffset], e.hdr[:unsafe.Sizeof(InHeader{})])
	in := e.hdr[uringInHdrOffset:uringEntOffset]
	payloadSz := min(int(ent.payloadSz), len(e.payload))

	req := &e.req
	h, inSize, outSize, outPayloadSize, code := parseRequest(in, &ms.kernelSettings, ms.negotiatedFlags)
	req.status = code
	req.inputBuf = in[:unsafe.Sizeof(InHeader{})]
	req.inPayload = e.payload[:payloadSz]
	if code.Ok() {
		req.inputBuf = in[:inSize]
		req.status = req.splitExt(&req.extInline)
	}
	if outSize+outPayloadSize > len(e.payload) {
		req.status, outSize, outPayloadSize = EIO, 0, 0
	}
	req.outHeaderBuf = e.hdr[:sizeOfOutHeader]
	req.outDataBuf = req.outDataInline[:outSize]
	clear(req.outDataBuf)
	// The payload holds the input until the handler is done, so
	// the output may be built in place only when there is none.
	var direct []byte
	if outPayloadSize > 0 {
		if payloadSz == 0 {
			direct = e.payload[outSize : outSize+outPayloadSize]
			req.outPayload = direct
		} else {
			req.outPayload = ms.buffers.AllocBuffer(uint32(outPayloadSize))
			req.bufferPoolOutputBuf = req.outPayload
		}
	}

	ms.protocolServer.handleRequest(h, &req.request)

	n := 0
	dst := e.payload[outSize:]
	if rr := req.readResult; rr != nil {
		if req.status.Ok() {
			var b []byte
			b, req.status = rr.Bytes(dst[:min(rr.Size(), len(dst))])
			if len(b) > 0 && &b[0] != &dst[0] {
				copy(dst, b)
			}
			n = min(len(b), len(dst))
		}
		rr.Done()
		req.readResult = nil
	} else if p := req.outPayload; len(p) > 0 {
		if len(direct) == 0 || &p[0] != &direct[0] {
			copy(dst, p)
		}
		n = min(len(p), len(dst))
	}
	req.serializeHeader(n)
	copy(e.payload, req.outDataBuf)
	ent.payloadSz = 0
	if req.status.Ok() {
		ent.payloadSz = uint32(len(req.outDataBuf) + n)
	}

	if req.bufferPoolOutputBuf != nil {
		ms.buffers.FreeBuffer(req.bufferPoolOutputBuf)
		req.bufferPoolOutputBuf = nil
	}
	if req.interrupted {
		req.interrupted = false
		req.cancel = make(chan struct{})
	}
	req.clear()
	clear(e.hdr[uringOpInOffset:uringEntOffset])
}
