// Command proxyoverhead measures what luft's proxy adds to a turn on loopback: the same
// turns sent straight to the test kit's fake engine and through the proxy (its scheduler,
// its run table and its run records in a SQLite state dir), alternating, several runs.
//
// Each run has conc agents, each taking turns one after another under its own run id and
// caller; half the measurements stream. The engine's turns last about a second by default
// (a first chunk after 200 ms, 16 tokens at 50 ms), so 200 agents keep 200 streams open
// at about 200 turns a second, staggered over a turn's time as independent agents are:
// the load of many agents, not a test of 200 requests landing in the same instant. Per turn it records the time to the end of the
// answer and, for streams, the time to the first byte of the body. The engine answers
// after a fixed prefill (first chunk) and decode (the rest), the same for both paths, so
// the difference between the paths is the proxy's.
//
// Reported: for each quantity, its p50 and p99 direct and through the proxy, and the
// difference, each as the median and spread (min–max) over the runs. Targets (issue
// 16): added p99 per turn ≤ 2 ms, added time to first byte on a stream ≤ 1 ms, with 200
// concurrent streams.
//
//	go run ./bench/proxyoverhead [-runs 5] [-conc 200] [-turns 10] [-prefill 200ms] [-decode 50ms] [-cpuprofile f]
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/bench/internal/machine"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/proxy"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

var (
	runs    = flag.Int("runs", 5, "runs of each path")
	conc    = flag.Int("conc", 200, "concurrent agents")
	turns   = flag.Int("turns", 10, "turns per agent per run")
	record  = flag.Bool("record", true, "record the proxy's runs in a SQLite state dir, as the daemon does")
	cpuprof = flag.String("cpuprofile", "", "write a CPU profile of the proxied runs to this file")
	prefill = flag.Duration("prefill", 200*time.Millisecond, "the engine's time to the first chunk")
	decode  = flag.Duration("decode", 50*time.Millisecond, "the engine's time per output token (16 tokens a turn)")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "proxyoverhead:", err)
		os.Exit(1)
	}
}

// sample is one turn: time to the end of its answer, and to its first body byte; for a
// proxied turn also the time it spent in the proxy on the way to the engine (in), and on
// the way back to its first byte (outFirst) and to its end (outEnd).
type sample struct {
	total, ttfb          time.Duration
	stream               bool
	in, outFirst, outEnd time.Duration
	hasProxy             bool
}

// upstreamTimes are the times the proxy's transport saw one turn at: the request leaving
// for the engine, the first byte and the end of the engine's answer.
type upstreamTimes struct{ sent, first, end time.Time }

// clock is a transport for the proxy that notes when each turn (x-bench-turn) went to the
// engine and when its answer came back.
type clock struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen map[string]*upstreamTimes
}

func (c *clock) RoundTrip(r *http.Request) (*http.Response, error) {
	id := r.Header.Get("x-bench-turn")
	ut := &upstreamTimes{sent: time.Now()}
	c.mu.Lock()
	c.seen[id] = ut
	c.mu.Unlock()
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		resp.Body = &timedBody{ReadCloser: resp.Body, ut: ut}
	}
	return resp, err
}

func (c *clock) take(id string) *upstreamTimes {
	c.mu.Lock()
	defer c.mu.Unlock()
	ut := c.seen[id]
	delete(c.seen, id)
	return ut
}

type timedBody struct {
	io.ReadCloser
	ut *upstreamTimes
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	now := time.Now()
	if n > 0 && b.ut.first.IsZero() {
		b.ut.first = now
	}
	if err == io.EOF {
		b.ut.end = now
	}
	return n, err
}

// timer is the proxy transport of this process; nil for the direct path.
var timer *clock

