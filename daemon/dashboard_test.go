package daemon

import (
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

var updateShots = flag.Bool("update", false, "rewrite the dashboard screenshots under docs/")

// gate is a backend whose calls wait until the test lets one through (or the run is
// cancelled), so a run stays live while the browser watches it.
type gate struct {
	mock    *adapters.Mock
	release chan struct{}
}

func (g *gate) ID() string { return "gate" }

func (g *gate) Run(ctx context.Context, req agent.Request, call adapters.Call) (agent.Result, error) {
	select {
	case <-g.release:
		return g.mock.Run(ctx, req, call)
	case <-ctx.Done():
		return agent.Result{}, ctx.Err()
	}
}

// dashNode is the node the dashboard's daemon is: it holds its runs under a lease that
// lasts (a node's lease renewal is package node's, tested there).
const dashNode = "dash-host-0a1b2c3d"

type lastingLease struct{}

func (lastingLease) Until() time.Time { return time.Now().Add(time.Hour) }
func (lastingLease) Valid() bool      { return true }

// serveDashboard runs a daemon on loopback HTTP with the mock and gate backends.
func serveDashboard(t *testing.T) (addr string, d *Daemon, g *gate) {
	t.Helper()
	return serveDashboardWith(t, false)
}

// serveDashboardWith is serveDashboard with further backends, and approvals asked when
// ask is set.
func serveDashboardWith(t *testing.T, ask bool, extra ...adapters.Backend) (addr string, d *Daemon, g *gate) {
	t.Helper()
	dir := t.TempDir()
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	mock := adapters.NewMock(adapters.MockConfig{})
	g = &gate{mock: mock, release: make(chan struct{})}
	svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("mock", append([]adapters.Backend{mock, g}, extra...)...),
		AskApprovals: ask, Node: dashNode, Lease: lastingLease{}})
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan Info, 1)
	d, err = New(Options{StateDir: dir, Service: svc, Store: st, Version: "test", Listen: "127.0.0.1:0", Token: "t0ken",
		Grace: time.Millisecond, Ready: func(i Info) { ready <- i }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	t.Cleanup(func() {
		d.Shutdown()
		if err := <-done; err != nil {
			t.Error(err)
		}
		d.lock.Close()
	})
	select {
	case info := <-ready:
		return info.Addr, d, g
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	}
	return "", nil, nil
}

func startRun(t *testing.T, d *Daemon, script string) string {
	t.Helper()
	run, err := d.start(context.Background(), StartRequest{Script: script, Path: "dash.lua"})
	if err != nil {
		t.Fatal(err)
	}
	return run.ID
}

// shoot saves a full-page screenshot under docs/ with -update.
func shoot(name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if !*updateShots {
			return nil
		}
		buf, err := chromedp.FullScreenshot(100)(ctx, t)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join("..", "docs", name), buf, 0o644)
	})
}

// until waits for a JavaScript condition in the page, bounded.
func until(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(20*time.Second))
}

