package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// ForkStats is what one fork cost.
type ForkStats struct {
	// Pause is how long the source's CPUs were stopped.
	Pause time.Duration
	// Dirty is the bytes of guest RAM the source had written since its
	// memory image, saved inside the pause.
	Dirty int64
	// Complete is the time to complete the fork point's memory image
	// after the source resumed; Reflinked says it shared blocks.
	Complete  time.Duration
	Reflinked bool
	// Running is, per child, the time from the fork call to its CPUs
	// running; Reply to its agent's first reply.
	Running, Reply []time.Duration
}

// Fork makes children of running VM v: it pauses v, saves its state
// (Save), calls inPause (nil: none) while v is still paused (it returns
// each child's files, served at its /workspace, or nil: none), resumes v,
// completes the fork point's memory image, and starts one VM per dirs[i]
// (hostname names[i]) from it, concurrently. The fork point is immutable:
// what v writes after the pause, no child sees, and the other way round.
// A failure stops the children started, resumes v if it still runs, and
// is returned.
func Fork(ctx context.Context, v *VM, dirs, names []string, inPause func(context.Context) ([]string, error)) (_ []*VM, st ForkStats, err error) {
	t0 := time.Now()
	point, err := os.MkdirTemp(v.dir, "fork-")
	if err != nil {
		return nil, st, err
	}
	defer os.RemoveAll(point) // the children hold links to its files
	if err := v.Pause(ctx); err != nil {
		return nil, st, err
	}
	snap, err := v.Save(ctx, point)
	files := make([]string, len(dirs))
	if err == nil && inPause != nil {
		var fs []string
		if fs, err = inPause(ctx); err == nil && fs != nil {
			if len(fs) != len(dirs) {
				err = fmt.Errorf("%d files for %d children", len(fs), len(dirs))
			}
			files = fs
		}
	}
	if cerr := v.Cont(context.WithoutCancel(ctx)); cerr != nil && err == nil {
		err = cerr
	}
	st.Pause = time.Since(t0)
	if err != nil {
		return nil, st, fmt.Errorf("vm fork: %w", err)
	}
	st.Dirty = snap.Dirty
	t1 := time.Now()
	if err := snap.Complete(); err != nil {
		return nil, st, err
	}
	st.Complete, st.Reflinked = time.Since(t1), snap.Reflinked
	kids, running, reply, err := startAll(ctx, v.img, snap, dirs, names, files, t0)
	st.Running, st.Reply = running, reply
	return kids, st, err
}

// startAll starts one VM per dir from snap, concurrently; on a failure it
// kills those that started.
func startAll(ctx context.Context, img *Image, snap *Snapshot, dirs, names, files []string, t0 time.Time) ([]*VM, []time.Duration, []time.Duration, error) {
	kids := make([]*VM, len(dirs))
	running := make([]time.Duration, len(dirs))
	reply := make([]time.Duration, len(dirs))
	errs := make([]error, len(dirs))
	var wg sync.WaitGroup
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = Seed(dirs[i], snap.Mem, snap.Dev); errs[i] != nil {
				return
			}
			var r time.Time
			kids[i], errs[i] = start(ctx, img, dirs[i], names[i], files[i], &r)
			running[i], reply[i] = r.Sub(t0), time.Since(t0)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, k := range kids {
			if k != nil {
				k.Kill()
			}
		}
		return nil, nil, nil, fmt.Errorf("vm fork: start children: %w", err)
	}
	return kids, running, reply, nil
}

// Suspend saves v's state into its own directory and ends its process:
// the VM then holds no RAM, and Start brings it back from where it was.
func Suspend(ctx context.Context, v *VM) error {
	point, err := os.MkdirTemp(v.dir, "suspend-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(point)
	if err := v.Pause(ctx); err != nil {
		return err
	}
	snap, err := v.Save(ctx, point)
	if err != nil {
		v.Cont(context.WithoutCancel(ctx))
		return fmt.Errorf("vm suspend: %w", err)
	}
	v.Kill()
	if err := snap.Complete(); err != nil {
		return err
	}
	return Seed(v.dir, snap.Mem, snap.Dev)
}