func run() error {
	loadBefore := loadavg()
	e := testkit.NewEngine(testkit.Config{Models: []string{"m1"}, Slots: *conc + 16,
		PrefillOverhead: *prefill, DecodePerToken: *decode, DefaultMaxTokens: 16})
	srv := testkit.NewServer(e)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer srv.Close()

	dir, err := os.MkdirTemp("", "proxyoverhead")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	timer = &clock{next: &http.Transport{MaxIdleConns: 4 * *conc, MaxIdleConnsPerHost: 4 * *conc, DisableCompression: true},
		seen: map[string]*upstreamTimes{}}
	opts := proxy.Options{Upstreams: []proxy.Upstream{{Name: "fake", BaseURL: base, Model: "m1"}},
		Scheduler: scheduler.NewExecutor(scheduler.Config{}, nil), Transport: timer}
	if *record {
		st, err := storage.Open(context.Background(), dir)
		if err != nil {
			return err
		}
		defer st.Close()
		svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("mock"),
			Scheduler: opts.Scheduler, Caller: "proxy"})
		if err != nil {
			return err
		}
		opts.Service = svc
	}
	p, err := proxy.New(opts)
	if err != nil {
		return err
	}
	defer p.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: p}
	go hs.Serve(ln)
	defer hs.Close()
	proxied := "http://" + ln.Addr().String() + "/v1"

	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 4 * *conc, MaxIdleConnsPerHost: 4 * *conc, DisableCompression: true}}
	// Warm both paths: connections, the run table, the state dir.
	measure(client, base, 1, 2, 0)
	measure(client, proxied, 1, 2, 0)
	stagger := *prefill + 16**decode

	type row struct{ direct, viaProxy []sample }
	var results []row
	var prof *os.File
	if *cpuprof != "" {
		if prof, err = os.Create(*cpuprof); err != nil {
			return err
		}
	}
	for i := 0; i < *runs; i++ {
		d := measure(client, base, *conc, *turns, stagger)
		if prof != nil {
			pprof.StartCPUProfile(prof)
		}
		v := measure(client, proxied, *conc, *turns, stagger)
		if prof != nil {
			pprof.StopCPUProfile()
			prof.Close()
			prof = nil
		}
		results = append(results, row{d, v})
	}

	type stat struct {
		name string
		get  func([]sample) time.Duration
	}
	q := func(stream bool, pct float64, ttfb bool) func([]sample) time.Duration {
		return func(ss []sample) time.Duration {
			var xs []time.Duration
			for _, s := range ss {
				if s.stream == stream {
					if ttfb {
						xs = append(xs, s.ttfb)
					} else {
						xs = append(xs, s.total)
					}
				}
			}
			return pctl(xs, pct)
		}
	}
	stats := []stat{
		{"turn p50 (not streamed)", q(false, 0.50, false)},
		{"turn p99 (not streamed)", q(false, 0.99, false)},
		{"turn p50 (stream)", q(true, 0.50, false)},
		{"turn p99 (stream)", q(true, 0.99, false)},
		{"first byte p50 (stream)", q(true, 0.50, true)},
		{"first byte p99 (stream)", q(true, 0.99, true)},
	}
	machine.Print(os.Stdout)
	fmt.Printf("luft proxy overhead on loopback: %d concurrent agents × %d turns, %d runs; median [min–max] over runs\n",
		*conc, *turns, *runs)
	fmt.Printf("engine: first chunk after %s, the rest %s later; proxy records runs: %v\n\n", *prefill, 16**decode, *record)
	fmt.Printf("%-26s %-28s %-28s %-28s\n", "", "direct", "via proxy", "added by the proxy")
	for _, s := range stats {
		var d, v, a []time.Duration
		for _, r := range results {
			dd, vv := s.get(r.direct), s.get(r.viaProxy)
			d, v, a = append(d, dd), append(v, vv), append(a, vv-dd)
		}
		fmt.Printf("%-26s %-28s %-28s %-28s\n", s.name, spread(d), spread(v), spread(a))
	}
	// The proxy's share measured on each proxied turn: client to the proxy's upstream send,
	// and the engine's first byte (or end) to the client's.
	inPath := func(pct float64, firstByte bool) func([]sample) time.Duration {
		return func(ss []sample) time.Duration {
			var xs []time.Duration
			for _, s := range ss {
				switch {
				case !s.hasProxy:
				case firstByte && s.stream:
					xs = append(xs, s.in+s.outFirst)
				case !firstByte:
					xs = append(xs, s.in+s.outEnd)
				}
			}
			return pctl(xs, pct)
		}
	}
	fmt.Printf("\ntime spent in the proxy, measured on each proxied turn (client → upstream send, upstream → client)\n")
	for _, s := range []stat{
		{"per turn p50", inPath(0.50, false)},
		{"per turn p99", inPath(0.99, false)},
		{"first byte p50 (stream)", inPath(0.50, true)},
		{"first byte p99 (stream)", inPath(0.99, true)},
	} {
		var v []time.Duration
		for _, r := range results {
			v = append(v, s.get(r.viaProxy))
		}
		fmt.Printf("%-26s %-28s\n", s.name, spread(v))
	}
	fmt.Printf("\nload average before %s, after %s (on %d CPUs)\n", loadBefore, loadavg(), goruntime.NumCPU())
	return nil
}

