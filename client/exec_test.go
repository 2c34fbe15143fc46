package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/facetest"
)

// execer answers tree_exec with its argv on stdout and exit 7, not_supported
// for tree "dir", and blocks until its ctx ends for tree "slow".
type execer struct{ facetest.Handler }

func (execer) Exec(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error) {
	switch req.TreeID {
	case "dir":
		return api.ExecExit{}, api.Errorf(api.ErrNotSupported, "exec needs backend jail or vm")
	case "slow":
		<-ctx.Done()
		return api.ExecExit{}, ctx.Err()
	}
	for _, a := range req.Argv {
		if err := out(api.ExecOutput{Stream: "stdout", Data: []byte(a)}); err != nil {
			return api.ExecExit{}, err
		}
	}
	return api.ExecExit{ExitCode: 7, DurationNS: 1}, nil
}

func TestExec(t *testing.T) {
	path := sockPath(t)
	server(t, path, execer{facetest.NewEngine(t)})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c := client.New(path)
	defer c.Close()
	var got []string
	x, err := c.Exec(ctx, api.Request{TreeID: "t", NodeID: "n1", Argv: []string{"a", "b"}}, func(o api.ExecOutput) error {
		got = append(got, o.Stream+":"+string(o.Data))
		return nil
	})
	if err != nil || x.ExitCode != 7 || len(got) != 2 || got[0] != "stdout:a" || got[1] != "stdout:b" {
		t.Fatalf("exec: %+v %v, output %v", x, err, got)
	}
	_, err = c.Exec(ctx, api.Request{TreeID: "dir", NodeID: "n1", Argv: []string{"true"}}, nil)
	if !errors.Is(err, api.ErrNotSupported) {
		t.Fatalf("exec on dir: %v, want ErrNotSupported across the socket", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	if _, err := c.Exec(short, api.Request{TreeID: "slow", NodeID: "n1", Argv: []string{"true"}}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("exec past its ctx: %v", err)
	}
}
