// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"
)

// uringFS has one file, "file", whose content is data, and an xattr
// on it, enough to send requests with input payloads (LOOKUP,
// GETXATTR), output payloads (READ, GETXATTR, READDIR) and both
// (WRITE).
type uringFS struct {
	defaultRawFileSystem
	mu   sync.Mutex
	data []byte
}

func (f *uringFS) attr(node uint64, a *Attr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	*a = Attr{Ino: node, Mode: S_IFDIR | 0755, Nlink: 2}
	if node == 2 {
		*a = Attr{Ino: 2, Mode: S_IFREG | 0644, Nlink: 1, Size: uint64(len(f.data))}
	}
}

func (f *uringFS) Lookup(cancel <-chan struct{}, header *InHeader, name string, out *EntryOut) Status {
	if name != "file" {
		return ENOENT
	}
	out.NodeId = 2
	f.attr(2, &out.Attr)
	return OK
}

func (f *uringFS) GetAttr(cancel <-chan struct{}, in *GetAttrIn, out *AttrOut) Status {
	f.attr(in.NodeId, &out.Attr)
	return OK
}

func (f *uringFS) Open(cancel <-chan struct{}, in *OpenIn, out *OpenOut) Status {
	out.OpenFlags = FOPEN_DIRECT_IO
	return OK
}

func (f *uringFS) Read(cancel <-chan struct{}, in *ReadIn, buf []byte) (ReadResult, Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if int(in.Offset) >= len(f.data) {
		return ReadResultData(nil), OK
	}
	n := copy(buf, f.data[in.Offset:min(int(in.Offset)+int(in.Size), len(f.data))])
	return ReadResultData(buf[:n]), OK
}

func (f *uringFS) Write(cancel <-chan struct{}, in *WriteIn, data []byte) (uint32, Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	end := int(in.Offset) + len(data)
	if end > len(f.data) {
		f.data = append(f.data, make([]byte, end-len(f.data))...)
	}
	copy(f.data[in.Offset:], data)
	return uint32(len(data)), OK
}

func (f *uringFS) GetXAttr(cancel <-chan struct{}, header *InHeader, attr string, dest []byte) (uint32, Status) {
	if attr != "user.color" {
		return 0, ENOATTR
	}
	v := []byte("blue")
	if len(dest) < len(v) {
		return uint32(len(v)), ERANGE
	}
	return uint32(copy(dest, v)), OK
}

func (f *uringFS) OpenDir(cancel <-chan struct{}, in *OpenIn, out *OpenOut) Status { return OK }

func (f *uringFS) ReadDir(cancel <-chan struct{}, in *ReadIn, out *DirEntryList) Status {
	if in.Offset == 0 {
		out.AddDirEntry(DirEntry{Name: "file", Mode: S_IFREG, Ino: 2})
	}
	return OK
}

func (f *uringFS) ReadDirPlus(cancel <-chan struct{}, in *ReadIn, out *DirEntryList) Status {
	if in.Offset == 0 {
		if e := out.AddDirLookupEntry(DirEntry{Name: "file", Mode: S_IFREG, Ino: 2}); e != nil {
			e.NodeId = 2
			f.attr(2, &e.Attr)
		}
	}
	return OK
}

func (f *uringFS) ReleaseDir(in *ReleaseIn)                                  {}
func (f *uringFS) Release(cancel <-chan struct{}, in *ReleaseIn)             {}
func (f *uringFS) Flush(cancel <-chan struct{}, in *FlushIn) Status          { return OK }
func (f *uringFS) Access(cancel <-chan struct{}, in *AccessIn) (code Status) { return OK }

func uringEnabled() bool {
	b, err := os.ReadFile("/sys/module/fuse/parameters/enable_uring")
	return err == nil && strings.TrimSpace(string(b)) == "Y"
}

func mountURingFS(t *testing.T, fs *uringFS, ioURing bool) (*Server, string) {
	dir := t.TempDir()
	srv, err := NewServer(fs, dir, &MountOptions{IOUring: ioURing})
	if err != nil {
		t.Skipf("mount: %v (FUSE not available here?)", err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Unmount() })
	return srv, dir
}

