// Package daemon is arbord's composition root: it builds the workspace
// mounts, the tree engine and the faces (JSON-lines on the Unix socket,
// optionally HTTP), owns every goroutine, and tears all down when its
// context ends.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/audit"
	"github.com/arbor-dev/arbor/internal/cowfs"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/httpapi"
	"github.com/arbor-dev/arbor/internal/image"
	"github.com/arbor-dev/arbor/internal/jailbackend"
	"github.com/arbor-dev/arbor/internal/lineapi"
	"github.com/arbor-dev/arbor/internal/mcpserver"
	"github.com/arbor-dev/arbor/internal/metrics"
	"github.com/arbor-dev/arbor/internal/vm"
	"github.com/arbor-dev/arbor/internal/vmbackend"
	"github.com/arbor-dev/arbor/internal/webui"
	"github.com/arbor-dev/arbor/internal/workspace"
)

// Version is the daemon's version, reported by ping.
const Version = "0.1.0"

// Config configures the daemon. Home is required; the rest default.
type Config struct {
	Home      string // state directory
	Socket    string // default Home/arbord.sock
	AllowUIDs []int  // if set, the socket is 0666 and admits these uids (SO_PEERCRED)
	HTTPAddr  string // if set, serve HTTP there
	// Token is the HTTP bearer token. Empty means the one kept in
	// Home/http.token (api.HTTPTokenFile), made at the first start; an
	// HTTPAddr off loopback needs it given explicitly.
	Token    string
	AuditLog string // the audit log of both faces; default Home/audit.log
	// Passthrough: nil means FUSE passthrough when root.
	Passthrough *bool
	// FUSETransport is the mounts' FUSE transport (cowfs.Transport*; "" is dev
	// is auto: io_uring where the kernel has it, which the daemon turns
	// on at start when root).
	FUSETransport string
	Logger        *slog.Logger
	// Ready, if set, is closed once the socket accepts connections.
	Ready chan<- struct{}
	// MaxConns and MaxConnsPerUID cap the socket's connections, and
	// IdleTimeout closes idle ones (see lineapi.Config): zero means the
	// defaults, derived from RLIMIT_NOFILE so that descriptors are always
	// left for the FUSE servers and the stores.
	MaxConns, MaxConnsPerUID int
	IdleTimeout              time.Duration
}

