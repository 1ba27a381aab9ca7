package tools

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// raceMarker is the content (and part of a file name) of what lies outside the workspace
// in the race tests: it must never appear in what a tool returns.
const raceMarker = "SECRET-OUTSIDE-7f3a91"

// Bounds of each race: the tools run at most raceCalls rounds or for raceTime, whichever
// ends first, and one call that takes longer than raceHang has hung.
const (
	raceCalls = 300
	raceTime  = 1500 * time.Millisecond
	raceHang  = 10 * time.Second
)

// raceFixture is a workspace next to an outside folder whose files name and hold
// raceMarker, and whose content is recorded so that any change is seen.
type raceFixture struct {
	ws, out string
	s       *Set
	fifos   []string
}

func newRaceFixture(t *testing.T) *raceFixture {
	t.Helper()
	base := t.TempDir()
	fx := &raceFixture{ws: filepath.Join(base, "ws"), out: filepath.Join(base, "out")}
	// The outside copy of f.txt holds the text the edits look for, so an edit that
	// reached it would change it.
	writeFileT(t, filepath.Join(fx.out, "f.txt"), raceMarker+" inside\n")
	writeFileT(t, filepath.Join(fx.out, "sub", "g.txt"), raceMarker+" inside\n")
	writeFileT(t, filepath.Join(fx.out, raceMarker+".txt"), raceMarker+" inside\n")
	writeFileT(t, filepath.Join(fx.ws, ".git", "config"), "[core]\n\tbare = false\n")
	fx.s = newSet(t, Config{Workspace: fx.ws})
	t.Cleanup(func() {
		// A reader stuck opening a FIFO is let go by a writer's open.
		for _, p := range fx.fifos {
			if f, err := os.OpenFile(p, os.O_RDWR, 0); err == nil {
				f.Close()
			}
		}
	})
	return fx
}

// snapshot records the content of every file under out and of the protected file.
func (fx *raceFixture) snapshot(t *testing.T) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(fx.out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		m[p] = readFileT(t, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	git := filepath.Join(fx.ws, ".git", "config")
	m[git] = readFileT(t, git)
	return m
}

func (fx *raceFixture) mkfifo(t *testing.T, rel string) string {
	t.Helper()
	p := filepath.Join(fx.ws, rel)
	if err := unix.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	fx.fifos = append(fx.fifos, p)
	return p
}

// exchange swaps a and b in a tight loop (renameat2 RENAME_EXCHANGE: both names exist
// at every instant, each being one or the other) until stop is closed.
func exchange(t *testing.T, a, b string, stop <-chan struct{}) *sync.WaitGroup {
	t.Helper()
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
		t.Skipf("renameat2(RENAME_EXCHANGE) is not available here: %v", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("exchange %s and %s: %v", a, b, err)
				return
			}
		}
	})
	return &wg
}

type raceOp struct {
	tool string
	args map[string]any
}

// race runs ops over and over while the names in swaps are exchanged, and checks every
// result: no outside content or name, no hang, errors that name their tool, and
// nothing outside (or protected) changed.
func (fx *raceFixture) race(t *testing.T, swaps [][2]string, ops []raceOp) {
	t.Helper()
	before := fx.snapshot(t)
	stop := make(chan struct{})
	var racers []*sync.WaitGroup
	for _, sw := range swaps {
		racers = append(racers, exchange(t, filepath.Join(fx.ws, sw[0]), filepath.Join(fx.ws, sw[1]), stop))
	}
	defer func() {
		close(stop)
		for _, wg := range racers {
			wg.Wait()
		}
	}()

	outcomes := map[string]int{}
	deadline := time.Now().Add(raceTime)
	for i := 0; i < raceCalls && time.Now().Before(deadline); i++ {
		for _, op := range ops {
			out, err := fx.callBounded(t, op)
			if t.Failed() {
				return
			}
			if strings.Contains(out, raceMarker) {
				t.Fatalf("%s(%v) returned what lies outside the workspace:\n%s", op.tool, op.args, out)
			}
			if err != nil {
				msg := err.Error()
				if strings.Contains(msg, raceMarker) {
					t.Fatalf("%s(%v): the error quotes what lies outside the workspace: %v", op.tool, op.args, err)
				}
				if !strings.HasPrefix(msg, op.tool+": ") || strings.Contains(msg, "path escapes from parent") ||
					strings.Contains(msg, "statat") || strings.Contains(msg, "openat") || strings.Contains(msg, ": too many levels of symbolic links") {
					t.Errorf("%s(%v): unclear error %q, want one that starts with the tool's name and says what is wrong", op.tool, op.args, msg)
				}
				outcomes[op.tool+": "+shape(msg, fx.ws, fx.out)]++
			} else {
				outcomes[op.tool+": ok"]++
			}
		}
	}
	if after := fx.snapshot(t); !maps.Equal(before, after) {
		t.Errorf("files outside the workspace (or protected) changed:\nbefore %q\nafter  %q", before, after)
	}
	for _, k := range slices.Sorted(maps.Keys(outcomes)) {
		t.Logf("%5d × %s", outcomes[k], k)
	}
}

