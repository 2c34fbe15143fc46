package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/audit"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestImageAccess: a uid the socket admits (--allow-uid 65534) may list
// the images but not build or remove one (builds run mmdebstrap as root,
// and an image is the root of other users' trees): forbidden, before its
// request is even checked, and audited with its uid and code. The HTTP
// token counts as the daemon: its image_rm of a missing name is
// not_found, not forbidden, and the image routes are audited.
func TestImageAccess(t *testing.T) {
	testenv.NeedFUSE(t)
	_, home, sock := sharedDirs(t)
	addr := freeAddr(t)
	startDaemon(t, Config{Home: home, Socket: sock, AllowUIDs: []int{65534}, HTTPAddr: addr, Token: testToken})

	nobody := dialAs(t, sock, 65534, 65534)
	// An invalid variant: were the refusal gone, this would be a
	// bad_request, not a build.
	for _, req := range []api.Request{
		{Op: api.OpImageBuild, Image: "mine", Variant: "not-a-variant"},
		{Op: api.OpImageRm, Image: "mine"},
	} {
		if _, err := ask(t, nobody, req); !errors.Is(err, api.ErrForbidden) || !strings.Contains(err.Error(), "uid 65534") {
			t.Errorf("uid 65534 %s: %v, want forbidden naming the uid", req.Op, err)
		}
	}
	if r, err := ask(t, nobody, api.Request{Op: api.OpImageList}); err != nil || r.Status != "image_list" {
		t.Errorf("uid 65534 image_list: %+v %v", r, err)
	}

	hc := client.NewHTTP("http://"+addr, testToken, nil)
	if _, err := hc.Do(t.Context(), api.Request{Op: api.OpImageRm, Image: "nope"}); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("image_rm over HTTP of a missing image: %v, want not_found", err)
	}
	if r, err := hc.Do(t.Context(), api.Request{Op: api.OpImageList}); err != nil || len(r.Images) != 0 {
		t.Errorf("image_list over HTTP: %+v %v", r, err)
	}

	b, err := os.ReadFile(filepath.Join(home, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"line image_build 65534 forbidden": false, "line image_rm 65534 forbidden": false, "line image_list 65534 ": false,
		"http image_rm DELETE /v1/images/nope not_found": false, "http image_list GET /v1/images ": false,
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var e audit.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		key := e.Face + " " + e.Op + " " + e.Method + " " + e.Path + " " + e.Code
		if e.Face == audit.FaceLine && e.UID != nil {
			key = strings.Join([]string{e.Face, e.Op, strconv.FormatUint(uint64(*e.UID), 10), e.Code}, " ")
		}
		if _, ok := want[key]; ok {
			want[key] = true
		}
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("the audit log has no %q line:\n%s", k, b)
		}
	}
}

// TestMayChangeImages: root and the daemon's uid may change images,
// another uid and a request without credentials may not.
func TestMayChangeImages(t *testing.T) {
	r := &router{uid: 1000}
	for _, tc := range []struct {
		cred *access.Cred
		ok   bool
	}{
		{&access.Cred{UID: 0}, true},
		{&access.Cred{UID: 1000}, true},
		{&access.Cred{UID: 65534}, false},
		{nil, false},
	} {
		ctx := t.Context()
		if tc.cred != nil {
			ctx = access.WithCred(ctx, *tc.cred)
		}
		err := r.mayChangeImages(ctx, api.OpImageBuild)
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, api.ErrForbidden) {
			t.Errorf("cred %v: %v", tc.cred, err)
		}
	}
}