// loadavg is the system's 1-minute load average, "?" where /proc has none.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// measure runs conc agents of n turns each against base and returns every turn.
func measure(client *http.Client, base string, conc, n int, stagger time.Duration) []sample {
	var (
		mu  sync.Mutex
		all []sample
		wg  sync.WaitGroup
	)
	start := make(chan struct{})
	for a := 0; a < conc; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Agents are staggered over one turn's time, as independent agents are,
			// rather than all asking at the same instant.
			time.Sleep(time.Duration(a) * stagger / time.Duration(conc))
			id := "agent-" + strconv.Itoa(a)
			mine := make([]sample, 0, n)
			for t := 0; t < n; t++ {
				stream := (a+t)%2 == 0
				body := fmt.Sprintf(`{"model":"m1","stream":%v,"messages":[{"role":"system","content":"You are agent %d."},{"role":"user","content":"turn %d of a task that needs a few words of context to look like a real prompt"}]}`, stream, a, t)
				s, err := turn(client, base, id, body, stream)
				if err != nil {
					fmt.Fprintln(os.Stderr, "turn:", err)
					continue
				}
				mine = append(mine, s)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	return all
}

func turn(client *http.Client, base, id, body string, stream bool) (sample, error) {
	req, _ := http.NewRequest(http.MethodPost, base+"/chat/completions", bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-luft-run-id", id)
	req.Header.Set("x-luft-caller", id)
	turnID := id + "/" + strconv.FormatInt(turnSeq.Add(1), 10)
	req.Header.Set("x-bench-turn", turnID)
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return sample{}, err
	}
	defer resp.Body.Close()
	var one [1]byte
	if _, err := io.ReadFull(resp.Body, one[:]); err != nil {
		return sample{}, err
	}
	first := time.Now()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return sample{}, err
	}
	end := time.Now()
	if resp.StatusCode != 200 {
		return sample{}, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	s := sample{total: end.Sub(t0), ttfb: first.Sub(t0), stream: stream}
	if ut := timer.take(turnID); ut != nil && !ut.first.IsZero() && !ut.end.IsZero() {
		s.hasProxy = true
		s.in, s.outFirst, s.outEnd = ut.sent.Sub(t0), first.Sub(ut.first), end.Sub(ut.end)
	}
	return s, nil
}

var turnSeq atomic.Int64

func pctl(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(p*float64(len(xs))+0.5) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// spread formats median [min–max] in milliseconds.
func spread(xs []time.Duration) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64) }
	return fmt.Sprintf("%s [%s – %s] ms", ms(s[len(s)/2]), ms(s[0]), ms(s[len(s)-1]))
}