// callBounded runs op, failing the test if it does not return within raceHang.
func (fx *raceFixture) callBounded(t *testing.T, op raceOp) (string, error) {
	t.Helper()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := call(t, fx.s, op.tool, op.args)
		done <- result{out, err}
	}()
	timer := time.NewTimer(raceHang)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.out, r.err
	case <-timer.C:
		t.Errorf("%s(%v) did not return within %v: it hangs on what was swapped in", op.tool, op.args, raceHang)
		return "", errors.New("hung")
	}
}

// shape shortens an error for the tally: the temporary folders become WS and OUT.
func shape(msg, ws, out string) string {
	return strings.NewReplacer(ws, "WS", out, "OUT").Replace(msg)
}

// fileOps are the calls on one file path and the folder it is in.
func fileOps(dir, file string) []raceOp {
	p := filepath.Join(dir, file)
	return []raceOp{
		{"read_file", map[string]any{"path": p}},
		{"list_dir", map[string]any{"path": dir}},
		{"search_files", map[string]any{"pattern": "inside|SECRET", "path": dir}},
		{"search_files", map[string]any{"pattern": "inside|SECRET"}},
		{"write_file", map[string]any{"path": p, "content": "inside\n"}},
		{"write_file", map[string]any{"path": filepath.Join(dir, "new.txt"), "content": "new inside\n"}},
		{"edit_file", map[string]any{"path": p, "old_string": "inside", "new_string": "INSIDE"}},
		{"edit_file", map[string]any{"path": p, "old_string": "INSIDE", "new_string": "inside"}},
	}
}

// TestRaceDirectorySwappedForLinkOut: a folder of the path is swapped, over and over,
// with a symbolic link to a folder outside the workspace (and, one level down, with a
// link to /etc) while every file tool works on a path through it.
func TestRaceDirectorySwappedForLinkOut(t *testing.T) {
	fx := newRaceFixture(t)
	writeFileT(t, filepath.Join(fx.ws, "d", "f.txt"), "inside\n")
	writeFileT(t, filepath.Join(fx.ws, "d", "sub", "g.txt"), "inside\n")
	if err := os.Symlink(fx.out, filepath.Join(fx.ws, "x")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(fx.ws, "d", "etc")); err != nil {
		t.Fatal(err)
	}
	ops := append(fileOps("d", "f.txt"), fileOps("d/sub", "g.txt")...)
	ops = append(ops, raceOp{"read_file", map[string]any{"path": "d/etc/passwd"}}, raceOp{"list_dir", map[string]any{"path": "d/etc"}})
	fx.race(t, [][2]string{{"d", "x"}}, ops)
}

// TestRaceFileSwappedForLinkOut: the file itself is swapped with a symbolic link to a
// file outside, and with one to a protected file inside, between the checks and the
// open, read and write.
func TestRaceFileSwappedForLinkOut(t *testing.T) {
	for _, target := range []string{"out", "protected", "etc"} {
		t.Run(target, func(t *testing.T) {
			fx := newRaceFixture(t)
			writeFileT(t, filepath.Join(fx.ws, "f.txt"), "inside\n")
			dest := map[string]string{
				"out":       filepath.Join(fx.out, "f.txt"),
				"protected": filepath.Join(fx.ws, ".git", "config"),
				"etc":       "/etc/passwd",
			}[target]
			if err := os.Symlink(dest, filepath.Join(fx.ws, "lnk")); err != nil {
				t.Fatal(err)
			}
			fx.race(t, [][2]string{{"f.txt", "lnk"}}, fileOps(".", "f.txt"))
		})
	}
}

