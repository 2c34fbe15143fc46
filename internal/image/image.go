package image

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
	"golang.org/x/sys/unix"
)

// builderVersion is part of every image's ID: change it when what Build
// makes of the same inputs changes, so that old images are rebuilt.
const builderVersion = "1"

// Defaults of a Spec.
const (
	DefaultSuite   = "bookworm"
	DefaultVariant = "minbase"
	DefaultMirror  = "http://deb.debian.org/debian"
)

// Host is the name of the root that is no image: the host's own
// directories (a jail's default). No image may take it.
const Host = "host"

// Variants are mmdebstrap's variants.
var Variants = []string{"extract", "custom", "essential", "apt", "required", "minbase", "buildd", "important", "debootstrap", "standard"}

var (
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	packageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	suiteRE   = regexp.MustCompile(`^[a-z][a-z0-9.-]{0,63}$`)
	hookIDRE  = regexp.MustCompile(`^[A-Za-z0-9._:+-]{1,128}$`)
)

// Spec is what an image is built from. Its zero fields take the defaults.
type Spec struct {
	Name     string
	Suite    string   // default DefaultSuite
	Variant  string   // one of Variants; default DefaultVariant
	Packages []string // installed besides the variant's
	// Mirror is the Debian mirror's URL; default: apt's here (Mirror).
	Mirror string
	// Hook, if set, runs on the built root filesystem (a host directory)
	// before the image is published: a failed hook fails the build.
	// HookID names what it does and is part of the image's ID (required
	// with a Hook): change it when the hook's output changes.
	Hook   func(ctx context.Context, root string) error
	HookID string
}

// Image is one built image under a name.
type Image struct {
	Name string
	ID   string
	// Root is the image's root filesystem, a directory on the host.
	Root      string
	Suite     string
	Variant   string
	Packages  []string
	Mirror    string
	HookID    string
	BuiltAt   time.Time
	SizeBytes int64
}

// API is the image as the wire has it.
func (im Image) API() api.Image {
	return api.Image{Name: im.Name, ID: im.ID, Suite: im.Suite, Variant: im.Variant, Packages: im.Packages,
		Mirror: im.Mirror, HookID: im.HookID, BuiltAtNS: im.BuiltAt.UnixNano(), SizeBytes: im.SizeBytes}
}

// record is image.json.
type record struct {
	ID             string    `json:"id"`
	BuilderVersion string    `json:"builder_version"`
	Suite          string    `json:"suite"`
	Variant        string    `json:"variant"`
	Packages       []string  `json:"packages"`
	Mirror         string    `json:"mirror"`
	HookID         string    `json:"hook_id,omitempty"`
	BuiltAt        time.Time `json:"built_at"`
	SizeBytes      int64     `json:"size_bytes"`
}

// Config configures a Store.
type Config struct {
	// Dir holds the images (required, absolute): $ARBOR_HOME/images.
	Dir string
	// Mmdebstrap and Unshare are the programs Build runs; default the
	// ones on PATH.
	Mmdebstrap, Unshare string
	// Sources are apt's source files the default mirror is read from;
	// default /etc/apt/sources.list and /etc/apt/sources.list.d/*.
	Sources []string
}

// Store holds the images of one directory.
type Store struct {
	cfg Config
	mu  sync.Mutex // orders the names within this process (with the .lock flock across processes)
}

// New opens (making it if need be) the store at cfg.Dir and removes
// what builds cut short left there.
func New(cfg Config) (*Store, error) {
	if cfg.Dir == "" || !filepath.IsAbs(cfg.Dir) {
		return nil, api.Errorf(api.ErrBadRequest, "image: directory %q must be an absolute path", cfg.Dir)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "names"), 0o755); err != nil {
		return nil, fmt.Errorf("image: %w: %w", api.ErrInternal, err)
	}
	if cfg.Sources == nil {
		cfg.Sources = append([]string{"/etc/apt/sources.list"}, globAll("/etc/apt/sources.list.d/*.list", "/etc/apt/sources.list.d/*.sources")...)
	}
	s := &Store{cfg: cfg}
	ents, err := os.ReadDir(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("image: %w: %w", api.ErrInternal, err)
	}
	for _, e := range ents {
		if id, ok := buildID(e.Name()); ok {
			// Only when no build of that id runs (another store's).
			if unlock, err := s.tryLockID(id); err == nil && unlock != nil {
				os.RemoveAll(filepath.Join(cfg.Dir, e.Name()))
				unlock()
			}
		}
	}
	return s, nil
}

