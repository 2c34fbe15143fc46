package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/spf13/cobra"
)

// imageCmd is arbor image: root filesystem images for jail trees, built
// by the daemon from Debian packages.
func (e *env) imageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Root filesystem images for jail trees (built from Debian packages)",
		Long: `Root filesystem images built by the daemon with mmdebstrap from Debian
packages, cached under $ARBOR_HOME/images by the hash of their inputs (suite,
variant, packages, mirror). A jail tree names one at creation
(arbor tree create --backend jail --image NAME) and its sandboxes run on it,
read-only, instead of the host's /usr, /etc, ...`,
		Example:           "  arbor image build py --packages python3\n  arbor image list\n  arbor tree create --base ~/src/app --backend jail --image py",
		Args:              subcommandArgs,
		RunE:              helpRunE,
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	cmd.AddCommand(withOps(e.imageBuildCmd(), api.OpImageBuild), withOps(e.imageListCmd(), api.OpImageList), withOps(e.imageRmCmd(), api.OpImageRm))
	return cmd
}

func (e *env) imageBuildCmd() *cobra.Command {
	var packages []string
	var suite, variant string
	cmd := &cobra.Command{
		Use:   "build NAME [--packages a,b] [--suite S] [--variant V]",
		Short: "Build an image (or find it built from the same inputs)",
		Long: `Builds image NAME with mmdebstrap: the variant's packages (default minbase)
of suite S (default bookworm) and --packages, from the Debian mirror apt on the
daemon's host uses. Progress is shown as it builds. A second build from the
same inputs is instant and says it is cached; other inputs under the same name
build a new image (refused while a tree runs on the old one).`,
		Example: "  arbor image build py --packages python3\n  arbor image build tools --packages git,make --suite trixie",
		Args:    exactArgs(1, 1),
	}
	f := cmd.Flags()
	f.StringSliceVar(&packages, "packages", nil, "Debian packages to install besides the variant's (comma-separated)")
	f.StringVar(&suite, "suite", "", "the Debian suite (default bookworm)")
	f.StringVar(&variant, "variant", "", "mmdebstrap's variant: minbase (default), apt, required, important, standard, ...")
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		req := api.Request{Image: args[0], Packages: packages, Suite: suite, Variant: variant}
		return e.withClient(func(cl *client.Client) error {
			resp, err := cl.BuildImage(e.ctx, req, func(line string) {
				if !out.json {
					fmt.Fprintln(e.stderr, line)
				}
			})
			if err != nil {
				return err
			}
			if out.json {
				return json.NewEncoder(e.stdout).Encode(resp)
			}
			how := "built"
			if resp.Cached {
				how = "cached"
			}
			fmt.Fprintf(e.stdout, "image %s %s (%s, %d MiB)\n", resp.Image.Name, how, resp.Image.ID, resp.Image.SizeBytes>>20)
			return nil
		})
	}
	return cmd
}

func (e *env) imageListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "The daemon's images",
		Example: "  arbor image list\n  arbor image list -o json",
		Args:    exactArgs(0, 0),
	}
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return e.treeDo(api.Request{Op: api.OpImageList}, out, func(w io.Writer, resp api.Response) {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "IMAGE\tSUITE\tVARIANT\tPACKAGES\tSIZE\tBUILT\tID")
			for _, im := range resp.Images {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d MiB\t%s\t%s\n", im.Name, im.Suite, im.Variant, strings.Join(im.Packages, ","),
					im.SizeBytes>>20, time.Unix(0, im.BuiltAtNS).Format(time.DateTime), im.ID)
			}
			tw.Flush()
		})
	}
	return cmd
}

func (e *env) imageRmCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "rm NAME",
		Short:   "Remove an image (refused while a tree runs on it)",
		Example: "  arbor image rm py",
		Args:    exactArgs(1, 1),
	}
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return e.treeDo(api.Request{Op: api.OpImageRm, Image: args[0]}, out, func(w io.Writer, resp api.Response) {
			fmt.Fprintf(w, "image %s removed\n", args[0])
		})
	}
	return cmd
}
