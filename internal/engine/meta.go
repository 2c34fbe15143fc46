package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/tree"
	bolt "go.etcd.io/bbolt"
)

// Layout of trees.db:
//
//	trees/<tree id>/meta        treeMeta as JSON
//	trees/<tree id>/intent      commitIntent as JSON, only while a commit is in flight
//	trees/<tree id>/nodes/<id>  tree.Node as JSON, one key per node
//	views/<tree id>/<mountpoint> viewRec as JSON, one key per view of the tree
var (
	bucketViews = []byte("views")
	bucketTrees = []byte("trees")
	bucketNodes = []byte("nodes")
	keyMeta     = []byte("meta")
	keyIntent   = []byte("intent")
)

// treeMeta is what a tree records besides its nodes.
type treeMeta struct {
	ID      string `json:"id"`
	Base    string `json:"base"`
	Backend string `json:"backend"`
	// Image and Network are the backend's options (BackendConfig's),
	// given at tree_create.
	Image     string     `json:"image,omitempty"`
	Network   string     `json:"network,omitempty"`
	Budget    api.Budget `json:"budget"`
	Root      string     `json:"root"`
	NextID    uint64     `json:"next_id"`
	CreatedAt time.Time  `json:"created_at"`
	// Owner is the uid that made the tree: only it, root and the
	// daemon's uid drive it (nil, in a tree made before owners: the
	// daemon's uid).
	Owner *uint32 `json:"owner,omitempty"`
	// Open is false after tree_drop: the tree stays on disk for tree_open
	// but is not loaded when the engine starts.
	Open bool `json:"open"`
}

// commitIntent is written before Files.Commit and removed with the commit's
// plan: on open, an intent whose child branch is gone is a commit that
// happened, and reconcile finishes it.
type commitIntent struct {
	Child  string `json:"child"`
	Parent string `json:"parent"`
}

// meta is the engine's metadata store. bbolt serialises writers itself; each
// method is one transaction.
type meta struct {
	db *bolt.DB
}

func openMeta(path string) (*meta, error) {
	// NoSync, as the stores under it: every transaction survives a SIGKILL
	// (the page cache has it); a commit, which writes the user's base
	// durably, syncs explicitly (sync).
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, NoSync: true})
	if err != nil {
		if err == bolt.ErrTimeout {
			return nil, api.Errorf(api.ErrBusy, "open %s: held by another process", path)
		}
		return nil, fmt.Errorf("open %s: %w: %w", path, api.ErrInternal, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketViews); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketTrees)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init %s: %w: %w", path, api.ErrInternal, err)
	}
	return &meta{db: db}, nil
}

func (m *meta) close() error { return m.db.Close() }

// sync makes every transaction so far durable.
func (m *meta) sync() error { return dbErr("sync", m.db.Sync()) }

func dbErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w: %w", what, api.ErrInternal, err)
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	buf, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, buf)
}

// treeIDs lists every tree on disk with its meta.
func (m *meta) trees() ([]treeMeta, error) {
	var out []treeMeta
	err := m.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTrees).ForEachBucket(func(k []byte) error {
			b := tx.Bucket(bucketTrees).Bucket(k)
			var tm treeMeta
			if err := json.Unmarshal(b.Get(keyMeta), &tm); err != nil {
				return fmt.Errorf("tree %s meta: %w", k, err)
			}
			out = append(out, tm)
			return nil
		})
	})
	return out, dbErr("list trees", err)
}

// exists reports whether tree id is on disk.
func (m *meta) exists(id string) (bool, error) {
	var ok bool
	err := m.db.View(func(tx *bolt.Tx) error {
		ok = tx.Bucket(bucketTrees).Bucket([]byte(id)) != nil
		return nil
	})
	return ok, dbErr("look up tree", err)
}

// load reads one tree.
func (m *meta) load(id string) (tm treeMeta, nodes []tree.Node, intent *commitIntent, err error) {
	err = m.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTrees).Bucket([]byte(id))
		if b == nil {
			return api.Errorf(api.ErrNotFound, "tree %q", id)
		}
		if err := json.Unmarshal(b.Get(keyMeta), &tm); err != nil {
			return fmt.Errorf("meta: %w", err)
		}
		if v := b.Get(keyIntent); v != nil {
			intent = new(commitIntent)
			if err := json.Unmarshal(v, intent); err != nil {
				return fmt.Errorf("intent: %w", err)
			}
		}
		nb := b.Bucket(bucketNodes)
		if nb == nil {
			return fmt.Errorf("no nodes bucket")
		}
		return nb.ForEach(func(k, v []byte) error {
			var n tree.Node
			if err := json.Unmarshal(v, &n); err != nil {
				return fmt.Errorf("node %s: %w", k, err)
			}
			nodes = append(nodes, n)
			return nil
		})
	})
	if err != nil && !isAPI(err) {
		err = fmt.Errorf("load tree %s: %w: %w", id, api.ErrInternal, err)
	}
	return tm, nodes, intent, err
}

