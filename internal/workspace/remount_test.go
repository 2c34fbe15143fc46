package workspace_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestMountSameBaseAgain: ws_mount of the base already mounted at that
// mountpoint succeeds and says so (AlreadyMounted), for whoever may use the
// mount; another branch asked for, another base there, or another uid is
// refused, and the mount stays as it was.
func TestMountSameBaseAgain(t *testing.T) {
	testenv.NeedFUSE(t)
	m := newStack(t)
	// A base uid 65534 may read, so that the owner rule answers, not the
	// base's.
	pub, err := os.MkdirTemp("", "arbor-remount-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pub) })
	os.Chmod(pub, 0o755)
	base, other := filepath.Join(pub, "base"), t.TempDir()
	os.Mkdir(base, 0o755)
	os.Chown(base, 65534, 65534)
	os.WriteFile(filepath.Join(base, "a.txt"), []byte("a"), 0o644)
	mp := filepath.Join(t.TempDir(), "ws")
	self := access.WithCred(context.Background(), access.Self())
	do := func(ctx context.Context, r api.Request) (api.Response, error) { return m.Do(ctx, r) }
	r, err := do(self, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp})
	if err != nil || r.AlreadyMounted {
		t.Fatalf("first mount: %+v, %v", r, err)
	}
	t.Cleanup(func() { do(self, api.Request{Op: api.OpWsUnmount, Mountpoint: mp}) })
	r, err = do(self, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp})
	if err != nil || !r.AlreadyMounted || r.Branch != "main" {
		t.Fatalf("the same mount again: %+v, %v; want success with already_mounted", r, err)
	}
	if _, err := do(self, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp, Branch: "main"}); err != nil {
		t.Errorf("again, asking for the branch it shows: %v", err)
	}
	if _, err := do(self, api.Request{Op: api.OpWsCreate, Mountpoint: mp, Branch: "b"}); err != nil {
		t.Fatal(err)
	}
	_, err = do(self, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp, Branch: "main"})
	if !errors.Is(err, api.ErrExists) {
		t.Errorf("again, asking for main while it shows b: %v, want ErrExists", err)
	}
	_, err = do(self, api.Request{Op: api.OpWsMount, Base: other, Mountpoint: mp})
	if !errors.Is(err, api.ErrExists) {
		t.Errorf("another base there: %v, want ErrExists", err)
	}
	nobody := access.WithCred(context.Background(), access.Cred{UID: 65534, GID: 65534})
	r, err = do(nobody, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp})
	if !errors.Is(err, api.ErrForbidden) || r.AlreadyMounted {
		t.Errorf("uid 65534 mounting root's mount again: %+v, %v; want ErrForbidden", r, err)
	} else if !strings.Contains(err.Error(), "belongs to uid 0") {
		t.Errorf("uid 65534 refused by %q, want the owner rule (of the tree or the mount)", err)
	}
	if b, err := os.ReadFile(filepath.Join(mp, "@b", "a.txt")); err != nil || string(b) != "a" {
		t.Errorf("the mount after the refusals: %q, %v", b, err)
	}
}
