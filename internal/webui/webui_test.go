package webui_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/daemontest"
	"github.com/arbor-dev/arbor/internal/testenv"
)

const token = daemontest.Token

// ChromiumPath is Debian's chromium (scripts/setup.sh installs it).
const ChromiumPath = "/usr/bin/chromium"

func startDaemon(tb testing.TB) daemontest.Daemon { return daemontest.Start(tb, true) }

// browser starts headless chromium with the flags this closed network
// needs (without them chromium waits on connections it cannot make) and
// a fresh profile; it skips, or fails under ARBOR_TEST_REQUIRE, when
// chromium is not installed.
func browser(tb testing.TB) context.Context {
	tb.Helper()
	if _, err := exec.LookPath(ChromiumPath); err != nil {
		testenv.Missing(tb, testenv.Chromium, "needs Debian's chromium at "+ChromiumPath+" (scripts/setup.sh installs it): "+err.Error())
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(ChromiumPath),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(tb.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	tb.Cleanup(func() { cancelB(); cancelA() })
	// Start the browser now, so a broken one fails here with its reason
	// (on ctx itself: the first call's context is the browser's lifetime).
	if err := chromedp.Do(ctx); err != nil {
		tb.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// run runs browser actions with a deadline.
func run(tb testing.TB, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
}

// clickJS clicks what sel finds in one evaluation in the page, polling
// until it is there: the view redraws its rows on every event, and a row
// found by one call and clicked by the next can be gone in between.
func clickJS(sel string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Poll[bool](fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true; })()`, sel))(ctx, t)
		return chromedp.Void{}, err
	}
}

func row(id string) string { return fmt.Sprintf(`#rows [data-node-id=%q]`, id) }

// waitJS polls a JS expression in the page until it is true.
func waitJS(tb testing.TB, ctx context.Context, what, expr string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(10*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
}

// login opens the page, gives the token, and waits for the root's row.
func login(tb testing.TB, ctx context.Context, d daemontest.Daemon, tree, root string) {
	tb.Helper()
	run(tb, ctx, "load the page and give the token",
		chromedp.Navigate(d.URL+"/ui/#tree="+tree),
		chromedp.WaitVisible(chromedp.CSS(`#token-input`)),
		chromedp.SendKeys(chromedp.CSS(`#token-input`), token),
		clickJS(`#token-save`),
		chromedp.WaitVisible(chromedp.CSS(row(root))),
	)
}

func nodeStates(tb testing.TB, d daemontest.Daemon, tree string) map[string]api.Node {
	tb.Helper()
	r, err := d.Client.Nodes(context.Background(), tree)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]api.Node{}
	for _, n := range r.Nodes {
		out[n.ID] = n
	}
	return out
}

// TestLiveView loads the page against a real daemon in headless chromium
// and watches it follow the tree without a reload: forks appear, a commit
// makes the siblings stale and its child go, a prune removes a subtree, a
// batch of 50 forks arrives, the budget bars move; actions clicked on the
// page (with their confirmation) are done by the daemon; a reload keeps
// the token. It saves a screenshot (in $ARBOR_ARTIFACTS when set).
func TestLiveView(t *testing.T) {
	d := startDaemon(t)
	ctx := browser(t)
	bg := context.Background()
	r, err := d.Client.Do(bg, api.Request{Op: api.OpTreeCreate, TreeID: "t1", Base: d.Base, Budget: &api.Budget{MaxLiveNodes: 64}})
	if err != nil {
		t.Fatal(err)
	}
	root := r.Root

	// The page without the token is only the form; the data routes refuse it.
	res, err := http.Get(d.URL + "/v1/trees")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /v1/trees without the token: %s", res.Status)
	}
	login(t, ctx, d, "t1", root)
	waitJS(t, ctx, "the budget bars", `document.querySelector('[data-meter="live nodes"]')?.textContent.includes("1 of 64")`)

	forks, _, err := d.Client.ForkBatch(bg, "t1", root, []string{"retry", "rewrite", "skip"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forks {
		run(t, ctx, "fork "+f.NodeID+" appears", chromedp.WaitVisible(chromedp.CSS(row(f.NodeID))))
	}
	waitJS(t, ctx, "the label is drawn", fmt.Sprintf(`document.querySelector(%q)?.textContent.includes("rewrite")`, row(forks[1].NodeID)))
	waitJS(t, ctx, "live nodes 4", `document.querySelector('[data-meter="live nodes"]').textContent.includes("4 of 64")`)

	if err := os.WriteFile(filepath.Join(forks[1].Path, "fix.txt"), []byte("fixed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Selecting the node shows its diff against the fork point: the path
	// and the text diff, drawn as text.
	run(t, ctx, "select "+forks[1].NodeID, clickJS(row(forks[1].NodeID)))
	waitJS(t, ctx, "the diff shows fix.txt", `document.querySelector('#detail .change[data-path="fix.txt"] code')?.textContent === "A fix.txt"`)
	waitJS(t, ctx, "the diff shows the added line", `document.querySelector('#detail .change[data-path="fix.txt"] pre')?.textContent.split("\n").includes("+fixed")`)
	run(t, ctx, "select the root", clickJS(row(root)))
	waitJS(t, ctx, "the root has no fork point", `document.getElementById("detail").textContent.includes("The root has no fork point")`)
	if _, err := d.Client.Commit(bg, "t1", forks[1].NodeID); err != nil {
		t.Fatal(err)
	}
	for _, f := range []api.Fork{forks[0], forks[2]} {
		waitJS(t, ctx, f.NodeID+" turns stale", fmt.Sprintf(`document.querySelector(%q)?.dataset.state === "stale"`, row(f.NodeID)))
	}
	waitJS(t, ctx, "the committed child goes", fmt.Sprintf(`!document.querySelector(%q)`, row(forks[1].NodeID)))

	if err := d.Client.Prune(bg, "t1", forks[0].NodeID); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the pruned node goes", fmt.Sprintf(`!document.querySelector(%q)`, row(forks[0].NodeID)))

	// A fork_batch of 50 arrives without a reload.
	labels := make([]string, 50)
	for i := range labels {
		labels[i] = fmt.Sprintf("b%02d", i)
	}
	batch, _, err := d.Client.ForkBatch(bg, "t1", root, labels)
	if err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "50 more nodes", fmt.Sprintf(`window.__arbor.states[%q] !== undefined`, batch[49].NodeID))
	nr, err := d.Client.Nodes(bg, "t1")
	if err != nil {
		t.Fatal(err)
	}
	live := fmt.Sprintf("live nodes: %d of 64", nr.Usage.LiveNodes)
	waitJS(t, ctx, "the budget bar says "+live, fmt.Sprintf(`document.querySelector('[data-meter="live nodes"]').textContent.includes(%q)`, live))

	// Actions on the page: select a node, click, confirm; the daemon does it.
	stale := forks[2].NodeID
	run(t, ctx, "protect the root from the page",
		clickJS(row(root)),
		clickJS(`#detail [data-action="protect"]`),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-ok`)),
		clickJS(`#confirm-ok`),
	)
	waitJS(t, ctx, "the root shows protected", fmt.Sprintf(`document.querySelector(%q)?.dataset.protected === "true"`, row(root)))
	if !nodeStates(t, d, "t1")[root].Protected {
		t.Error("the page's protect did not protect the root")
	}
	run(t, ctx, "cancel a prune",
		clickJS(row(stale)),
		clickJS(`#detail [data-action="prune"]`),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-cancel`)),
		clickJS(`#confirm-cancel`),
	)
	if _, ok := nodeStates(t, d, "t1")[stale]; !ok {
		t.Fatal("a cancelled prune pruned")
	}
	run(t, ctx, "prune from the page",
		clickJS(`#detail [data-action="prune"]`),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-ok`)),
		clickJS(`#confirm-ok`),
	)
	waitJS(t, ctx, "the pruned row goes", fmt.Sprintf(`!document.querySelector(%q)`, row(stale)))
	if _, ok := nodeStates(t, d, "t1")[stale]; ok {
		t.Error("the page's prune did not prune")
	}
	run(t, ctx, "fork from the page with a label",
		clickJS(row(root)),
		clickJS(`#detail [data-action="fork"]`),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-label`)),
		chromedp.SendKeys(chromedp.CSS(`#confirm-label`), "from-page"),
		clickJS(`#confirm-ok`),
	)
	waitJS(t, ctx, "the page says it forked", `document.getElementById("status").textContent.startsWith("forked n")`)
	all := mapValues(nodeStates(t, d, "t1"))
	i := slices.IndexFunc(all, func(n api.Node) bool { return n.Label == "from-page" })
	if i < 0 {
		t.Fatal("the page's fork made no node labelled from-page")
	}
	made := all[i].ID
	// Off screen under 50 siblings: scroll to the end and see it drawn.
	waitJS(t, ctx, "the page's fork is drawn at the end", fmt.Sprintf(`(() => { const v = document.getElementById("viewport"); v.scrollTop = v.scrollHeight; v.dispatchEvent(new Event("scroll")); return !!document.querySelector(%q); })()`, row(made)))
	// A refusal is shown with its code: prune a protected node from the page.
	if err := d.Client.Protect(bg, "t1", made); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the fork shows protected", fmt.Sprintf(`document.querySelector(%q)?.dataset.protected === "true"`, row(made)))
	run(t, ctx, "prune a protected node from the page",
		clickJS(row(made)),
		clickJS(`#detail [data-action="prune"]`),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-ok`)),
		clickJS(`#confirm-ok`),
	)
	waitJS(t, ctx, "the refusal and its code", `document.getElementById("status").textContent.includes(": protected: ") && document.getElementById("status").classList.contains("error")`)
	if _, ok := nodeStates(t, d, "t1")[made]; !ok {
		t.Error("a protected node was pruned from the page")
	}
	// The other actions, each confirmed, each seen done by the daemon and drawn.
	for _, step := range []struct{ action, js string }{
		{"unprotect", `dataset.protected === "false"`},
		{"suspend", `dataset.state === "suspended"`},
		{"resume", `dataset.state === "live"`},
	} {
		run(t, ctx, step.action+" from the page",
			clickJS(row(made)),
			clickJS(`#detail [data-action="`+step.action+`"]`),
			chromedp.WaitVisible(chromedp.CSS(`#confirm-ok`)),
			clickJS(`#confirm-ok`),
		)
		waitJS(t, ctx, step.action+" drawn", fmt.Sprintf(`document.querySelector(%q)?.%s`, row(made), step.js))
	}
	if n := nodeStates(t, d, "t1")[made]; n.Protected || n.State != api.StateLive {
		t.Errorf("after unprotect, suspend and resume from the page the daemon has %+v", n)
	}
	if err := os.WriteFile(filepath.Join(nodeStates(t, d, "t1")[made].Path, "page.txt"), []byte("from the page\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "commit from the page",
		clickJS(row(made)),
		clickJS(`#detail [data-action="commit"]`),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-ok`)),
		clickJS(`#confirm-ok`),
	)
	waitJS(t, ctx, "the committed node goes", fmt.Sprintf(`!window.__arbor.states[%q]`, made))
	if b, err := os.ReadFile(filepath.Join(d.Base, "page.txt")); err != nil || string(b) != "from the page\n" {
		t.Errorf("the page's commit: base has %q, %v", b, err)
	}
	waitJS(t, ctx, "scroll to the top", fmt.Sprintf(`(() => { const v = document.getElementById("viewport"); v.scrollTop = 0; v.dispatchEvent(new Event("scroll")); return !!document.querySelector(%q); })()`, row(batch[0].NodeID)))
	run(t, ctx, "abort from the page",
		clickJS(row(batch[0].NodeID)),
		clickJS(`#detail [data-action="abort"]`),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-ok`)),
		clickJS(`#confirm-ok`),
	)
	waitJS(t, ctx, "the aborted node goes", fmt.Sprintf(`!window.__arbor.states[%q]`, batch[0].NodeID))
	if _, ok := nodeStates(t, d, "t1")[batch[0].NodeID]; ok {
		t.Error("the page's abort did not abort")
	}
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	saveArtifact(t, "webui.png", buf)

	// The token is asked once: a reload finds it in the session.
	run(t, ctx, "reload",
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(row(root))),
	)
	formHidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("token-form").hidden`))
	if err != nil {
		t.Fatal(err)
	}
	if !formHidden {
		t.Error("the token was asked again after a reload")
	}

	// A tree made since the page loaded shows up in the list; choosing it
	// draws it.
	base2 := filepath.Join(filepath.Dir(d.Base), "base2")
	if err := os.Mkdir(base2, 0o755); err != nil {
		t.Fatal(err)
	}
	r2, err := d.Client.Do(bg, api.Request{Op: api.OpTreeCreate, TreeID: "t2", Base: base2})
	if err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "t2 in the list", `(() => { const s = document.getElementById("tree-select"); s.dispatchEvent(new Event("focus")); return [...s.options].some(o => o.value === "t2"); })()`)
	run(t, ctx, "choose t2", chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById("tree-select"); s.value = "t2"; s.dispatchEvent(new Event("change")); })()`))
	waitJS(t, ctx, "t2 drawn", fmt.Sprintf(`location.hash === "#tree=t2" && !!document.querySelector(%q) && document.querySelectorAll("#rows .row").length === 1`, row(r2.Root)))
}

func mapValues(m map[string]api.Node) []api.Node {
	var out []api.Node
	for _, n := range m {
		out = append(out, n)
	}
	return out
}

// saveArtifact writes b to $ARBOR_ARTIFACTS/name (CI keeps that
// directory), or to the temporary directory.
func saveArtifact(t *testing.T, name string, b []byte) {
	dir := os.Getenv("ARBOR_ARTIFACTS")
	if dir == "" {
		dir = os.TempDir()
		name = "arbor-" + name
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// TestUIRoutes: /ui is served without the token (the page holds no data),
// with a strict CSP; /ui redirects to /ui/.
func TestUIRoutes(t *testing.T) {
	d := startDaemon(t)
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, want := range map[string]int{"/ui/": 200, "/ui/app.js": 200, "/ui/style.css": 200, "/ui": 307, "/ui/nope": 404} {
		res, err := hc.Get(d.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("GET %s: %s, want %d", path, res.Status, want)
		}
		if want == 200 && !strings.Contains(res.Header.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Errorf("GET %s: CSP %q", path, res.Header.Get("Content-Security-Policy"))
		}
	}
	res, err := hc.Post(d.URL+"/ui/", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /ui/ without the token: %s, want 401 (only GET is public)", res.Status)
	}
}