// eval evaluates a JavaScript expression to a string.
func eval(ctx context.Context, t *testing.T, expr string) string {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// The dashboard in a real headless browser: the runs list with filters, a finished run's
// report (markdown as HTML, JSON as a tree), a live run's events arriving over SSE, the
// cancel button, the lanes, dark mode and phone width.
func TestDashboardInBrowser(t *testing.T) {
	browser := testkit.NeedTool(t, "chromium", "apt-get install chromium")
	addr, d, g := serveDashboard(t)
	md := startRun(t, d, `function main() agent{prompt = "x"} report({markdown = "# Findings\n\n- **first** point\n- second <b>point</b>\n\n`+"```"+`\ncode()\n`+"```"+`\n\n| file | issue |\n|---|---|\n| a.go | <img src=x onerror=alert(1)> |\n| b.go | **leak** |"}) end`)
	js := startRun(t, d, `function main() report({score = 7, items = {"a", "b"}, nested = {ok = true}}) end`)
	for _, id := range []string{md, js} {
		if _, err := d.opts.Service.Wait(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	live := startRun(t, d, `meta = { phases = { { label = "gathering" }, { label = "wrapping up", description = "the end" } } }
function main()
  phase("gathering", 2)
  log("before the gate")
  agent{prompt = "one", backend = "gate"}
  log("after release")
  agent{prompt = "two", backend = "gate"}
end`)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.WindowSize(1200, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	base := "http://" + addr
	// The first Run starts the browser (no timeout on it: it would stop the browser).
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/#token=t0ken")); err != nil {
		t.Fatalf("start the browser: %v", err)
	}
	ctx, stop := context.WithTimeout(ctx, 90*time.Second)
	defer stop()

	// The runs list: the three runs, their statuses, the lanes, a filter; the token is
	// gone from the address bar.
	if err := chromedp.Do(ctx,
		until(`document.querySelectorAll('#runs-body tr a').length === 3`),
		until(`document.querySelector('#lanes-body').textContent.includes('mock/')`),
		shoot("dashboard-runs.png"),
	); err != nil {
		t.Fatalf("runs list: %v", err)
	}
	if text := eval(ctx, t, `document.querySelector('#runs-body').textContent`); strings.Count(text, "completed") != 2 || !strings.Contains(text, "running") {
		t.Errorf("runs list:\n%s", text)
	}
	// Each run's owner node has its column: the head names it, and every row's cell of it
	// holds the node that drove the run.
	if cols := eval(ctx, t, `[...document.querySelector('#runs-body').closest('table').querySelectorAll('thead th')].map((h) => h.textContent).join(',') + ' / ' +
		[...document.querySelectorAll('#runs-body td.node')].map((c) => c.textContent).join(',')`); cols != "run,status,workflow,agents,tokens,cost,node,started / "+dashNode+","+dashNode+","+dashNode {
		t.Errorf("runs list's node column: %q", cols)
	}
	if loc := eval(ctx, t, `location.href`); strings.Contains(loc, "t0ken") {
		t.Errorf("the token stays in the address bar: %s", loc)
	}
	if err := chromedp.Do(ctx,
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('#f-status'); s.value = 'completed'; s.dispatchEvent(new Event('change')); })()`)(ctx, t)
			return err
		}),
		until(`document.querySelectorAll('#runs-body tr a').length === 2`),
	); err != nil {
		t.Errorf("status filter: %v", err)
	}

	// A markdown report as HTML, its markup escaped; a JSON report as a tree.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/#/runs/"+md),
		until(`document.querySelector('#report h3') !== null`),
		shoot("dashboard-report.png"),
	); err != nil {
		t.Fatalf("markdown report: %v", err)
	}
	// A finished run names the node it ran on last.
	if by := eval(ctx, t, `document.querySelector('#run-node').hidden ? 'hidden' : document.querySelector('#run-node').textContent`); by != "last on node "+dashNode {
		t.Errorf("a finished run's node line: %q, want %q", by, "last on node "+dashNode)
	}
	strong := eval(ctx, t, `document.querySelector('#report strong').textContent`)
	raw := eval(ctx, t, `document.querySelector('#report').textContent`)
	if strong != "first" || !strings.Contains(raw, "second <b>point</b>") || !strings.Contains(raw, "code()") {
		t.Errorf("markdown report: strong %q, text:\n%s", strong, raw)
	}
	// A markdown table is a table, its cells escaped like any text.
	table := eval(ctx, t, `[...document.querySelectorAll('#report table th, #report table td')].map((c) => c.textContent).join('|') +
		' img:' + document.querySelectorAll('#report img').length + ' strong:' + document.querySelectorAll('#report td strong').length`)
	if table != "file|issue|a.go|<img src=x onerror=alert(1)>|b.go|leak img:0 strong:1" || strings.Contains(raw, "|---|") {
		t.Errorf("markdown table: %q, report text:\n%s", table, raw)
	}
	// The favicon a browser asks for needs no token, like the page.
	if status := eval(ctx, t, `(() => { const x = new XMLHttpRequest(); x.open('GET', '/favicon.ico', false); x.send(); return String(x.status); })()`); status != "200" {
		t.Errorf("GET /favicon.ico from the page: HTTP %s, want 200 without the token", status)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/#/runs/"+js),
		until(`document.querySelector('#report details') !== null && document.querySelector('#report').textContent.includes('score')`),
	); err != nil {
		t.Errorf("JSON report tree: %v", err)
	}

	// A live run: its events arrive while the page is open, then the cancel button stops it.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/#/runs/"+live),
		until(`document.querySelector('#events').textContent.includes('before the gate')`),
		until(`document.querySelector('#agents-body').textContent.includes('running')`),
		until(`document.querySelector('#phases-body').textContent.includes('gathering')`),
		// The planned column: the agents phase() planned; a phase of meta.phases that has
		// not started is listed as such.
		until(`document.querySelector('#phases-body').textContent.includes('wrapping up')`),
	); err != nil {
		t.Fatalf("live run: %v", err)
	}
	// A live run names its owner node.
	if by := eval(ctx, t, `document.querySelector('#run-node').textContent`); by != "node "+dashNode {
		t.Errorf("a live run's node line: %q, want %q", by, "node "+dashNode)
	}
	if phases := eval(ctx, t, `[...document.querySelectorAll('#phases-body tr')].map((r) => [...r.cells].map((c) => c.textContent).join(',')).join(' / ')`); phases != "gathering,running,2 agents,0,0 / wrapping up the end,not started,in plan,," {
		t.Errorf("phases table: %q", phases)
	}
	g.release <- struct{}{} // the first gated call answers; the script goes on
	if err := chromedp.Do(ctx,
		until(`document.querySelector('#events').textContent.includes('after release')`),
		until(`document.querySelector('#agents-body').textContent.includes('ok')`),
		// The header counts the finished call while the run goes on.
		until(`document.querySelector('#run-meta').textContent.includes('1 ok, 0 failed, 0 cached · ')`),
		shoot("dashboard-run.png"),
		chromedp.Click(chromedp.CSS("#cancel")),
		until(`document.querySelector('#run-status').textContent === 'cancelled'`),
		until(`document.querySelector('#events').textContent.includes('run_done')`),
		// The call the cancel cut off is cancelled, not failed.
		until(`document.querySelector('#run-meta').textContent.includes('1 ok, 0 failed, 0 cached, 1 cancelled · ')`),
		until(`document.querySelector('#phases-body').textContent.includes('+1 cancelled')`),
	); err != nil {
		t.Fatalf("live events and cancel: %v; the header says %q", err, eval(ctx, t, `document.querySelector('#run-meta').textContent`))
	}
	if row, err := d.opts.Service.Status(context.Background(), live); err != nil || row.Status != storage.StatusCancelled {
		t.Errorf("after the cancel button the run is %q (%v)", row.Status, err)
	}

	// A proxy run (as the proxy records one) says what it is instead of an empty phases
	// table and "no report yet".
	proxyRun := "0194a7c2-5e1f-7b3a-9c1d-2f3e4a5b6c7e"
	if err := d.opts.Store.CreateRun(context.Background(), storage.Run{ID: proxyRun, Workflow: "proxy:claude", Status: storage.StatusRunning,
		Attempt: 1, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.opts.Store.Append(context.Background(), proxyRun,
		event.New(event.RunStarted, map[string]any{"workflow": "proxy:claude", "attempt": 1,
			"args": map[string]any{"caller": "claude", "model": "m", "idle_timeout_ms": 20 * 60 * 1000}}),
		event.New(event.AgentStarted, map[string]any{"call_key": "turn/1", "name": "turn 1", "backend": "mock", "model": "m"}),
		event.New(event.AgentDone, map[string]any{"call_key": "turn/1", "name": "turn 1", "status": "ok", "tokens": 12, "elapsed_ms": 40, "wait_ms": 0})); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/#/runs/"+proxyRun),
		until(`!document.querySelector('#proxy-note').hidden && document.querySelector('#proxy-note').textContent.includes('20 minutes')`),
		until(`document.querySelector('#agents-body').textContent.includes('turn 1')`),
	); err != nil {
		t.Fatalf("proxy run page: %v", err)
	}
	if note, hidden := eval(ctx, t, `document.querySelector('#proxy-note').textContent`),
		eval(ctx, t, `String(document.querySelector('#phases-section').hidden && document.querySelector('#report-section').hidden)`); !strings.Contains(note, "ends by itself after 20 minutes without a turn") || hidden != "true" {
		t.Errorf("proxy run page: note %q, phases and report hidden %s", note, hidden)
	}

	// Dark mode and phone width.
	if err := chromedp.Do(ctx,
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
			return err
		}),
		chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)),
		chromedp.Navigate(base+"/#/"),
		until(`document.querySelectorAll('#runs-body tr a').length >= 2`), // the status filter may still be set
		shoot("dashboard-phone-dark.png"),
	); err != nil {
		t.Fatalf("dark phone: %v", err)
	}
	bg := eval(ctx, t, `getComputedStyle(document.body).backgroundColor`)
	head := eval(ctx, t, `getComputedStyle(document.querySelector('table.list thead')).display`)
	width := eval(ctx, t, `String(document.documentElement.scrollWidth)`)
	if bg != "rgb(17, 20, 24)" || head != "none" || width != "390" {
		t.Errorf("dark phone view: background %s, table head %s, page width %s (want no horizontal scroll at 390)", bg, head, width)
	}
}

// The dashboard's files need no token (they hold no data) but keep the Host check and a
// strict content security policy; the API behind them needs the token.
func TestDashboardFiles(t *testing.T) {
	d, _ := newTestDaemon(t)
	h := d.handler(true)
	for _, path := range []string{"/", "/ui/app.js", "/ui/style.css", "/favicon.ico", "/ui/favicon.svg"} {
		req, _ := http.NewRequest("GET", "http://127.0.0.1:1"+path, nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 || !strings.Contains(rec.Header().Get("Content-Security-Policy"), "script-src 'self'") {
			t.Errorf("GET %s: HTTP %d, CSP %q", path, rec.Code, rec.Header().Get("Content-Security-Policy"))
		}
		req.Host = "rebound.example"
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 403 {
			t.Errorf("GET %s with a foreign Host: HTTP %d, want 403", path, rec.Code)
		}
	}
}