func globAll(patterns ...string) []string {
	var out []string
	for _, p := range patterns {
		m, _ := filepath.Glob(p)
		out = append(out, m...)
	}
	sort.Strings(out)
	return out
}

// buildID returns the id of a build directory's name (.build-<id>-*).
func buildID(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, ".build-")
	if !ok {
		return "", false
	}
	id, _, ok := strings.Cut(rest, "-")
	return id, ok
}

// CheckName says whether name may name an image: nil, or an error
// wrapping api.ErrBadRequest.
func CheckName(name string) error {
	if name == Host {
		return api.Errorf(api.ErrBadRequest, "image: %q is the host's root, not an image", name)
	}
	if !nameRE.MatchString(name) {
		return api.Errorf(api.ErrBadRequest, "image: name %q: want 1-64 of [A-Za-z0-9._-], not starting with . - _", name)
	}
	return nil
}

// Normalize checks spec and fills its defaults (the mirror from apt's
// sources); the packages come out sorted, without repeats.
func (s *Store) Normalize(spec Spec) (Spec, error) {
	if err := CheckName(spec.Name); err != nil {
		return spec, err
	}
	if spec.Suite == "" {
		spec.Suite = DefaultSuite
	}
	if !suiteRE.MatchString(spec.Suite) {
		return spec, api.Errorf(api.ErrBadRequest, "image: suite %q", spec.Suite)
	}
	if spec.Variant == "" {
		spec.Variant = DefaultVariant
	}
	if !slices.Contains(Variants, spec.Variant) {
		return spec, api.Errorf(api.ErrBadRequest, "image: variant %q: want one of %s", spec.Variant, strings.Join(Variants, ", "))
	}
	pk := slices.Clone(spec.Packages)
	for _, p := range pk {
		if !packageRE.MatchString(p) {
			return spec, api.Errorf(api.ErrBadRequest, "image: package name %q", p)
		}
	}
	slices.Sort(pk)
	spec.Packages = slices.Compact(pk)
	if spec.Mirror == "" {
		spec.Mirror = Mirror(s.cfg.Sources, spec.Suite)
	}
	if !strings.HasPrefix(spec.Mirror, "http://") && !strings.HasPrefix(spec.Mirror, "https://") && !strings.HasPrefix(spec.Mirror, "file:/") {
		return spec, api.Errorf(api.ErrBadRequest, "image: mirror %q is no http(s) or file URL", spec.Mirror)
	}
	if strings.ContainsAny(spec.Mirror, " \t\n") {
		return spec, api.Errorf(api.ErrBadRequest, "image: mirror %q", spec.Mirror)
	}
	if (spec.Hook == nil) != (spec.HookID == "") {
		return spec, api.Errorf(api.ErrBadRequest, "image: a Hook needs a HookID and a HookID a Hook")
	}
	if spec.HookID != "" && !hookIDRE.MatchString(spec.HookID) {
		return spec, api.Errorf(api.ErrBadRequest, "image: hook id %q", spec.HookID)
	}
	return spec, nil
}