// Run runs the daemon until ctx ends.
func Run(ctx context.Context, cfg Config) (err error) {
	if cfg.Home == "" {
		return api.Errorf(api.ErrBadRequest, "daemon: Home is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Socket == "" {
		cfg.Socket = filepath.Join(cfg.Home, "arbord.sock")
	}
	if cfg.AuditLog == "" {
		cfg.AuditLog = filepath.Join(cfg.Home, "audit.log")
	}
	if err := os.MkdirAll(cfg.Home, 0o700); err != nil {
		return err
	}
	// One daemon per home: the lock is held for the process's life.
	lock, err := os.OpenFile(filepath.Join(cfg.Home, "arbord.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	// Aborting FUSE connections (a forced unmount of a busy mount, the
	// takeover from a dying daemon) is best done through fusectl: mount it
	// when root and absent. Without it the aborter falls back, and says why
	// once.
	ab := &fusemount.Aborter{Logger: log}
	ab.EnsureCtl()
	if err := cowfs.CheckTransport(cfg.FUSETransport); err != nil {
		return err
	}
	if cfg.FUSETransport == cowfs.TransportAuto || cfg.FUSETransport == cowfs.TransportURing {
		switch on, changed, err := fusemount.EnableURing(); {
		case changed:
			log.Info("FUSE over io_uring turned on", "param", fusemount.URingParam)
		case !on:
			log.Info("FUSE over io_uring unavailable: mounts read and write /dev/fuse", "err", err)
		}
	}
	if err := lockHeld(lock, cfg.Home, ab, 10*time.Second); err != nil {
		return fmt.Errorf("daemon: another arbord runs with home %s: %w: %w", cfg.Home, api.ErrBusy, err)
	}
	// The home is ours now: every mount of a daemon of this home that is
	// still there is an earlier one's, dead or dying. Abort their
	// connections, so that no request waits on them and a daemon that was
	// SIGKILLed while one of its threads waited on its own mount can exit
	// (it may have let the lock go before it could).
	if err := abortMounts(cfg.Home, ab); err != nil {
		log.Warn("abort an earlier daemon's mounts", "err", err)
	}

	var eng *engine.Engine // set once composed; the gauges read it only when scraped
	m, err := metrics.New(metrics.Config{Gauges: metrics.GaugesFunc(func() []metrics.TreeGauge { return gauges(eng) })})
	if err != nil {
		return err
	}
	if cfg.HTTPAddr != "" {
		if cfg.Token == "" {
			loop, err := httpapi.IsLoopback(cfg.HTTPAddr)
			if err != nil {
				return err
			}
			if !loop {
				return api.Errorf(api.ErrBadRequest, "daemon: HTTP on %s, off loopback, needs an explicit token (--token): a generated one would travel in clear", cfg.HTTPAddr)
			}
			if cfg.Token, err = httpToken(cfg.Home, log); err != nil {
				return err
			}
		}
		// Check the HTTP face's config before mounting anything.
		if _, err := httpapi.New(httpapi.Config{Addr: cfg.HTTPAddr, Token: cfg.Token, Handler: &router{}, Metrics: m}); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	auditFile, err := audit.Open(cfg.AuditLog)
	if err != nil {
		return err
	}
	defer auditFile.Close()          // after the cleanups below: the engine's views audit until it closes
	aud := audit.New(auditFile, log) // one writer for every face
	h, closeAll, err := compose(cfg.Home, cfg.Passthrough, cfg.FUSETransport, ab, log, m, aud)
	if err != nil {
		return err
	}
	cleanups := []func(){closeAll}
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	h.uid = uint32(os.Geteuid())
	h.shutdown = func() {
		// After the reply has gone out: the faces close connections when ctx ends.
		time.AfterFunc(100*time.Millisecond, cancel)
	}
	eng = h.eng

	line, err := lineapi.New(lineapi.Config{
		Path: cfg.Socket, AllowUIDs: cfg.AllowUIDs, Handler: h, Metrics: m, Logger: log, Audit: aud,
		MaxConns: cfg.MaxConns, MaxConnsPerUID: cfg.MaxConnsPerUID, IdleTimeout: cfg.IdleTimeout,
	})
	if err != nil {
		return err
	}
	ln, err := lineapi.Listen(cfg.Socket, cfg.AllowUIDs)
	if err != nil {
		return err
	}
	// The HTTP face listens before the socket serves: a client that the
	// socket answers finds HTTP up too (a CLI that started the daemon
	// pings the socket, then may use HTTP).
	var hs *httpapi.Server
	var hln net.Listener
	serving := false
	defer func() {
		if !serving {
			ln.Close() // Serve owns it once it runs
		}
	}()
	if cfg.HTTPAddr != "" {
		ms, err := mcpserver.New(mcpserver.Config{Handler: h, Version: Version, Logger: log, Metrics: m})
		if err != nil {
			return err
		}
		cleanups = append(cleanups, func() { ms.Close() })
		if hs, err = httpapi.New(httpapi.Config{Addr: cfg.HTTPAddr, Token: cfg.Token, Handler: h, Metrics: m, Audit: aud, Logger: log, Version: Version,
			MCP: ms.HTTPHandler(), UI: webui.Handler()}); err != nil {
			return err
		}
		var lc net.ListenConfig
		if hln, err = lc.Listen(ctx, "tcp", cfg.HTTPAddr); err != nil {
			return fmt.Errorf("daemon: http: %w", err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	defer func() { cancel(); wg.Wait() }()
	if hs != nil {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- hs.Serve(ctx, hln) }()
	}
	wg.Add(1)
	serving = true
	go func() { defer wg.Done(); errs <- line.Serve(ctx, ln) }()
	lim := line.Limits()
	log.Info("arbord running", "home", cfg.Home, "socket", cfg.Socket, "http", cfg.HTTPAddr,
		"max_conns", lim.MaxConns, "max_conns_per_uid", lim.MaxConnsPerUID, "idle_timeout", lim.IdleTimeout, "fd_reserve", lim.Reserve)
	if cfg.Ready != nil {
		close(cfg.Ready)
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("daemon: %w", err)
		}
		return nil
	}
}

// compose builds the tree engine of home over the dir backend's files
// layer (the workspace manager) behind a router; closeAll closes the engine.
//
// The verbs a view's control files ask for come in through the router as
// the faces' do, timed and counted as face "ctl" in m and audited in aud
// (nil: neither).
//
// images, if given, change the image store's config (tests name a
// stand-in builder there).
func compose(home string, passthrough *bool, transport string, ab *fusemount.Aborter, log *slog.Logger, m *metrics.Metrics, aud *audit.Log, images ...func(*image.Config)) (r *router, closeAll func(), err error) {
	rules, err := access.New(access.Config{Home: home})
	if err != nil {
		return nil, nil, err
	}
	ws, err := workspace.New(workspace.Config{Home: home, Passthrough: passthrough, Transport: transport, Aborter: ab, Logger: log, Access: rules})
	if err != nil {
		return nil, nil, err
	}
	// Before 2026-12-01 a workspace mount had a store of its own under
	// HOME/ws, remembered in HOME/mounts.json; mounts are views of trees
	// now, and that state is not carried over (it stays on disk).
	for _, old := range []string{"ws", "mounts.json"} {
		if _, err := os.Stat(filepath.Join(home, old)); err == nil {
			log.Warn("workspace state from before mounts were views of trees is not carried over: mount those bases again; remove it when done",
				"path", filepath.Join(home, old))
		}
	}
	// Root filesystem images, for jail trees that name one.
	icfg := image.Config{Dir: filepath.Join(home, "images")}
	for _, f := range images {
		f(&icfg)
	}
	imgs, err := image.New(icfg)
	if err != nil {
		return nil, nil, err
	}
	r = &router{images: imgs}
	eng, err := engine.New(engine.Config{
		Home:     home, // trees.db and trees/<id>/
		Backends: backends(home, log, imgs),
		OpenFiles: func(ctx context.Context, dir, base string) (engine.Files, error) {
			return ws.OpenTreeFiles(ctx, dir, base)
		},
		ResolveBase: ws.ResolveBase,
		Via: func(ctx context.Context, req api.Request) (api.Response, error) {
			start := time.Now()
			resp, err := r.Do(ctx, req)
			code := metrics.CodeOK
			if err != nil {
				code = api.Code(err)
			}
			d := time.Since(start)
			m.Observe(metrics.FaceCtl, req.Op, code, d)
			e := audit.Entry{Face: audit.FaceCtl, Op: req.Op, Path: req.Mountpoint, Tree: resp.TreeID, Node: resp.NodeID, DurationUS: d.Microseconds()}
			if err != nil {
				e.Code = code
			}
			if cred, ok := access.FromContext(ctx); ok {
				e.UID = &cred.UID
			}
			aud.Write(e)
			return resp, err
		},
		Logger: log,
	})
	if err != nil {
		return nil, nil, err
	}
	r.eng = eng
	closeAll = func() {
		if err := eng.Close(); err != nil {
			log.Warn("close engine", "err", err)
		}
	}
	return r, closeAll, nil
}

// backends are the sandbox backends this daemon serves: dir always, jail
// when this process can run sandboxes (root, cgroups, and a binary that
// calls jail.Main first), vm where QEMU, a guest kernel and the guest agent
// (arbor-guest, next to this binary or on PATH) are (its images cached in
// HOME/vm-images, with the host's python3 in the guest where there is
// one); otherwise tree_create --backend jail gets the engine's
// "unknown; this daemon serves dir".
func backends(home string, log *slog.Logger, imgs *image.Store) map[string]engine.OpenBackend {
	out := map[string]engine.OpenBackend{engine.BackendDir: engine.OpenDirBackend}
	agent, _ := vmbackend.FindAgent()
	vcfg := vmbackend.Config{VM: vm.Config{Home: filepath.Join(home, "vm-images"), Agent: agent, Include: vm.PythonInclude()}}
	if err := vmbackend.Available(vcfg); err != nil {
		if log != nil {
			log.Info("backend vm not served", "why", err)
		}
	} else {
		out[vmbackend.Name] = vmbackend.Open(vcfg)
	}
	if err := jailbackend.Available(); err != nil {
		if log != nil {
			log.Info("backend jail not served", "why", err)
		}
		return out
	}
	out[jailbackend.Name] = jailbackend.Open(jailbackend.Config{Image: func(name string) (string, error) {
		im, err := imgs.Get(name)
		return im.Root, err
	}})
	return out
}

// router sends the verbs to the engine; it serves ping and shutdown itself.
type router struct {
	eng      *engine.Engine
	uid      uint32 // the daemon's effective uid
	shutdown func() // ends Run; nil refuses shutdown
	images   *image.Store
}

func (r *router) Do(ctx context.Context, req api.Request) (api.Response, error) {
	switch req.Op {
	case api.OpPing:
		return api.Response{Status: "pong", Version: Version}, nil
	case api.OpShutdown:
		uid, ok := lineapi.Peer(ctx)
		if !ok {
			return api.Response{}, api.Errorf(api.ErrAuth, "shutdown: only over the daemon's socket")
		}
		if uid != 0 && uid != r.uid {
			return api.Response{}, api.Errorf(api.ErrAuth, "shutdown: uid %d may not stop the daemon (root and uid %d may)", uid, r.uid)
		}
		if r.shutdown == nil {
			return api.Response{}, api.Errorf(api.ErrBadRequest, "shutdown: not served here")
		}
		r.shutdown()
		return api.Response{Status: "shutting_down"}, nil
	case api.OpImageList, api.OpImageRm:
		return r.image(ctx, req)
	case api.OpImageBuild: // collected: the progress dropped (BuildImage streams it)
		return r.BuildImage(ctx, req, func(string) error { return nil })
	}
	return r.eng.Do(ctx, req)
}

func (r *router) Watch(ctx context.Context, treeID string) (api.Response, <-chan api.Event, error) {
	return r.eng.Watch(ctx, treeID)
}

func (r *router) Exec(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error) {
	return r.eng.Exec(ctx, req, out)
}

// ExecInput, OpenFile, WriteFile and Logs serve the streamed verbs (the
// faces' InputExecer, Filer and Logger).
func (r *router) ExecInput(ctx context.Context, req api.Request, stdin io.Reader, resize <-chan api.Input, out func(api.ExecOutput) error) (api.ExecExit, error) {
	return r.eng.ExecInput(ctx, req, stdin, resize, out)
}

func (r *router) OpenFile(ctx context.Context, req api.Request) (io.ReadCloser, api.FileInfo, error) {
	return r.eng.OpenFile(ctx, req)
}

func (r *router) WriteFile(ctx context.Context, req api.Request, rd io.Reader) (api.FileInfo, error) {
	return r.eng.WriteFile(ctx, req, rd)
}

// ReadFile copies a node's file to w (the MCP server's read_file).
func (r *router) ReadFile(ctx context.Context, treeID, nodeID, path string, w io.Writer) (api.FileInfo, error) {
	rc, fi, err := r.eng.OpenFile(ctx, api.Request{TreeID: treeID, NodeID: nodeID, Path: path})
	if err != nil {
		return api.FileInfo{}, err
	}
	defer rc.Close()
	_, err = io.Copy(w, rc)
	return fi, err
}

func (r *router) Logs(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (*api.ExecExit, error) {
	return r.eng.Logs(ctx, req, out)
}

// gauges turns the engine's per-tree figures into the metrics' gauges.
func gauges(eng *engine.Engine) []metrics.TreeGauge {
	var out []metrics.TreeGauge
	for _, t := range eng.Stats() {
		out = append(out, metrics.TreeGauge{
			TreeID: t.TreeID, Nodes: t.Nodes,
			LiveNodes: t.Usage.LiveNodes, MaxLiveNodes: t.Budget.MaxLiveNodes,
			RAMBytes: t.Usage.LiveRAMBytes, MaxRAMBytes: t.Budget.MaxLiveRAMBytes,
			DiskBytes: t.Usage.DiskBytes, MaxDiskBytes: t.Budget.MaxDiskBytes,
		})
	}
	return out
}
