// Command proxyoverhead measures what luft's proxy adds to a turn, on the proxy's own
// path: for every turn, the time from the request arriving at the proxy's handler to the
// upstream request leaving (written to the engine's connection), plus the time from the
// upstream answer's end to the last byte written to the client; for a stream also the
// time to its first byte (arrival to upstream send, plus the engine's first body byte to
// the proxy's first flush to the client). Turns go to the test kit's fake engine on
// loopback, the proxy records its runs in a SQLite state dir as the daemon does (through
// runtime.Service: a turn is answered only once its events are durable), and the clocks
// are read around the proxy, not inside it: an http.Handler wrapper (arrival, first
// flush, handler return) and the proxy's upstream transport (request written, first and
// last body bytes of the answer), matched by the request's context.
//
// Each run has conc agents, each taking turns one after another under its own run id
// and caller; half the turns stream. The engine's turns last about a second by default
// (a first chunk after 200 ms, 16 tokens at 50 ms), so 200 agents keep 200 turns open at
// about 200 turns a second, staggered over a turn's time as independent agents are. A
// run is conc × turns turns (10,000 by default, about 50 s a path). Shorter turns raise
// the rate: the proxy's store then commits more often, and its wait grows with it (the
// store's write ops and transactions a turn are printed).
//
// Reported, each as the median and spread (min–max) over the runs: the p50 and p99 of
// the proxy's own time per turn and to a stream's first byte. Targets (issue 22): p99 ≤
// 1 ms per turn and ≤ 0.5 ms to first byte; the command exits 1 when the median misses
// one. Beside them, two naive figures: the same on-path times of a bare
// httputil.ReverseProxy (what any proxy costs on this machine), and the old A/B figure,
// a turn's p99 through luft's proxy minus its p99 straight to the engine, whose spread
// is wider than the targets, so it can neither confirm nor refute them.
//
// -wire picks what the agents speak: chat (chat completions, the default), responses
// (the Responses API) or messages (Anthropic Messages, through an upstream of type
// anthropic at the same engine).
//
//	go run ./bench/proxyoverhead [-runs 5] [-conc 200] [-turns 50] [-wire chat] [-prefill 200ms] [-decode 50ms] [-cpuprofile f]
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/bench/internal/machine"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/proxy"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

var (
	runs    = flag.Int("runs", 5, "runs of each path")
	conc    = flag.Int("conc", 200, "concurrent agents")
	turns   = flag.Int("turns", 50, "turns per agent per run")
	record  = flag.Bool("record", true, "record the proxy's runs in a SQLite state dir, as the daemon does")
	cpuprof = flag.String("cpuprofile", "", "write a CPU profile of luft's proxied runs to this file")
	prefill = flag.Duration("prefill", 200*time.Millisecond, "the engine's time to the first chunk")
	decode  = flag.Duration("decode", 50*time.Millisecond, "the engine's time per output token (16 tokens a turn)")
	wire    = flag.String("wire", "chat", "the wire the agents speak: chat, responses or messages")
)