// create writes a new tree: its meta and its nodes, replacing anything
// stored under id.
func (m *meta) create(tm treeMeta, nodes []tree.Node) error {
	return dbErr("save tree "+tm.ID, m.db.Update(func(tx *bolt.Tx) error {
		tb := tx.Bucket(bucketTrees)
		if tb.Bucket([]byte(tm.ID)) != nil {
			if err := tb.DeleteBucket([]byte(tm.ID)); err != nil {
				return err
			}
		}
		b, err := tb.CreateBucket([]byte(tm.ID))
		if err != nil {
			return err
		}
		if err := putJSON(b, keyMeta, tm); err != nil {
			return err
		}
		nb, err := b.CreateBucket(bucketNodes)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if err := putJSON(nb, []byte(n.ID), n); err != nil {
				return err
			}
		}
		return nil
	}))
}

// save writes one verb's plan and the tree's meta in one transaction: the
// verb's commit point. intent, if not nil, is stored (commit in flight);
// clearIntent removes a stored one.
func (m *meta) save(tm treeMeta, p *tree.Plan, intent *commitIntent, clearIntent bool) error {
	return dbErr("save "+tm.ID, m.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTrees).Bucket([]byte(tm.ID))
		if b == nil {
			return fmt.Errorf("tree bucket missing")
		}
		if err := putJSON(b, keyMeta, tm); err != nil {
			return err
		}
		if intent != nil {
			if err := putJSON(b, keyIntent, intent); err != nil {
				return err
			}
		}
		if clearIntent {
			if err := b.Delete(keyIntent); err != nil {
				return err
			}
		}
		if p == nil {
			return nil
		}
		nb := b.Bucket(bucketNodes)
		for _, n := range p.Put {
			if err := putJSON(nb, []byte(n.ID), n); err != nil {
				return err
			}
		}
		for _, id := range p.Delete {
			if err := nb.Delete([]byte(id)); err != nil {
				return err
			}
		}
		return nil
	}))
}

// saveMeta writes only the tree's meta.
func (m *meta) saveMeta(tm treeMeta) error { return m.save(tm, nil, nil, false) }

// remove deletes tree id's metadata (its nodes, a commit intent) in one
// transaction.
func (m *meta) remove(id string) error {
	return dbErr("delete tree", m.db.Update(func(tx *bolt.Tx) error {
		if vb := tx.Bucket(bucketViews); vb.Bucket([]byte(id)) != nil {
			if err := vb.DeleteBucket([]byte(id)); err != nil {
				return err
			}
		}
		tb := tx.Bucket(bucketTrees)
		if tb.Bucket([]byte(id)) == nil {
			return nil
		}
		return tb.DeleteBucket([]byte(id))
	}))
}

// putView records a view (replacing its record).
func (m *meta) putView(v viewRec) error {
	return dbErr("record view "+v.Mountpoint, m.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketViews).CreateBucketIfNotExists([]byte(v.Tree))
		if err != nil {
			return err
		}
		return putJSON(b, []byte(v.Mountpoint), v)
	}))
}

// deleteView forgets a view.
func (m *meta) deleteView(v viewRec) error {
	return dbErr("forget view "+v.Mountpoint, m.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketViews).Bucket([]byte(v.Tree))
		if b == nil {
			return nil
		}
		return b.Delete([]byte(v.Mountpoint))
	}))
}

// views lists tree id's views, by mountpoint.
func (m *meta) views(id string) ([]viewRec, error) {
	var out []viewRec
	err := m.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketViews).Bucket([]byte(id))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var r viewRec
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("view %s: %v", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	return out, dbErr("list views", err)
}

// RememberedViews lists the mountpoints of the views recorded in home's
// trees.db, for a command that finds no daemon running: the views a
// daemon of home mounts again when it starts (those of open trees).
func RememberedViews(home string) ([]string, error) {
	path := filepath.Join(home, "trees.db")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		if err == bolt.ErrTimeout {
			return nil, api.Errorf(api.ErrBusy, "open %s: held by a daemon that does not answer", path)
		}
		return nil, fmt.Errorf("open %s: %w: %w", path, api.ErrInternal, err)
	}
	defer db.Close()
	var mps []string
	err = db.View(func(tx *bolt.Tx) error {
		vb, tb := tx.Bucket(bucketViews), tx.Bucket(bucketTrees)
		if vb == nil || tb == nil {
			return nil
		}
		return vb.ForEachBucket(func(id []byte) error {
			b := tb.Bucket(id)
			if b == nil {
				return nil
			}
			var tm treeMeta
			if json.Unmarshal(b.Get(keyMeta), &tm) != nil || !tm.Open {
				return nil
			}
			return vb.Bucket(id).ForEach(func(k, _ []byte) error {
				mps = append(mps, string(k))
				return nil
			})
		})
	})
	return mps, dbErr("list views", err)
}