// ID is the hash of a normalized spec's inputs: what the image is cached by.
func ID(spec Spec) string {
	b, _ := json.Marshal(struct {
		V, Suite, Variant, Mirror, HookID string
		Packages                          []string
	}{builderVersion, spec.Suite, spec.Variant, spec.Mirror, spec.HookID, spec.Packages})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// Build builds the image spec names, or finds it built (cached true), and
// points its name at it. progress gets each line of the build's progress
// as it comes (mmdebstrap's, and a line per step of ours), from one
// goroutine at a time. ctx bounds the build: its end kills it, and it
// leaves nothing behind.
func (s *Store) Build(ctx context.Context, spec Spec, progress func(string)) (_ Image, cached bool, err error) {
	if progress == nil {
		progress = func(string) {}
	}
	spec, err = s.Normalize(spec)
	if err != nil {
		return Image{}, false, err
	}
	id := ID(spec)
	unlock, err := s.tryLockID(id)
	if err != nil {
		return Image{}, false, err
	}
	if unlock == nil {
		progress(fmt.Sprintf("waiting for another build of image %s (the same inputs)", id))
		if unlock, err = s.lockID(ctx, id); err != nil {
			return Image{}, false, err
		}
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(s.cfg.Dir, id, "image.json")); err == nil {
		progress(fmt.Sprintf("image %s is cached (%s)", spec.Name, id))
		im, err := s.setName(spec.Name, id)
		return im, true, err
	}
	// Builds of this id cut short: nothing runs in them (we hold the lock).
	s.removeBuilds(id)
	if err := s.build(ctx, spec, id, progress); err != nil {
		return Image{}, false, err
	}
	im, err := s.setName(spec.Name, id)
	return im, false, err
}

func (s *Store) removeBuilds(id string) {
	ents, _ := os.ReadDir(s.cfg.Dir)
	for _, e := range ents {
		if bid, ok := buildID(e.Name()); ok && bid == id {
			os.RemoveAll(filepath.Join(s.cfg.Dir, e.Name()))
		}
	}
}

// build makes <dir>/<id> from spec; the id's lock is held.
func (s *Store) build(ctx context.Context, spec Spec, id string, progress func(string)) (err error) {
	tmp, err := os.MkdirTemp(s.cfg.Dir, ".build-"+id+"-")
	if err != nil {
		return fmt.Errorf("image: %w: %w", api.ErrInternal, err)
	}
	defer func() {
		if err != nil {
			removeAll(tmp)
		}
	}()
	// apt's download sandbox (user _apt) needs to reach the new root.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("image: %w: %w", api.ErrInternal, err)
	}
	root := filepath.Join(tmp, "rootfs")
	start := time.Now()
	progress(fmt.Sprintf("building image %s (%s): mmdebstrap %s %s, variant %s, packages [%s]", spec.Name, id, spec.Suite, spec.Mirror, spec.Variant, strings.Join(spec.Packages, " ")))
	if err := s.mmdebstrap(ctx, spec, root, progress); err != nil {
		return err
	}
	if spec.Hook != nil {
		progress(fmt.Sprintf("running hook %s", spec.HookID))
		if err := spec.Hook(ctx, root); err != nil {
			return fmt.Errorf("image %s: hook %s: %w", spec.Name, spec.HookID, err)
		}
	}
	size, err := diskUsage(root)
	if err != nil {
		return fmt.Errorf("image %s: %w: size: %w", spec.Name, api.ErrInternal, err)
	}
	rec := record{ID: id, BuilderVersion: builderVersion, Suite: spec.Suite, Variant: spec.Variant, Packages: spec.Packages,
		Mirror: spec.Mirror, HookID: spec.HookID, BuiltAt: time.Now().UTC(), SizeBytes: size}
	b, _ := json.MarshalIndent(rec, "", "  ")
	if err := writeSync(filepath.Join(tmp, "image.json"), append(b, '\n')); err != nil {
		return fmt.Errorf("image %s: %w: %w", spec.Name, api.ErrInternal, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("image %s: %w", spec.Name, err)
	}
	if err := os.Rename(tmp, filepath.Join(s.cfg.Dir, id)); err != nil {
		return fmt.Errorf("image %s: %w: publish: %w", spec.Name, api.ErrInternal, err)
	}
	syncDir(s.cfg.Dir)
	progress(fmt.Sprintf("image %s built in %.1fs, %d MiB", spec.Name, time.Since(start).Seconds(), size>>20))
	return nil
}

// mmdebstrap runs the build of root, its output lines sent to progress.
func (s *Store) mmdebstrap(ctx context.Context, spec Spec, root string, progress func(string)) error {
	mm, us := s.cfg.Mmdebstrap, s.cfg.Unshare
	if mm == "" {
		mm = "mmdebstrap"
	}
	if us == "" {
		us = "unshare"
	}
	mmPath, err := exec.LookPath(mm)
	if err != nil {
		return api.Errorf(api.ErrUnavailable, "image: mmdebstrap is not installed (apt-get install mmdebstrap): %v", err)
	}
	usPath, err := exec.LookPath(us)
	if err != nil {
		return api.Errorf(api.ErrUnavailable, "image: unshare is not installed (util-linux): %v", err)
	}
	if os.Geteuid() != 0 {
		return api.Errorf(api.ErrUnavailable, "image: building needs root (mmdebstrap's root mode)")
	}
	args := []string{"--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", "--mount-proc", "--",
		mmPath, "--mode=root", "--format=directory", "--variant=" + spec.Variant}
	if len(spec.Packages) > 0 {
		args = append(args, "--include="+strings.Join(spec.Packages, ","))
	}
	args = append(args, spec.Suite, root, spec.Mirror)
	cmd := exec.CommandContext(ctx, usPath, args...)
	// The build's processes die with unshare's child (--kill-child); that
	// child dies with unshare, and unshare with its caller.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C.UTF-8")
	cmd.WaitDelay = 10 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var tail []string // the last lines, for the error
	var wg sync.WaitGroup
	wg.Go(func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			progress(line)
			if tail = append(tail, line); len(tail) > 8 {
				tail = tail[1:]
			}
		}
		io.Copy(io.Discard, pr)
	})
	// Pdeathsig fires when the thread that forked the child ends, and Go
	// ends a thread when a goroutine locked to it exits: fork from a
	// thread locked for the build's length, which nothing else can run
	// on (and so lock and end) meanwhile.
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			errc <- err
			return
		}
		errc <- cmd.Wait()
	}()
	err = <-errc
	pw.Close()
	wg.Wait()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("image %s: build cut short: %w", spec.Name, ctx.Err())
		}
		return api.Errorf(api.ErrInternal, "image %s: mmdebstrap failed (%v): %s", spec.Name, err, strings.Join(tail, " | "))
	}
	return nil
}