// path and body of a turn on each wire.
var wirePaths = map[string]string{"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}

func bodyOf(wire string, stream bool, agent, turn int) string {
	const task = "of a task that needs a few words of context to look like a real prompt"
	switch wire {
	case "responses":
		return fmt.Sprintf(`{"model":"m1","stream":%v,"instructions":"You are agent %d.","input":[{"role":"user","content":"turn %d %s"}]}`, stream, agent, turn, task)
	case "messages":
		return fmt.Sprintf(`{"model":"m1","stream":%v,"max_tokens":16,"system":"You are agent %d.","messages":[{"role":"user","content":"turn %d %s"}]}`, stream, agent, turn, task)
	}
	return fmt.Sprintf(`{"model":"m1","stream":%v,"messages":[{"role":"system","content":"You are agent %d."},{"role":"user","content":"turn %d %s"}]}`, stream, agent, turn, task)
}

// Targets on the proxy's own path, at p99 (issue 22).
const (
	targetTurn      = time.Millisecond
	targetFirstByte = 500 * time.Microsecond
)

func main() {
	flag.Parse()
	ok, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxyoverhead:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// stamps are the times one turn was seen at around a proxy: arriving at its handler,
// its upstream request written, the upstream answer's first and last body bytes read,
// the first flush of body bytes to the client and the handler's return.
type stamps struct {
	arrive, upFirst, upEnd, first, last time.Time
	done                                chan struct{} // closed once last is set
	mu                                  sync.Mutex    // guards sent and store, set on other goroutines
	sent                                time.Time
	store                               []span // the turn's writes to the store, start to commit
}

// span is an interval of time.
type span struct{ from, to time.Time }

// within is how much of [from, to] the spans cover (they may overlap).
func within(ss []span, from, to time.Time) time.Duration {
	var cut []span
	for _, s := range ss {
		a, b := max(s.from.UnixNano(), from.UnixNano()), min(s.to.UnixNano(), to.UnixNano())
		if a < b {
			cut = append(cut, span{time.Unix(0, a), time.Unix(0, b)})
		}
	}
	slices.SortFunc(cut, func(x, y span) int { return x.from.Compare(y.from) })
	var d time.Duration
	var end time.Time
	for _, s := range cut {
		if s.from.Before(end) {
			s.from = end
		}
		if s.to.After(s.from) {
			d += s.to.Sub(s.from)
			end = s.to
		}
	}
	return d
}

// timedStore is the proxy's store, noting on each turn (found by the write's context,
// which the proxy derives from its request's) how long its writes waited for their
// commit.
type timedStore struct{ storage.DB }

func note(ctx context.Context, from time.Time) {
	if s, _ := ctx.Value(stampsKey{}).(*stamps); s != nil {
		s.mu.Lock()
		s.store = append(s.store, span{from, time.Now()})
		s.mu.Unlock()
	}
}

func (t timedStore) CreateRun(ctx context.Context, r storage.Run) error {
	defer note(ctx, time.Now())
	return t.DB.CreateRun(ctx, r)
}

func (t timedStore) UpdateRun(ctx context.Context, id string, u storage.RunUpdate) error {
	defer note(ctx, time.Now())
	return t.DB.UpdateRun(ctx, id, u)
}

func (t timedStore) Append(ctx context.Context, id string, evs ...event.Event) ([]event.Event, error) {
	defer note(ctx, time.Now())
	return t.DB.Append(ctx, id, evs...)
}

func (t timedStore) RecordRun(ctx context.Context, id string, rec storage.RunRecord) ([]event.Event, error) {
	defer note(ctx, time.Now())
	return t.DB.RecordRun(ctx, id, rec)
}

func (t timedStore) AppendAsync(ctx context.Context, id string, evs ...event.Event) func() ([]event.Event, error) {
	from := time.Now()
	wait := t.DB.AppendAsync(ctx, id, evs...)
	return func() ([]event.Event, error) {
		defer note(ctx, from)
		return wait()
	}
}

type stampsKey struct{}

// timed wraps a proxy's handler: each request carries its stamps in its context, where
// the upstream transport (clock) finds them, since a proxy's upstream request is made
// with its client request's context.
func timed(h http.Handler, reg *registry) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := reg.get(r.Header.Get("x-bench-turn"))
		s.arrive = time.Now()
		tw := &timedWriter{ResponseWriter: w, s: s}
		h.ServeHTTP(tw, r.WithContext(context.WithValue(r.Context(), stampsKey{}, s)))
		s.last = time.Now()
		close(s.done)
	})
}

// timedWriter notes the first flush of body bytes to the client.
type timedWriter struct {
	http.ResponseWriter
	s     *stamps
	wrote bool
}

func (w *timedWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	if n > 0 {
		w.wrote = true
	}
	return n, err
}

func (w *timedWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	if w.wrote && w.s.first.IsZero() {
		w.s.first = time.Now()
	}
}

func (w *timedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// registry hands the client and the proxy's handler the same stamps for a turn.
type registry struct {
	mu sync.Mutex
	m  map[string]*stamps
}

func (g *registry) get(id string) *stamps {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.m[id]
	if s == nil {
		s = &stamps{done: make(chan struct{})}
		g.m[id] = s
	}
	return s
}

// take waits until the handler of turn id has returned and forgets the turn.
func (g *registry) take(id string) *stamps {
	s := g.get(id)
	<-s.done
	g.mu.Lock()
	delete(g.m, id)
	g.mu.Unlock()
	return s
}

// clock is a proxy's upstream transport: it notes when a turn's request was written to
// the engine's connection and when the answer's first and last body bytes were read.
type clock struct{ next http.RoundTripper }

func (c *clock) RoundTrip(r *http.Request) (*http.Response, error) {
	s, _ := r.Context().Value(stampsKey{}).(*stamps)
	if s == nil {
		return c.next.RoundTrip(r)
	}
	r = r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) {
			now := time.Now()
			s.mu.Lock()
			s.sent = now
			s.mu.Unlock()
		},
	}))
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		resp.Body = &timedBody{ReadCloser: resp.Body, s: s}
	}
	return resp, err
}

