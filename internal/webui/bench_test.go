package webui_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/daemontest"
)

// bigTree makes a tree of n nodes: the root, 10 children, and their
// children (fork batches of the engine's own verbs). It returns the root
// and the label of the last node in drawing order.
func bigTree(tb testing.TB, d daemontest.Daemon, tree string, n int) (root, last string) {
	tb.Helper()
	ctx := context.Background()
	r, err := d.Client.Do(ctx, api.Request{Op: api.OpTreeCreate, TreeID: tree, Base: d.Base, Budget: &api.Budget{MaxLiveNodes: n + 8}})
	if err != nil {
		tb.Fatal(err)
	}
	labels := func(k int, prefix string) []string {
		out := make([]string, k)
		for i := range out {
			out[i] = fmt.Sprintf("%s%d", prefix, i)
		}
		return out
	}
	top, _, err := d.Client.ForkBatch(ctx, tree, r.Root, labels(10, "s"))
	if err != nil {
		tb.Fatal(err)
	}
	left := n - 11
	for i, f := range top {
		k := left / (len(top) - i)
		if k == 0 {
			continue
		}
		kids := labels(k, f.Label+"-")
		if _, _, err := d.Client.ForkBatch(ctx, tree, f.NodeID, kids); err != nil {
			tb.Fatal(err)
		}
		left -= k
		last = kids[k-1]
	}
	return r.Root, last
}

// Test1000Nodes: with 1,000 nodes the page draws only the rows in view,
// draws them all as one scrolls, and a collapsed subtree hides its rows.
func Test1000Nodes(t *testing.T) {
	d := startDaemon(t)
	ctx := browser(t)
	root, last := bigTree(t, d, "big", 1000)
	login(t, ctx, d, "big", root)
	waitJS(t, ctx, "1,000 nodes known", `Object.keys(window.__arbor.states).length === 1000`)
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#rows .row").length`))
	if err != nil {
		t.Fatal(err)
	}
	if rows == 0 || rows > 100 {
		t.Errorf("%d rows in the DOM for 1,000 nodes, want only those in view (1 to 100)", rows)
	}
	waitJS(t, ctx, "the last row drawn after scrolling to the end", `(() => {
		const v = document.getElementById("viewport"); v.scrollTop = v.scrollHeight; v.dispatchEvent(new Event("scroll"));
		const rs = document.querySelectorAll("#rows .row"); return rs.length > 0 && rs[rs.length-1].querySelector(".label").textContent === "`+last+`";
	})()`)
	// Collapse the root: one row is left.
	waitJS(t, ctx, "collapse the root", `(() => {
		const v = document.getElementById("viewport"); v.scrollTop = 0; v.dispatchEvent(new Event("scroll"));
		const tog = document.querySelector('#rows [data-node-id="`+root+`"] .toggle'); if (tog && tog.textContent === "▾") tog.click();
		return document.querySelectorAll("#rows .row").length === 1;
	})()`)
}

// BenchmarkFirstDraw1000 is page load to the first drawn tree of 1,000
// nodes in headless chromium (target ≤ 1 s): navigation starts, the token
// is in the session, and the clock stops when the page has drawn rows.
func BenchmarkFirstDraw1000(b *testing.B) {
	d := startDaemon(b)
	ctx := browser(b)
	root, _ := bigTree(b, d, "big", 1000)
	login(b, ctx, d, "big", root) // the token is in the session from now on
	b.ResetTimer()
	var total time.Duration
	for b.Loop() {
		start, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`Date.now()`))
		if err != nil {
			b.Fatal(err)
		}
		run(b, ctx, "reload", chromedp.Reload())
		waitJS(b, ctx, "drawn", `window.__arbor && window.__arbor.firstDrawAt > 0 && Object.keys(window.__arbor.states).length === 1000`)
		drawn, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`window.__arbor.firstDrawAt`))
		if err != nil {
			b.Fatal(err)
		}
		total += time.Duration((drawn - start) * float64(time.Millisecond))
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/first-draw")
}

// BenchmarkUpdateDelay is the delay from a verb's reply to the node
// changing on the page (target ≤ 100 ms): protect and unprotect a node in
// turn over the socket, and read when the page drew the change.
func BenchmarkUpdateDelay(b *testing.B) {
	d := startDaemon(b)
	ctx := browser(b)
	root, _ := bigTree(b, d, "big", 1000)
	login(b, ctx, d, "big", root)
	waitJS(b, ctx, "1,000 nodes known", `Object.keys(window.__arbor.states).length === 1000`)
	bg := context.Background()
	var total time.Duration
	protected := false
	for b.Loop() {
		var err error
		if protected {
			err = d.Client.Unprotect(bg, "big", root)
		} else {
			err = d.Client.Protect(bg, "big", root)
		}
		replied := time.Now()
		if err != nil {
			b.Fatal(err)
		}
		protected = !protected
		want := "live"
		if protected {
			want = "live+protected"
		}
		waitJS(b, ctx, "the change drawn", fmt.Sprintf(`window.__arbor.states[%q].state === %q`, root, want))
		at, err := chromedp.Run(ctx, chromedp.Evaluate[float64](fmt.Sprintf(`window.__arbor.states[%q].at`, root)))
		if err != nil {
			b.Fatal(err)
		}
		total += time.UnixMilli(0).Add(time.Duration(at * float64(time.Millisecond))).Sub(replied)
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/update")
}