// Get returns the image named name, or an error wrapping api.ErrNotFound.
func (s *Store) Get(name string) (Image, error) {
	if err := CheckName(name); err != nil {
		return Image{}, err
	}
	b, err := os.ReadFile(filepath.Join(s.cfg.Dir, "names", name))
	if errors.Is(err, os.ErrNotExist) {
		return Image{}, api.Errorf(api.ErrNotFound, "image %q does not exist (arbor image build %s)", name, name)
	}
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w: %w", name, api.ErrInternal, err)
	}
	return s.load(name, strings.TrimSpace(string(b)))
}

func (s *Store) load(name, id string) (Image, error) {
	dir := filepath.Join(s.cfg.Dir, id)
	b, err := os.ReadFile(filepath.Join(dir, "image.json"))
	if err != nil {
		return Image{}, api.Errorf(api.ErrNotFound, "image %q: its files (%s) are gone: %v", name, id, err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return Image{}, fmt.Errorf("image %s: %w: image.json: %w", name, api.ErrInternal, err)
	}
	return Image{Name: name, ID: r.ID, Root: filepath.Join(dir, "rootfs"), Suite: r.Suite, Variant: r.Variant, Packages: r.Packages,
		Mirror: r.Mirror, HookID: r.HookID, BuiltAt: r.BuiltAt, SizeBytes: r.SizeBytes}, nil
}

// List returns every named image, by name.
func (s *Store) List() ([]Image, error) {
	ents, err := os.ReadDir(filepath.Join(s.cfg.Dir, "names"))
	if err != nil {
		return nil, fmt.Errorf("image: %w: %w", api.ErrInternal, err)
	}
	var out []Image
	for _, e := range ents {
		if CheckName(e.Name()) != nil {
			continue // a temporary file of setName
		}
		im, err := s.Get(e.Name())
		if errors.Is(err, api.ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, im)
	}
	return out, nil
}

// Remove removes name, and its files if no other name holds them.
func (s *Store) Remove(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	unlock, err := s.lockNames()
	if err != nil {
		return err
	}
	defer unlock()
	p := filepath.Join(s.cfg.Dir, "names", name)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return api.Errorf(api.ErrNotFound, "image %q does not exist", name)
	}
	if err != nil {
		return fmt.Errorf("image %s: %w: %w", name, api.ErrInternal, err)
	}
	if err := os.Remove(p); err != nil {
		return fmt.Errorf("image %s: %w: %w", name, api.ErrInternal, err)
	}
	syncDir(filepath.Dir(p))
	return s.dropUnnamed(strings.TrimSpace(string(b)))
}