type timedBody struct {
	io.ReadCloser
	s *stamps
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	now := time.Now()
	if n > 0 && b.s.upFirst.IsZero() {
		b.s.upFirst = now
	}
	if err == io.EOF && b.s.upEnd.IsZero() {
		b.s.upEnd = now
	}
	return n, err
}

// sample is one turn as the client saw it (total, first byte) and, behind a proxy, the
// proxy's own time on the way in, and on the way out to the first byte and to the end.
type sample struct {
	total, ttfb          time.Duration
	stream               bool
	in, outFirst, outEnd time.Duration
	onPath               bool
	// Of in and outEnd, the time the proxy waited for its store's commits.
	storeIn, storeOut time.Duration
	firstOfRun        bool // the first turn of its run, sent upstream once the run is stored
}

// target is one way to the engine: straight, through luft's proxy, through a bare
// reverse proxy.
type target struct {
	name string
	base string
	reg  *registry // nil straight to the engine
}

func transport(conc int) *http.Transport {
	return &http.Transport{MaxIdleConns: 4 * conc, MaxIdleConnsPerHost: 4 * conc, DisableCompression: true,
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
}

// serve serves h on loopback, its turns timed; it returns the target and a stop.
func serve(name string, h http.Handler) (target, func(), error) {
	reg := &registry{m: map[string]*stamps{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return target{}, nil, err
	}
	hs := &http.Server{Handler: timed(h, reg)}
	go hs.Serve(ln)
	return target{name: name, base: "http://" + ln.Addr().String() + "/v1", reg: reg}, func() { hs.Close() }, nil
}

func run() (bool, error) {
	if _, ok := wirePaths[*wire]; !ok {
		return false, fmt.Errorf("-wire %q: use chat, responses or messages", *wire)
	}
	e := testkit.NewEngine(testkit.Config{Models: []string{"m1"}, Slots: 3**conc + 16,
		PrefillOverhead: *prefill, DecodePerToken: *decode, DefaultMaxTokens: 16})
	srv := testkit.NewServer(e)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		return false, err
	}
	defer srv.Close()

	dir, err := os.MkdirTemp("", "proxyoverhead")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)
	// The engine serves every wire at one base URL: an openai upstream for chat
	// completions and the Responses API, an anthropic one for Messages.
	opts := proxy.Options{Upstreams: []proxy.Upstream{{Name: "fake", BaseURL: base, Model: "m1"},
		{Name: "fake-anthropic", Family: proxy.FamilyAnthropic, BaseURL: base, Model: "m1"}},
		Scheduler: scheduler.NewExecutor(scheduler.Config{}, nil), Transport: &clock{next: transport(*conc)}}
	var db storage.DB
	if *record {
		st, err := storage.Open(context.Background(), dir)
		if err != nil {
			return false, err
		}
		defer st.Close()
		db = st
		svc, err := runtime.New(runtime.Options{Store: timedStore{st}, StateDir: dir, Backends: adapters.NewRegistry("mock"),
			Scheduler: opts.Scheduler, Caller: "proxy"})
		if err != nil {
			return false, err
		}
		opts.Service = svc
	}
	p, err := proxy.New(opts)
	if err != nil {
		return false, err
	}
	defer p.Close()
	luft, stopLuft, err := serve("luft", p)
	if err != nil {
		return false, err
	}
	defer stopLuft()
	u, _ := url.Parse(base)
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	rp.FlushInterval = -1
	rp.Transport = &clock{next: transport(*conc)}
	bare, stopBare, err := serve("reverse proxy", rp)
	if err != nil {
		return false, err
	}
	defer stopBare()
	direct := target{name: "direct", base: base}

	client := &http.Client{Transport: transport(*conc)}
	// Warm every path: connections, the run table, the state dir.
	for _, t := range []target{direct, luft, bare} {
		measure(client, t, *conc, 2, 0, "warm")
	}
	stagger := *prefill + 16**decode

	var d, l, b [][]sample
	var writes storage.Stats // the store's writes during luft's runs
	var prof *os.File
	if *cpuprof != "" {
		if prof, err = os.Create(*cpuprof); err != nil {
			return false, err
		}
	}
	for i := 0; i < *runs; i++ {
		tag := "run" + strconv.Itoa(i)
		d = append(d, measure(client, direct, *conc, *turns, stagger, tag))
		if prof != nil {
			pprof.StartCPUProfile(prof)
		}
		var before storage.Stats
		if db != nil {
			before = db.Stats()
		}
		l = append(l, measure(client, luft, *conc, *turns, stagger, tag))
		if db != nil {
			after := db.Stats()
			writes.Transactions += after.Transactions - before.Transactions
			writes.Ops += after.Ops - before.Ops
			writes.MaxBatch = max(writes.MaxBatch, after.MaxBatch)
		}
		if prof != nil {
			pprof.StopCPUProfile()
			prof.Close()
			prof = nil
		}
		b = append(b, measure(client, bare, *conc, *turns, stagger, tag))
	}

	machine.Print(os.Stdout)
	fmt.Printf("luft proxy overhead on loopback, %s wire: %d concurrent agents × %d turns = %d turns a run (half streamed), %d runs; median [min–max] over runs\n",
		*wire, *conc, *turns, *conc**turns, *runs)
	fmt.Printf("engine: first chunk after %s, the rest %s later; luft's proxy records runs: %v\n\n", *prefill, 16**decode, *record)

	fmt.Printf("time spent in the proxy, on each turn's own path (handler arrival → upstream request written, upstream answer → client)\n")
	fmt.Printf("%-34s %-26s %-26s\n", "", "luft proxy", "bare httputil.ReverseProxy")
	type stat struct {
		name string
		get  func([]sample) time.Duration
	}
	pick := func(pct float64, f func(sample) (time.Duration, bool)) func([]sample) time.Duration {
		return func(ss []sample) time.Duration {
			var xs []time.Duration
			for _, s := range ss {
				if v, ok := f(s); ok && s.onPath {
					xs = append(xs, v)
				}
			}
			return pctl(xs, pct)
		}
	}
	perTurn := func(s sample) (time.Duration, bool) { return s.in + s.outEnd, true }
	whole := func(s sample) (time.Duration, bool) { return s.in + s.outEnd, !s.stream }
	streamed := func(s sample) (time.Duration, bool) { return s.in + s.outEnd, s.stream }
	firstByte := func(s sample) (time.Duration, bool) { return s.in + s.outFirst, s.stream }
	in := func(s sample) (time.Duration, bool) { return s.in, true }
	out := func(s sample) (time.Duration, bool) { return s.outEnd, true }
	later := func(s sample) (time.Duration, bool) { return s.in + s.outEnd, !s.firstOfRun }
	store := func(s sample) (time.Duration, bool) { return s.storeIn + s.storeOut, true }
	own := func(s sample) (time.Duration, bool) { return s.in + s.outEnd - s.storeIn - s.storeOut, true }
	onPath := []stat{
		{"per turn p50", pick(0.50, perTurn)},
		{"per turn p99", pick(0.99, perTurn)},
		{"first byte p50 (stream)", pick(0.50, firstByte)},
		{"first byte p99 (stream)", pick(0.99, firstByte)},
		{"per turn p99 (whole answer)", pick(0.99, whole)},
		{"per turn p99 (stream)", pick(0.99, streamed)},
		{"  of it, in: arrival → sent, p99", pick(0.99, in)},
		{"  of it, out: answer → client, p99", pick(0.99, out)},
		{"per turn p99, a run's later turns", pick(0.99, later)},
		{"waiting for the store, p50", pick(0.50, store)},
		{"waiting for the store, p99", pick(0.99, store)},
		{"per turn less the store wait, p99", pick(0.99, own)},
	}
	medians := map[string]time.Duration{}
	for _, s := range onPath {
		lv, bv := over(l, s.get), over(b, s.get)
		medians[s.name] = median(lv)
		fmt.Printf("%-34s %-26s %-26s\n", s.name, spread(lv), spread(bv))
	}

	fmt.Printf("\nthe naive A/B figure: a turn's percentile through luft's proxy minus straight to the engine\n")
	fmt.Printf("%-34s %-26s %-26s %-26s\n", "", "direct", "via luft's proxy", "difference")
	total := func(stream bool, ttfb bool) func(sample) (time.Duration, bool) {
		return func(s sample) (time.Duration, bool) {
			if ttfb {
				return s.ttfb, s.stream == stream
			}
			return s.total, s.stream == stream
		}
	}
	client99 := func(f func(sample) (time.Duration, bool)) func([]sample) time.Duration {
		return func(ss []sample) time.Duration {
			var xs []time.Duration
			for _, s := range ss {
				if v, ok := f(s); ok {
					xs = append(xs, v)
				}
			}
			return pctl(xs, 0.99)
		}
	}
	for _, s := range []stat{
		{"turn p99 (whole answer)", client99(total(false, false))},
		{"turn p99 (stream)", client99(total(true, false))},
		{"first byte p99 (stream)", client99(total(true, true))},
	} {
		var dd, vv, diff []time.Duration
		for i := range d {
			x, y := s.get(d[i]), s.get(l[i])
			dd, vv, diff = append(dd, x), append(vv, y), append(diff, y-x)
		}
		fmt.Printf("%-34s %-26s %-26s %-26s\n", s.name, spread(dd), spread(vv), spread(diff))
	}

	if db != nil && writes.Transactions > 0 {
		n := float64(*runs * *conc * *turns)
		fmt.Printf("\nluft's store during its runs: %.2f write ops and %.2f transactions a turn (%.1f ops a transaction, at most %d)\n",
			float64(writes.Ops)/n, float64(writes.Transactions)/n, float64(writes.Ops)/float64(writes.Transactions), writes.MaxBatch)
	}
	ok := true
	fmt.Println()
	for _, t := range []struct {
		name   string
		target time.Duration
	}{{"per turn p99", targetTurn}, {"first byte p99 (stream)", targetFirstByte}} {
		verdict := "met"
		if medians[t.name] > t.target {
			verdict, ok = "MISSED", false
		}
		fmt.Printf("target %s ≤ %s in luft's proxy: %s (median %s)\n", t.name, t.target, verdict, ms(medians[t.name]))
	}
	machine.Print(os.Stdout)
	return ok, nil
}

