package runtime

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/storage"
)

// fullStore stands for a state dir whose disk fills up: after `after` journal entries
// have been finished, every write of the kinds in `fails` returns the error the SQLite
// store gives for a full disk, until the test frees space.
type fullStore struct {
	storage.Store
	dir      string
	after    int64
	events   bool // event appends fail too (else only journal and run writes)
	finished atomic.Int64
	full     atomic.Bool
}

func (f *fullStore) err() error {
	return storage.Unwritable(f.dir, "write "+filepath.Join(f.dir, storage.DBFile),
		&fs.PathError{Op: "write", Path: filepath.Join(f.dir, storage.DBFile+"-wal"), Err: syscall.ENOSPC})
}

func (f *fullStore) Append(ctx context.Context, runID string, evs ...event.Event) ([]event.Event, error) {
	if f.events && f.full.Load() {
		return nil, f.err()
	}
	return f.Store.Append(ctx, runID, evs...)
}

func (f *fullStore) UpdateRun(ctx context.Context, id string, u storage.RunUpdate) error {
	if f.full.Load() {
		return f.err()
	}
	return f.Store.UpdateRun(ctx, id, u)
}

func (f *fullStore) JournalScheduled(ctx context.Context, e storage.Entry) error {
	if f.full.Load() {
		return f.err()
	}
	return f.Store.JournalScheduled(ctx, e)
}

func (f *fullStore) JournalFinish(ctx context.Context, e storage.Entry) (int64, error) {
	if f.full.Load() {
		return 0, f.err()
	}
	seq, err := f.Store.JournalFinish(ctx, e)
	if err == nil && f.finished.Add(1) >= f.after {
		f.full.Store(true)
	}
	return seq, err
}

// A state dir that cannot be written stops the run as that failure: the script never sees
// it as a call's failure (pcall does not catch it, a pipeline does not mark items failed),
// no script line is blamed, the run ends suspended, and once there is space again it
// resumes to the end without redoing a finished call.
func TestFullDiskStopsTheRun(t *testing.T) {
	tests := []struct {
		name   string
		events bool
		src    string
		report string
	}{
		{name: "agent calls under pcall", src: `function main()
  local caught = 0
  for i = 1, 40 do
    local ok, r = pcall(function() return agent{prompt="p" .. i} end)
    if not ok or not r.ok then caught = caught + 1 end
  end
  report("caught " .. caught)
end`, report: "caught 0"},
		{name: "values under pcall", src: `function main()
  local caught = 0
  for i = 1, 40 do
    if not pcall(luft.now) then caught = caught + 1 end
    if i % 4 == 0 then agent{prompt="p" .. i} end
  end
  report("caught " .. caught)
end`, report: "caught 0"},
		{name: "pipeline", src: `function main()
  local items = {}
  for i = 1, 40 do items[i] = i end
  local out = pipeline(items, { function(i) return agent{prompt="p" .. i}.output end })
  report("failed " .. out.failed)
end`, report: "failed 0"},
		{name: "events only", events: true, src: `function main()
  for i = 1, 40 do agent{prompt="p" .. i}; log("step " .. i) end
  report("done")
end`, report: "done"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeScript(t, dir, "flow.lua", tc.src)
			b := &scripted{reply: echo}
			var fs *fullStore
			e := openResumeEnvWith(t, filepath.Join(dir, "state"), b, 0, func(st storage.Store) storage.Store {
				fs = &fullStore{Store: st, dir: filepath.Join(dir, "state"), after: 5, events: tc.events}
				if tc.events {
					fs.after = 1 << 62 // the journal never fills: only events fail
				}
				return fs
			})
			r, err := e.svc.Start(t.Context(), Spec{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			if tc.events {
				fs.full.Store(true) // after the run is recorded
			}
			res := waitRun(t, r)
			if res.Status != StatusSuspended || !errors.Is(res.Err, storage.ErrUnwritable) {
				t.Fatalf("run on a full disk: %s %v, want suspended by ErrUnwritable", res.Status, res.Err)
			}
			if k := lua.ErrorKindOf(res.Err); k != "" || strings.Contains(res.Err.Error(), "flow.lua:") {
				t.Fatalf("the error blames the script (%q): %v", k, res.Err)
			}
			if !strings.Contains(res.Err.Error(), e.dir) || !strings.Contains(res.Err.Error(), "free space") {
				t.Fatalf("the error does not name the state dir and what to do: %v", res.Err)
			}
			journaled := 0
			entries, err := e.st.Journal(t.Context(), r.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, en := range entries {
				if en.Kind == lua.KindAgent && en.Status == storage.EntryCompleted {
					journaled++
				}
			}

			// Space is freed: the run resumes to its end, finished calls are not redone.
			fs.full.Store(false)
			fs.after = 1 << 62
			r2 := resume(t, e, ResumeSpec{Run: r.ID})
			res2 := waitRun(t, r2)
			if res2.Status != StatusCompleted || res2.Report != tc.report {
				t.Fatalf("resume after freeing space: %s %v %v, want completed with %q", res2.Status, res2.Report, res2.Err, tc.report)
			}
			if res2.Agents.Cached != journaled || journaled == 0 && !tc.events {
				t.Fatalf("resume replayed %d calls, the journal held %d finished ones", res2.Agents.Cached, journaled)
			}
		})
	}
}