// setName points name at id and drops what name held before if no
// other name holds it.
func (s *Store) setName(name, id string) (Image, error) {
	unlock, err := s.lockNames()
	if err != nil {
		return Image{}, err
	}
	defer unlock()
	p := filepath.Join(s.cfg.Dir, "names", name)
	old, _ := os.ReadFile(p)
	tmp := filepath.Join(s.cfg.Dir, "names", ".tmp-"+name) // no name starts with a dot
	if err := writeSync(tmp, []byte(id+"\n")); err != nil {
		return Image{}, fmt.Errorf("image %s: %w: %w", name, api.ErrInternal, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return Image{}, fmt.Errorf("image %s: %w: %w", name, api.ErrInternal, err)
	}
	syncDir(filepath.Dir(p))
	if o := strings.TrimSpace(string(old)); o != "" && o != id {
		if err := s.dropUnnamed(o); err != nil {
			return Image{}, err
		}
	}
	return s.load(name, id)
}

// dropUnnamed removes id's files if no name holds them and no build of
// it runs; the names lock is held.
func (s *Store) dropUnnamed(id string) error {
	if !isID(id) {
		return nil
	}
	ents, err := os.ReadDir(filepath.Join(s.cfg.Dir, "names"))
	if err != nil {
		return fmt.Errorf("image: %w: %w", api.ErrInternal, err)
	}
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join(s.cfg.Dir, "names", e.Name())); err == nil && strings.TrimSpace(string(b)) == id {
			return nil
		}
	}
	unlock, err := s.tryLockID(id)
	if err != nil || unlock == nil {
		return err // a build of it runs: it names it again when done
	}
	defer unlock()
	// Unpublish first (a rename), then remove at leisure: a crash midway
	// leaves a .build- directory, which New removes.
	dir := filepath.Join(s.cfg.Dir, id)
	trash := filepath.Join(s.cfg.Dir, ".build-"+id+"-removed")
	if err := os.Rename(dir, trash); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("image %s: %w: %w", id, api.ErrInternal, err)
	}
	return removeAll(trash)
}

var idRE = regexp.MustCompile(`^[0-9a-f]{24}$`)

func isID(s string) bool { return idRE.MatchString(s) }

// lockNames takes the store's names lock.
func (s *Store) lockNames() (func(), error) {
	s.mu.Lock()
	f, err := os.OpenFile(filepath.Join(s.cfg.Dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("image: %w: %w", api.ErrInternal, err)
	}
	if err := flock(f, unix.LOCK_EX); err != nil {
		f.Close()
		s.mu.Unlock()
		return nil, fmt.Errorf("image: %w: lock: %w", api.ErrInternal, err)
	}
	return func() { f.Close(); s.mu.Unlock() }, nil
}

// tryLockID takes id's build lock if it is free: nil unlock (and nil
// error) when another build holds it.
func (s *Store) tryLockID(id string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.cfg.Dir, ".lock-"+id), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image: %w: %w", api.ErrInternal, err)
	}
	err = flock(f, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		f.Close()
		return nil, nil
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("image: %w: lock: %w", api.ErrInternal, err)
	}
	return func() { f.Close() }, nil
}

// lockID waits for id's build lock until ctx ends.
func (s *Store) lockID(ctx context.Context, id string) (func(), error) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		unlock, err := s.tryLockID(id)
		if err != nil || unlock != nil {
			return unlock, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("image: waiting for a build of %s: %w", id, ctx.Err())
		case <-t.C:
		}
	}
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func writeSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// removeAll removes a build's directory. Its processes were killed just
// before (a cancelled build) and may still be leaving files as they die:
// try a few times.
func removeAll(dir string) error {
	var err error
	for i := 0; i < 20; i++ {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("image: %w: remove %s: %w", api.ErrInternal, dir, err)
}

// diskUsage is the bytes the files under root take on disk (each inode
// once).
func diskUsage(root string) (int64, error) {
	seen := map[uint64]bool{}
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Nlink > 1 && !d.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.cfg.Dir }
