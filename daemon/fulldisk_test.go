package daemon

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// mountTmpfs mounts a tmpfs of the given size on a fresh temp dir, or skips the test when
// mounting is not permitted.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if goruntime.GOOS != "linux" {
		t.Skip("a small full disk is a tmpfs: Linux only")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("a full disk needs a small tmpfs, and mount -t tmpfs -o size=%s tmpfs %s was not permitted (run the test as root): %v %s",
			size, dir, err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file into dir that leaves about `leave` bytes free on its disk.
func fill(t *testing.T, dir string, leave int64) string {
	t.Helper()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	free := int64(fs.Bavail) * int64(fs.Bsize)
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for n := int64(0); n+int64(len(buf)) <= free-leave; n += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// A daemon whose state dir is on a disk that fills up while it hosts a run: the run stops
// suspended with an error naming the state dir and the fix, the daemon stays up and its
// status shows the problem, the calls it journaled stay, and once space is freed the run
// resumes to its end without redoing them.
func TestDaemonFullDisk(t *testing.T) {
	// The disk is far larger than what the run needs once the filler is gone: the WAL holds
	// the first attempt's writes (a checkpoint cannot grow luft.db on the full disk) and the
	// resume's until the next checkpoint, 2.8-3.4 MB measured, and on a 4 MB disk the resume
	// filled it again on a loaded machine.
	disk := mountTmpfs(t, "32m")
	dir := filepath.Join(disk, "state")
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("mock", adapters.NewMock(adapters.MockConfig{}))})
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan Info, 1)
	d, err := New(Options{StateDir: dir, Service: svc, Store: st, Version: "test", Grace: time.Millisecond,
		Ready: func(i Info) { ready <- i }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	defer func() {
		d.Shutdown()
		if err := <-done; err != nil {
			t.Error(err)
		}
		d.lock.Close()
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	}
	c, err := Dial(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	filler := fill(t, disk, 256<<10)
	// Each step journals a call and logs 16 KB: the 256 KB left run out within 40 steps.
	run, err := d.start(context.Background(), StartRequest{Path: "full.lua", Script: `function main()
  for i = 1, 40 do
    agent{prompt = "p" .. i}
    log(string.rep("x", 16000) .. i)
  end
  report("done")
end`})
	if err != nil {
		t.Fatal(err)
	}
	res := waitResult(t, run)
	if res.Status != runtime.StatusSuspended || !errors.Is(res.Err, storage.ErrUnwritable) {
		t.Fatalf("run on a full disk: %s %v, want suspended by ErrUnwritable", res.Status, res.Err)
	}
	if msg := res.Err.Error(); !strings.Contains(msg, dir) || !strings.Contains(msg, "free space") || lua.ErrorKindOf(res.Err) != "" {
		t.Fatalf("the error does not name the state dir and the fix, or blames the script: %v", res.Err)
	}

	// The daemon notes the problem once it is done with the attempt's end (and has not
	// scheduled a wake-up: a resume on the full disk would only fail again, at once).
	status := pollStatus(t, c, func(s StatusJSON) bool { return s.StorageProblem != "" })
	if !strings.Contains(status.StorageProblem, run.ID) || !strings.Contains(status.StorageProblem, "free space") {
		t.Fatalf("daemon status does not show the problem: %q", status.StorageProblem)
	}
	d.mu.Lock()
	timer := d.timers[run.ID]
	d.mu.Unlock()
	if timer != nil || len(d.opts.Service.Live()) != 0 {
		t.Fatal("the daemon resumes a run on the full disk by itself")
	}
	journaled := 0
	entries, err := st.Journal(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if en.Kind == lua.KindAgent && en.Status == storage.EntryCompleted {
			journaled++
		}
	}
	if journaled == 0 {
		t.Fatal("no call was journaled before the disk filled up: the filler left too little space")
	}

	// Space is freed: a resume through the daemon goes on to the end, finished calls replayed.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Resume(context.Background(), run.ID, ResumeRequest{}); err != nil {
		t.Fatalf("resume after freeing space: %v", err)
	}
	r2 := d.opts.Service.Live()
	if len(r2) != 1 {
		t.Fatalf("%d runs live after the resume, want 1", len(r2))
	}
	res2 := waitResult(t, r2[0])
	if res2.Status != runtime.StatusCompleted || res2.Report != "done" {
		t.Fatalf("resumed run: %s %v %v, want completed with \"done\"", res2.Status, res2.Report, res2.Err)
	}
	if res2.Agents.Cached != journaled {
		t.Fatalf("the resume replayed %d calls, the journal held %d finished ones", res2.Agents.Cached, journaled)
	}
	pollStatus(t, c, func(s StatusJSON) bool { return s.StorageProblem == "" })
	d.mu.Lock()
	hosted := d.hosted
	d.mu.Unlock()
	if hosted != 2 {
		t.Fatalf("%d attempts hosted, want 2 (the first and the resume): the daemon resumed the run on the full disk by itself", hosted)
	}
}

// pollStatus asks the daemon for its status until ok says it is as wanted (10 s at most).
func pollStatus(t *testing.T, c *Client, ok func(StatusJSON) bool) StatusJSON {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, err := c.Status(context.Background())
		if err != nil {
			t.Fatalf("daemon status: %v", err)
		}
		if ok(status) {
			return status
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon status not as wanted after 10 s: %+v", status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitResult(t *testing.T, run *runtime.Run) runtime.Result {
	t.Helper()
	select {
	case <-run.Done():
		return run.Wait()
	case <-time.After(60 * time.Second):
		t.Fatal("the run did not end within 60 s")
	}
	return runtime.Result{}
}
