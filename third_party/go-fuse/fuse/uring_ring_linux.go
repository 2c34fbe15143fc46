// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A minimal io_uring: one submission queue of 128-byte entries
// (IORING_SETUP_SQE128, which URING_CMD needs for its command
// area) and a completion queue of 16-byte entries, driven by one
// thread. Only what the FUSE transport uses is here.

const (
	ioringSetupSQE128         = 1 << 10
	ioringSetupSingleIssuer   = 1 << 12
	ioringSetupDeferTaskrun   = 1 << 13
	ioringFeatSingleMmap      = 1 << 0
	ioringEnterGetEvents      = 1 << 0
	ioringOffSQRing           = 0
	ioringOffCQRing           = 0x8000000
	ioringOffSQEs             = 0x10000000
	ioringOpURingCmd          = 46
	sqe128Size                = 128
	cqeSize                   = 16
	sqeCmdOffset              = 48 // start of the command area in an SQE
	ioringSetupFlagsPreferred = ioringSetupSQE128 | ioringSetupSingleIssuer | ioringSetupDeferTaskrun
)

// ioURingParams is struct io_uring_params.
type ioURingParams struct {
	sqEntries    uint32
	cqEntries    uint32
	flags        uint32
	sqThreadCPU  uint32
	sqThreadIdle uint32
	features     uint32
	wqFD         uint32
	resv         [3]uint32
	sqOff        [10]uint32 // head, tail, ring_mask, ring_entries, flags, dropped, array, resv1, user_addr (u64)
	cqOff        [10]uint32 // head, tail, ring_mask, ring_entries, overflow, cqes, flags, resv1, user_addr (u64)
}

type ioURing struct {
	fd int

	sqRing, cqRing, sqes []byte
	singleMmap           bool

	sqHead, sqTail, sqMask *uint32
	sqArray                []uint32
	sqEntries              uint32
	cqHead, cqTail, cqMask *uint32
	cqes                   unsafe.Pointer

	// localTail counts SQEs filled and not yet published;
	// toSubmit those published and not yet taken by the kernel.
	localTail uint32
	toSubmit  uint32
}

func u32At(b []byte, off uint32) *uint32 {
	return (*uint32)(unsafe.Pointer(&b[off]))
}

// newIOURing sets up a ring with the given number of entries on
// the calling thread, which must be the only one to submit to it.
func newIOURing(entries uint32) (*ioURing, error) {
	var p ioURingParams
	p.flags = ioringSetupFlagsPreferred
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno == syscall.EINVAL {
		// Kernels before 6.1 have no DEFER_TASKRUN.
		p = ioURingParams{flags: ioringSetupSQE128}
		fd, _, errno = unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	}
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r := &ioURing{fd: int(fd)}
	if err := r.mmap(&p); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *ioURing) mmap(p *ioURingParams) error {
	sqSize := int(p.sqOff[6] + p.sqEntries*4)
	cqSize := int(p.cqOff[5] + p.cqEntries*cqeSize)
	if p.features&ioringFeatSingleMmap != 0 {
		sqSize = max(sqSize, cqSize)
		cqSize = sqSize
	}
	var err error
	if r.sqRing, err = unix.Mmap(r.fd, ioringOffSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("mmap of the submission ring: %w", err)
	}
	if p.features&ioringFeatSingleMmap != 0 {
		r.cqRing, r.singleMmap = r.sqRing, true
	} else if r.cqRing, err = unix.Mmap(r.fd, ioringOffCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("mmap of the completion ring: %w", err)
	}
	if r.sqes, err = unix.Mmap(r.fd, ioringOffSQEs, int(p.sqEntries)*sqe128Size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("mmap of the submission entries: %w", err)
	}
	r.sqHead, r.sqTail, r.sqMask = u32At(r.sqRing, p.sqOff[0]), u32At(r.sqRing, p.sqOff[1]), u32At(r.sqRing, p.sqOff[2])
	r.sqEntries = p.sqEntries
	r.sqArray = unsafe.Slice(u32At(r.sqRing, p.sqOff[6]), p.sqEntries)
	r.cqHead, r.cqTail, r.cqMask = u32At(r.cqRing, p.cqOff[0]), u32At(r.cqRing, p.cqOff[1]), u32At(r.cqRing, p.cqOff[2])
	r.cqes = unsafe.Pointer(&r.cqRing[p.cqOff[5]])
	r.localTail = atomic.LoadUint32(r.sqTail)
	return nil
}

func (r *ioURing) close() {
	if r.cqRing != nil && !r.singleMmap {
		unix.Munmap(r.cqRing)
	}
	for _, m := range [][]byte{r.sqes, r.sqRing} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	r.sqes, r.cqRing, r.sqRing = nil, nil, nil
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

// getSQE returns a zeroed submission entry, or nil when the queue
// is full.
func (r *ioURing) getSQE() []byte {
	head := atomic.LoadUint32(r.sqHead)
	if r.localTail-head >= r.sqEntries {
		return nil
	}
	idx := r.localTail & *r.sqMask
	r.sqArray[idx] = idx
	r.localTail++
	sqe := r.sqes[idx*sqe128Size : (idx+1)*sqe128Size]
	clear(sqe)
	return sqe
}

// enter publishes the filled SQEs, submits them and waits for at
// least minComplete completions.
func (r *ioURing) enter(minComplete uint32) error {
	tail := atomic.LoadUint32(r.sqTail)
	if r.localTail != tail {
		r.toSubmit += r.localTail - tail
		atomic.StoreUint32(r.sqTail, r.localTail)
	}
	flags := uintptr(0)
	if minComplete > 0 {
		flags = ioringEnterGetEvents
	}
	for {
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(r.toSubmit), uintptr(minComplete), flags, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return errno
		}
		r.toSubmit -= uint32(n)
		return nil
	}
}

// cqe is struct io_uring_cqe.
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// reap calls f for each completion ready and consumes them.
func (r *ioURing) reap(f func(userData uint64, res int32)) int {
	head := *r.cqHead
	tail := atomic.LoadUint32(r.cqTail)
	n := 0
	for ; head != tail; head++ {
		c := (*cqe)(unsafe.Add(r.cqes, uintptr(head&*r.cqMask)*cqeSize))
		f(c.userData, c.res)
		n++
	}
	atomic.StoreUint32(r.cqHead, head)
	return n
}

// prepURingCmd fills sqe for IORING_OP_URING_CMD on fd with the
// given command op; the command area is returned for the caller.
func prepURingCmd(sqe []byte, fd int, cmdOp uint32, addr uintptr, length uint32, userData uint64) []byte {
	sqe[0] = ioringOpURingCmd
	*(*int32)(unsafe.Pointer(&sqe[4])) = int32(fd)
	*(*uint32)(unsafe.Pointer(&sqe[8])) = cmdOp
	*(*uint64)(unsafe.Pointer(&sqe[16])) = uint64(addr)
	*(*uint32)(unsafe.Pointer(&sqe[24])) = length
	*(*uint64)(unsafe.Pointer(&sqe[32])) = userData
	return sqe[sqeCmdOffset:]
}
