package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/spf13/cobra"
)

// nodeFileRE is a node's file as arbor cp names it: TREE:NODE:PATH.
var nodeFileRE = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]{0,63}):([^:/]+):(.*)$`)

type nodeFile struct{ tree, node, path string }

func parseNodeFile(s string) (nodeFile, bool) {
	m := nodeFileRE.FindStringSubmatch(s)
	if m == nil {
		return nodeFile{}, false
	}
	return nodeFile{m[1], m[2], m[3]}, true
}

// modeFlag is --mode: permission bits in octal.
type modeFlag uint32

func (m *modeFlag) String() string { return fmt.Sprintf("0%o", uint32(*m)) }
func (m *modeFlag) Type() string   { return "octal" }
func (m *modeFlag) Set(s string) error {
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o7777 {
		return fmt.Errorf("mode %q: want octal permission bits (0644)", s)
	}
	*m = modeFlag(v)
	return nil
}

// cpCmd is arbor cp SRC DST: a file from or to a node.
func (e *env) cpCmd() *cobra.Command {
	var mode modeFlag
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file from or to a node",
		Long: `Copies one file between this host and a node: a node's file is written
TREE:NODE:PATH (PATH in the node: a dir node's files are its root; a jail
node's are /workspace, with its /tmp at /tmp), the other side is a local path,
or - for standard input or output. The data streams (any size); a write to the
node is atomic (the file changes once all of it arrived), with the local file's
permission bits or --mode. Symlinks in the node resolve inside it, never out.`,
		Example: "  arbor cp t1:n2:/workspace/out.log ./out.log\n  arbor cp ./patch.diff t1:n2:patch.diff\n  arbor cp t1:n2:/tmp/result.json - | jq .\n  tar c src | arbor cp - t1:n2:/tmp/src.tar",
		Args:    exactArgs(2, 2),
	}
	cmd.Flags().Var(&mode, "mode", "permission bits of the file written to a node (default: the local file's, or 0644)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		src, srcNode := parseNodeFile(args[0])
		dst, dstNode := parseNodeFile(args[1])
		switch {
		case srcNode == dstNode:
			return usagef("arbor cp: one side is a node's file (TREE:NODE:PATH), the other a local path or -")
		case srcNode:
			return e.download(src, args[1])
		}
		return e.upload(args[0], dst, uint32(mode), cmd.Flags().Changed("mode"))
	}
	return withOps(cmd, api.OpFileRead, api.OpFileWrite)
}

func (e *env) download(src nodeFile, local string) error {
	return e.withClient(func(cl *client.Client) error {
		if local == "-" {
			_, err := cl.ReadFile(e.ctx, src.tree, src.node, src.path, e.stdout)
			return err
		}
		if st, err := os.Stat(local); err == nil && st.IsDir() {
			local = filepath.Join(local, filepath.Base("/"+src.path))
		}
		// Beside the target, renamed over it once whole: a failed copy
		// leaves the local file as it was.
		f, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".arbor-*")
		if err != nil {
			return err
		}
		defer os.Remove(f.Name())
		fi, err := cl.ReadFile(e.ctx, src.tree, src.node, src.path, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if err := os.Chmod(f.Name(), fs.FileMode(fi.Mode&0o777)); err != nil {
			return err
		}
		return os.Rename(f.Name(), local)
	})
}

func (e *env) upload(local string, dst nodeFile, mode uint32, modeSet bool) error {
	var r io.Reader = e.stdin
	if local != "-" {
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if st.IsDir() {
			return fmt.Errorf("arbor cp: %s is a directory: cp copies one file (a tar through arbor exec copies a tree)", local)
		}
		if !modeSet {
			mode = uint32(st.Mode().Perm())
		}
		r = f
	}
	return e.withClient(func(cl *client.Client) error {
		_, err := cl.WriteFile(e.ctx, dst.tree, dst.node, dst.path, mode, r)
		return err
	})
}

// lsCmd is arbor ls TREE NODE [PATH].
func (e *env) lsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ls TREE NODE [PATH]",
		Short: "List a directory of a node, or describe one of its files",
		Long: `Lists directory PATH of node NODE (its files' top by default): the type and
permission bits, size, modification time and name of each entry, a symlink's
target after ->. A file that is not a directory is described alone.`,
		Example:           "  arbor ls t1 n2\n  arbor ls t1 n2 /tmp -o json",
		Args:              exactArgs(2, 3),
		ValidArgsFunction: e.completeTree(true),
	}
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		p := ""
		if len(args) == 3 {
			p = args[2]
		}
		return e.withClient(func(cl *client.Client) error {
			st, err := cl.StatFile(e.ctx, args[0], args[1], p)
			if err != nil {
				return err
			}
			ents := []api.FileInfo{st}
			if st.IsDir {
				if ents, err = cl.ListFiles(e.ctx, args[0], args[1], p); err != nil {
					return err
				}
			}
			if out.json {
				return json.NewEncoder(e.stdout).Encode(ents)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 1, ' ', 0)
			for _, f := range ents {
				name := f.Name
				if f.Link != "" {
					name += " -> " + f.Link
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", modeString(f), f.Size, time.Unix(0, f.MTimeNS).Format("Jan _2 15:04"), name)
			}
			return tw.Flush()
		})
	}
	return withOps(cmd, api.OpFileStat, api.OpFileList)
}

// modeString is ls -l's: the type letter and rwx bits.
func modeString(f api.FileInfo) string {
	m := fs.FileMode(f.Mode & 0o777)
	switch f.Type {
	case api.FileDir:
		m |= fs.ModeDir
	case api.FileSymlink:
		m |= fs.ModeSymlink
	case api.FileOther:
		m |= fs.ModeIrregular
	}
	return m.String()
}

// rmCmd is arbor rm TREE NODE PATH [-r].
func (e *env) rmCmd() *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:               "rm TREE NODE PATH [-r]",
		Short:             "Remove a file of a node (with -r, a directory and all in it)",
		Example:           "  arbor rm t1 n2 build.log\n  arbor rm -r t1 n2 /tmp/cache",
		Args:              exactArgs(3, 3),
		ValidArgsFunction: e.completeTree(true),
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove a directory and everything in it")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return e.withClient(func(cl *client.Client) error {
			return cl.RemoveFile(e.ctx, args[0], args[1], args[2], recursive)
		})
	}
	return withOps(cmd, api.OpFileRemove)
}

// mkdirCmd is arbor mkdir TREE NODE PATH [-p] [--mode M].
func (e *env) mkdirCmd() *cobra.Command {
	var parents bool
	var mode modeFlag
	cmd := &cobra.Command{
		Use:               "mkdir TREE NODE PATH [-p] [--mode 0755]",
		Short:             "Make a directory in a node",
		Example:           "  arbor mkdir -p t1 n2 src/pkg",
		Args:              exactArgs(3, 3),
		ValidArgsFunction: e.completeTree(true),
	}
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "make missing parents; an existing directory is no error")
	cmd.Flags().Var(&mode, "mode", "permission bits (default 0755)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return e.withClient(func(cl *client.Client) error {
			_, err := cl.Mkdir(e.ctx, args[0], args[1], args[2], uint32(mode), parents)
			return err
		})
	}
	return withOps(cmd, api.OpFileMkdir)
}