// TestURingTransport serves requests of every shape through the
// rings and checks they came through them (the counter), and that
// the same calls work over /dev/fuse.
func TestURingTransport(t *testing.T) {
	if !uringEnabled() {
		t.Skip("FUSE over io_uring is off (/sys/module/fuse/parameters/enable_uring)")
	}
	for _, ioURing := range []bool{true, false} {
		fs := &uringFS{data: bytes.Repeat([]byte("0123456789abcdef"), 40000)}
		srv, dir := mountURingFS(t, fs, ioURing)
		want := "dev"
		if ioURing {
			want = "io_uring"
		}
		if srv.Transport() != want {
			t.Fatalf("IOUring %v: transport %q, want %q", ioURing, srv.Transport(), want)
		}
		before := srv.URingRequests()
		name := filepath.Join(dir, "file")
		fs.mu.Lock()
		content := bytes.Clone(fs.data)
		fs.mu.Unlock()
		got, err := os.ReadFile(name)
		if err != nil || !bytes.Equal(got, content) {
			t.Fatalf("read %d bytes, %v; want %d", len(got), err, len(content))
		}
		f, err := os.OpenFile(name, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(bytes.Repeat([]byte("x"), 300000), 1000); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if got, _ := os.ReadFile(name); !bytes.Equal(got[1000:301000], bytes.Repeat([]byte("x"), 300000)) || got[999] != '7' || got[301000] != '8' {
			t.Fatalf("after the write, read back something else")
		}
		v := make([]byte, 64)
		n, err := syscall.Getxattr(name, "user.color", v)
		if err != nil || string(v[:n]) != "blue" {
			t.Fatalf("getxattr: %q, %v", v[:n], err)
		}
		if _, err := syscall.Getxattr(name, "user.none", v); err != syscall.ENODATA {
			t.Fatalf("getxattr of a missing attribute: %v, want ENODATA", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
			t.Fatalf("stat of a missing file: %v", err)
		}
		ents, err := os.ReadDir(dir)
		if err != nil || len(ents) != 1 || ents[0].Name() != "file" {
			t.Fatalf("readdir: %v, %v", ents, err)
		}
		served := srv.URingRequests() - before
		if ioURing && served < 10 {
			t.Errorf("%d requests through the rings, want all of them", served)
		}
		if !ioURing && served != 0 {
			t.Errorf("%d requests through the rings over /dev/fuse", served)
		}
		t.Logf("IOUring %v: transport %s, %d requests through the rings", ioURing, srv.Transport(), served)
	}
}

// TestURingFallback: with io_uring asked for and the kernel not
// offering it, the server reads /dev/fuse and says why.
func TestURingFallback(t *testing.T) {
	if uringEnabled() {
		t.Skip("needs /sys/module/fuse/parameters/enable_uring = N")
	}
	fs := &uringFS{data: []byte("hello")}
	srv, dir := mountURingFS(t, fs, true)
	if !strings.HasPrefix(srv.Transport(), "dev (io_uring: ") || !strings.Contains(srv.Transport(), "enable_uring") {
		t.Fatalf("transport %q", srv.Transport())
	}
	if got, err := os.ReadFile(filepath.Join(dir, "file")); err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v", got, err)
	}
}

// TestURingRegisterFails: a registration the kernel refuses (a payload
// buffer smaller than its max_payload_sz) leaves the connection on
// /dev/fuse, and the server says why.
func TestURingRegisterFails(t *testing.T) {
	if !uringEnabled() {
		t.Skip("FUSE over io_uring is off (/sys/module/fuse/parameters/enable_uring)")
	}
	uringPayloadSizeForTest = 4096
	defer func() { uringPayloadSizeForTest = 0 }()
	fs := &uringFS{data: []byte("hello")}
	srv, dir := mountURingFS(t, fs, true)
	if got := srv.Transport(); !strings.HasPrefix(got, "dev (io_uring: register: ") || !strings.Contains(got, "invalid argument") {
		t.Fatalf("transport %q", got)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "file")); err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v", got, err)
	}
	if n := srv.URingRequests(); n != 0 {
		t.Fatalf("%d requests through rings that never registered", n)
	}
}

func TestURingLayout(t *testing.T) {
	if s := unsafe.Sizeof(uringEntInOut{}); uringEntOffset+int(s) != uringHeaderSize || s != 32 {
		t.Fatalf("fuse_uring_ent_in_out is %d bytes", s)
	}
	if s := unsafe.Sizeof(ioURingParams{}); s != 120 {
		t.Fatalf("io_uring_params is %d bytes, want 120", s)
	}
	if s := unsafe.Sizeof(cqe{}); s != cqeSize {
		t.Fatalf("io_uring_cqe is %d bytes", s)
	}
}