// over is one figure of each run.
func over(rs [][]sample, get func([]sample) time.Duration) []time.Duration {
	var xs []time.Duration
	for _, r := range rs {
		xs = append(xs, get(r))
	}
	return xs
}

// measure runs conc agents of n turns each against t and returns every turn.
func measure(client *http.Client, t target, conc, n int, stagger time.Duration, tag string) []sample {
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
			id := tag + "-agent-" + strconv.Itoa(a)
			mine := make([]sample, 0, n)
			for i := 0; i < n; i++ {
				stream := (a+i)%2 == 0
				body := bodyOf(*wire, stream, a, i)
				s, err := turn(client, t, id, id+"/"+strconv.Itoa(i), body, stream)
				if err != nil {
					fmt.Fprintln(os.Stderr, "turn:", err)
					continue
				}
				s.firstOfRun = i == 0
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

func turn(client *http.Client, t target, id, turnID, body string, stream bool) (sample, error) {
	req, _ := http.NewRequest(http.MethodPost, t.base+wirePaths[*wire], bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	if *wire == "messages" {
		req.Header.Set("anthropic-version", "2023-06-01")
	}
	req.Header.Set("x-luft-run-id", id)
	req.Header.Set("x-luft-caller", id)
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
		return sample{}, fmt.Errorf("%s: HTTP %d", t.name, resp.StatusCode)
	}
	s := sample{total: end.Sub(t0), ttfb: first.Sub(t0), stream: stream}
	if t.reg == nil {
		return s, nil
	}
	st := t.reg.take(turnID)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sent.IsZero() || st.upEnd.IsZero() || (stream && (st.upFirst.IsZero() || st.first.IsZero())) {
		return sample{}, fmt.Errorf("%s: turn %s was not seen on the proxy's path", t.name, turnID)
	}
	s.onPath = true
	s.in, s.outEnd = st.sent.Sub(st.arrive), st.last.Sub(st.upEnd)
	s.storeIn, s.storeOut = within(st.store, st.arrive, st.sent), within(st.store, st.upEnd, st.last)
	if stream {
		s.outFirst = st.first.Sub(st.upFirst)
	}
	return s, nil
}

func pctl(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(p*float64(len(xs))+0.5) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

func median(xs []time.Duration) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64) + " ms"
}

// spread formats median [min–max] in milliseconds.
func spread(xs []time.Duration) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	f := func(d time.Duration) string { return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64) }
	return fmt.Sprintf("%s [%s – %s] ms", f(s[len(s)/2]), f(s[0]), f(s[len(s)-1]))
}
