package daemon

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// p99 is the 99th percentile of ds.
func p99(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[(len(ds)*99)/100]
}

// BenchmarkListRuns10k pages through /api/runs over 10,000 stored runs (issue target: p99
// ≤ 50 ms per page).
func BenchmarkListRuns10k(b *testing.B) {
	d, _ := newTestDaemon(b)
	ctx := context.Background()
	for i := range 10000 {
		if err := d.opts.Store.CreateRun(ctx, storage.Run{ID: uuid.Must(uuid.NewV7()).String(), Workflow: fmt.Sprintf("w%d.lua", i%7),
			Status: storage.StatusCompleted, Attempt: 1, Spec: json.RawMessage(`{}`)}); err != nil {
			b.Fatal(err)
		}
	}
	h := d.handler(false)
	var lat []time.Duration
	b.ResetTimer()
	for b.Loop() {
		cursor := ""
		for range 5 { // the first five pages
			req := httptest.NewRequest("GET", "http://luft/api/runs?limit=50&cursor="+cursor, nil)
			rec := httptest.NewRecorder()
			start := time.Now()
			h.ServeHTTP(rec, req)
			lat = append(lat, time.Since(start))
			var page RunPage
			if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &page) != nil {
				b.Fatalf("HTTP %d", rec.Code)
			}
			cursor = page.NextCursor
		}
	}
	b.ReportMetric(float64(p99(lat).Microseconds())/1000, "p99-ms/page")
}

// peakRSS is this process's peak resident set (Linux), in MB; 0 elsewhere.
func peakRSS() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// benchDaemon is a daemon over a fresh state dir whose mock answers after latency.
func benchDaemon(b *testing.B, latency time.Duration) *Daemon {
	dir := b.TempDir()
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir,
		Backends:  adapters.NewRegistry("mock", adapters.NewMock(adapters.MockConfig{LatencyMS: int(latency / time.Millisecond)})),
		Scheduler: scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 64}}, nil)})
	if err != nil {
		b.Fatal(err)
	}
	d, err := New(Options{StateDir: dir, Service: svc, Store: st})
	if err != nil {
		b.Fatal(err)
	}
	return d
}

const twentyAgents = `function main()
  local items = {}
  for i = 1, 20 do items[i] = i end
  local got = parallel(items, function(i) return agent{prompt = "item " .. i}.ok end)
  report(#got)
end`

// BenchmarkHundredRuns hosts 100 runs of 20 mock agents (50 ms each) at once in one
// daemon (issue target: daemon RSS ≤ 300 MB).
func BenchmarkHundredRuns(b *testing.B) {
	for b.Loop() {
		d := benchDaemon(b, 50*time.Millisecond)
		start := time.Now()
		var runs []*runtime.Run
		for range 100 {
			r, err := d.start(context.Background(), StartRequest{Script: twentyAgents, Path: "w.lua"})
			if err != nil {
				b.Fatal(err)
			}
			runs = append(runs, r)
		}
		for _, r := range runs {
			if res := r.Wait(); res.Status != runtime.StatusCompleted {
				b.Fatalf("run %s: %s %v", r.ID, res.Status, res.Err)
			}
		}
		b.ReportMetric(time.Since(start).Seconds(), "wall-s")
	}
	b.ReportMetric(peakRSS(), "peak-RSS-MB")
}

// BenchmarkEventToSSE measures the time from an event's stamp to its arrival at an SSE
// subscriber of a hosted run (issue target: p99 ≤ 50 ms).
func BenchmarkEventToSSE(b *testing.B) {
	d := benchDaemon(b, 2*time.Millisecond)
	srv := httptest.NewServer(d.handler(false))
	defer srv.Close()
	var lat []time.Duration
	for b.Loop() {
		run, err := d.start(context.Background(), StartRequest{Path: "e.lua", Script: `function main()
  for i = 1, 100 do log("line " .. i) agent{prompt = "p" .. i} end
end`})
		if err != nil {
			b.Fatal(err)
		}
		req, _ := http.NewRequest("GET", srv.URL+"/api/runs/"+run.ID+"/events", nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev event.Event
			if json.Unmarshal([]byte(data), &ev) == nil && ev.Type != event.RunStarted {
				lat = append(lat, time.Since(ev.TS))
			}
		}
		resp.Body.Close()
	}
	b.ReportMetric(float64(p99(lat).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(len(lat)), "events")
}

// BenchmarkRestartHundredInterrupted: 100 runs left running by a process that is gone;
// the time from the daemon's recovery until all of them run again.
func BenchmarkRestartHundredInterrupted(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		d := benchDaemon(b, 0)
		ctx := context.Background()
		src := []byte(`function main() agent{prompt = "x"} end`)
		sum := sha256.Sum256(src)
		for range 100 {
			id := uuid.Must(uuid.NewV7()).String()
			if err := d.opts.Store.CreateRun(ctx, storage.Run{ID: id, Workflow: "gone.lua", ScriptHash: hex.EncodeToString(sum[:]),
				Status: storage.StatusRunning, Attempt: 1, PID: 1 << 30, Spec: json.RawMessage(`{"path":"gone.lua","class":"interactive","concurrency":8,"limits":{}}`)}); err != nil {
				b.Fatal(err)
			}
			if _, err := d.opts.Store.SaveFile(ctx, id, "gone.lua", src); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		d.recover(ctx)
		d.mu.Lock()
		hosted := d.hosted
		d.mu.Unlock()
		b.StopTimer()
		if hosted != 100 {
			b.Fatalf("%d of 100 interrupted runs resumed", hosted)
		}
		d.wg.Wait()
		b.StartTimer()
	}
}