// TestRaceFileSwappedForHardLink: the file is swapped with a hard link to a file outside.
// A write must never land in it. (Reading a hard link reads the workspace's own name of
// the file, which is allowed: see TestReadHardLink.)
func TestRaceFileSwappedForHardLink(t *testing.T) {
	fx := newRaceFixture(t)
	writeFileT(t, filepath.Join(fx.ws, "f.txt"), "inside\n")
	linked := filepath.Join(fx.out, "linked.txt")
	writeFileT(t, linked, "inside, outside\n")
	if err := os.Link(linked, filepath.Join(fx.ws, "hard")); err != nil {
		t.Skipf("cannot make a hard link here: %v", err)
	}
	var writes []raceOp
	for _, op := range fileOps(".", "f.txt") {
		if op.tool == "write_file" || op.tool == "edit_file" {
			writes = append(writes, op)
		}
	}
	fx.race(t, [][2]string{{"f.txt", "hard"}}, writes)
}

// TestRaceSwappedForFIFO: the file, and the folder, are swapped with a FIFO between the
// check that they are what the tool expects and the open. Opening a FIFO for reading
// waits for a writer that never comes: no tool may hang on one.
func TestRaceSwappedForFIFO(t *testing.T) {
	fx := newRaceFixture(t)
	writeFileT(t, filepath.Join(fx.ws, "f.txt"), "inside\n")
	writeFileT(t, filepath.Join(fx.ws, "d", "g.txt"), "inside\n")
	fx.mkfifo(t, "fifo1")
	fx.mkfifo(t, "fifo2")
	ops := append(fileOps(".", "f.txt"), raceOp{"list_dir", map[string]any{"path": "d"}},
		raceOp{"search_files", map[string]any{"pattern": "inside", "path": "d"}})
	fx.race(t, [][2]string{{"f.txt", "fifo1"}, {"d", "fifo2"}}, ops)
}

// TestReadHardLink: a hard link in the workspace is the workspace's own name of its file,
// so read_file reads it (package managers such as pnpm link their store into
// node_modules), while write_file and edit_file refuse it.
func TestReadHardLink(t *testing.T) {
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	outside := filepath.Join(base, "outside.txt")
	writeFileT(t, outside, "shared\n")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, filepath.Join(ws, "h.txt")); err != nil {
		t.Skipf("cannot make a hard link here: %v", err)
	}
	s := newSet(t, Config{Workspace: ws})
	if got := mustCall(t, s, "read_file", map[string]any{"path": "h.txt"}); got != "shared\n" {
		t.Errorf("read_file = %q", got)
	}
	_, err := call(t, s, "write_file", map[string]any{"path": "h.txt", "content": "x"})
	wantErr(t, err, "write_file: ", "h.txt has 2 hard links")
	_, err = call(t, s, "edit_file", map[string]any{"path": "h.txt", "old_string": "shared", "new_string": "x"})
	wantErr(t, err, "edit_file: ", "h.txt has 2 hard links")
	if got := readFileT(t, outside); got != "shared\n" {
		t.Errorf("the outside name's content changed: %q", got)
	}
}

// TestFIFONeverBlocks: a FIFO (and a folder's place taken by one) is refused at once by
// every tool, not waited on, without any race.
func TestFIFONeverBlocks(t *testing.T) {
	fx := newRaceFixture(t)
	fx.mkfifo(t, "p")
	for _, tc := range []struct {
		op   raceOp
		want string
	}{
		{raceOp{"read_file", map[string]any{"path": "p"}}, `read_file: "p" is not a regular file`},
		{raceOp{"list_dir", map[string]any{"path": "p"}}, `list_dir: "p" is not a directory`},
		{raceOp{"search_files", map[string]any{"pattern": "x", "path": "p"}}, ""},
		{raceOp{"write_file", map[string]any{"path": "p", "content": "x"}}, "write_file: p is not a regular file"},
		{raceOp{"edit_file", map[string]any{"path": "p", "old_string": "a", "new_string": "b"}}, `edit_file: "p" is not a regular file`},
	} {
		op := tc.op
		t.Run(op.tool, func(t *testing.T) {
			out, err := fx.callBounded(t, op)
			if tc.want == "" {
				// A FIFO is not a regular file, so there is nothing in it to search.
				if err != nil || !strings.Contains(out, "no matches") {
					t.Errorf("got %q, %v; want no matches", out, err)
				}
				return
			}
			wantErr(t, err, tc.want)
			t.Log(err)
		})
	}
}
