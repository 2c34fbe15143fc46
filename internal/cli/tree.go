package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/arbor-dev/arbor/api"
)

func (e *env) tree(args []string) error {
	if len(args) == 0 {
		return usagef("usage: arbor tree create|fork|commit|abort|rollback|protect|unprotect|prune|suspend|resume|evict|nodes|list|watch|drop|open ...")
	}
	verb, args := args[0], args[1:]
	fs := flag.NewFlagSet("tree "+verb, flag.ContinueOnError)
	out := fs.String("o", "", "output format: json")
	base := fs.String("base", "", "the base directory")
	id := fs.String("id", "", "the tree id to use")
	backend := fs.String("backend", "dir", "the backend")
	label := fs.String("label", "", "the new node's label")
	labels := fs.String("labels", "", "labels of a fork batch, comma separated")
	maxLive := fs.Int("max-live", 0, "budget: max live nodes")
	maxRAM := fs.Int64("max-ram", 0, "budget: max live RAM bytes")
	maxDisk := fs.Int64("max-disk", 0, "budget: max disk bytes")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	want := func(n int, form string) error {
		if len(pos) != n {
			return usagef("usage: arbor tree %s %s", verb, form)
		}
		return nil
	}
	var req api.Request
	switch verb {
	case "create":
		if *base == "" || len(pos) != 0 {
			return usagef("usage: arbor tree create --base DIR [--max-live N] [--max-ram B] [--max-disk B] [--id ID]")
		}
		b, _ := absPath(*base)
		req = api.Request{Op: api.OpTreeCreate, Base: b, Backend: *backend, TreeID: *id}
		if *maxLive != 0 || *maxRAM != 0 || *maxDisk != 0 {
			req.Budget = &api.Budget{MaxLiveNodes: *maxLive, MaxLiveRAMBytes: *maxRAM, MaxDiskBytes: *maxDisk}
		}
	case "fork":
		if err := want(2, "TREE NODE [--label L | --labels a,b,c]"); err != nil {
			return err
		}
		req = api.Request{Op: api.OpTreeFork, TreeID: pos[0], SourceID: pos[1], Label: *label}
		if *labels != "" {
			req = api.Request{Op: api.OpTreeForkBat, TreeID: pos[0], SourceID: pos[1], Labels: strings.Split(*labels, ",")}
		}
	case "rollback":
		if err := want(2, "TREE NODE [--label L]"); err != nil {
			return err
		}
		req = api.Request{Op: api.OpTreeRollback, TreeID: pos[0], NodeID: pos[1], Label: *label}
	case "commit", "abort", "protect", "unprotect", "prune", "suspend", "resume":
		if err := want(2, "TREE NODE"); err != nil {
			return err
		}
		op := map[string]string{"commit": api.OpTreeCommit, "abort": api.OpTreeAbort, "protect": api.OpTreeProtect,
			"unprotect": api.OpTreeUnprot, "prune": api.OpTreePrune, "suspend": api.OpTreeSuspend, "resume": api.OpTreeResume}[verb]
		req = api.Request{Op: op, TreeID: pos[0], NodeID: pos[1]}
	case "evict", "nodes", "drop", "open":
		if err := want(1, "TREE"); err != nil {
			return err
		}
		op := map[string]string{"evict": api.OpTreeEvict, "nodes": api.OpTreeNodes, "drop": api.OpTreeDrop, "open": api.OpTreeOpen}[verb]
		req = api.Request{Op: op, TreeID: pos[0]}
	case "list":
		req = api.Request{Op: api.OpTreeList}
	case "watch":
		tree := ""
		if len(pos) > 0 {
			tree = pos[0]
		}
		return e.watch(tree, *out == "json")
	default:
		return usagef("unknown tree verb %q", verb)
	}
	resp, err := e.do(req)
	if err != nil {
		return err
	}
	if *out == "json" {
		return json.NewEncoder(e.stdout).Encode(resp)
	}
	switch verb {
	case "create":
		fmt.Fprintf(e.stdout, "tree %s created, root %s\n", resp.TreeID, resp.Root)
	case "fork", "rollback":
		forks := resp.Forks
		if len(forks) == 0 && resp.NodeID != "" {
			forks = []api.Fork{{NodeID: resp.NodeID, Path: resp.Path, LatencyNS: resp.LatencyNS}}
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tLABEL\tLATENCY\tPATH")
		for _, f := range forks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.NodeID, f.Label, time.Duration(f.LatencyNS), f.Path)
		}
		tw.Flush()
		if resp.LatencyNS != 0 && len(forks) > 1 {
			fmt.Fprintf(e.stdout, "batch: %s\n", time.Duration(resp.LatencyNS))
		}
	case "commit":
		fmt.Fprintf(e.stdout, "committed %s", req.NodeID)
		if len(resp.Stale) > 0 {
			fmt.Fprintf(e.stdout, "; stale now: %s", strings.Join(resp.Stale, ", "))
		}
		fmt.Fprintln(e.stdout)
	case "evict":
		fmt.Fprintf(e.stdout, "evicted: %s\n", strings.Join(resp.Evicted, ", "))
	case "nodes", "open":
		printNodes(e, resp)
	case "list":
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TREE\tBACKEND\tBASE\tNODES\tLIVE")
		for _, t := range resp.Trees {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", t.ID, t.Backend, t.Base, t.Usage.TotalNodes, t.Usage.LiveNodes)
		}
		tw.Flush()
	default:
		fmt.Fprintln(e.stdout, "ok")
	}
	return nil
}

func printNodes(e *env, resp api.Response) {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPARENT\tSTATE\tLABEL\tPROTECTED\tDISK\tLAST ACTIVE\tPATH")
	for _, n := range resp.Nodes {
		p := ""
		if n.Protected {
			p = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", n.ID, n.Parent, n.State, n.Label, p, n.DiskBytes,
			time.Unix(0, n.LastActiveAt).Format(time.TimeOnly), n.Path)
	}
	tw.Flush()
	if resp.Usage != nil && resp.Budget != nil {
		fmt.Fprintf(e.stdout, "live %d/%d nodes, RAM %d/%d bytes, disk %d/%d bytes\n",
			resp.Usage.LiveNodes, resp.Budget.MaxLiveNodes, resp.Usage.LiveRAMBytes, resp.Budget.MaxLiveRAMBytes,
			resp.Usage.DiskBytes, resp.Budget.MaxDiskBytes)
	}
}

func (e *env) watch(tree string, asJSON bool) error {
	snap, ch, err := e.cl.WatchSnapshot(e.ctx, tree)
	if err != nil {
		return err
	}
	if asJSON {
		json.NewEncoder(e.stdout).Encode(snap)
	} else if len(snap.Nodes) > 0 {
		printNodes(e, snap)
	}
	enc := json.NewEncoder(e.stdout)
	for ev := range ch {
		if asJSON {
			enc.Encode(ev)
			continue
		}
		fmt.Fprintf(e.stdout, "%s %s %s %s\n", time.Unix(0, ev.TimeNS).Format(time.TimeOnly), ev.Kind, ev.TreeID, ev.NodeID)
	}
	return e.ctx.Err()
}
