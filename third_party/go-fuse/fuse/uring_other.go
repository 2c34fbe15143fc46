// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

//go:build !linux

package fuse

import (
	"errors"
	"sync/atomic"
)

// FUSE over io_uring exists only on Linux.
type uringTransport struct {
	served atomic.Uint64
}

func prepareURing(ms *Server) (*uringTransport, error) {
	return nil, errors.New("FUSE over io_uring is Linux only")
}

func (t *uringTransport) stop() {}

func (ms *Server) startURing() {}
