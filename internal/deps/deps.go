package deps
import (
 _ "github.com/hanwen/go-fuse/v2/fs"
 _ "github.com/hanwen/go-fuse/v2/fuse"
 _ "go.etcd.io/bbolt"
 _ "pgregory.net/rapid"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "github.com/prometheus/client_golang/prometheus/promhttp"
 _ "golang.org/x/sys/unix"
 _ "github.com/rogpeppe/go-internal/testscript"
)
