// Command proxyoverhead measures what luft's proxy adds to a turn on loopback: the same
// turns sent straight to the test kit's fake engine and through the proxy (its scheduler,
// its run table and its run records in a SQLite state dir), alternating, several runs.
//
// Each run has conc agents, each taking turns one after another under its own run id and
// caller; half the measurements stream. Per turn it records the time to the end of the
// answer and, for streams, the time to the first byte of the body. The engine answers
// after a fixed prefill (first chunk) and decode (the rest), the same for both paths, so
// the difference between the paths is the proxy's.
//
// Reported: for each quantity, its p50 and p99 direct and through the proxy, and the
// difference, each as the median and spread (min–max) over the runs. Targets (issue
// 16): added p99 per turn ≤ 2 ms, added time to first byte on a stream ≤ 1 ms, with 200
// concurrent streams.
//
//	go run ./bench/proxyoverhead [-runs 5] [-conc 200] [-turns 10] [-cpuprofile f]
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
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/proxy"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

var (
	runs    = flag.Int("runs", 5, "runs of each path")
	conc    = flag.Int("conc", 200, "concurrent agents")
	turns   = flag.Int("turns", 10, "turns per agent per run")
	record  = flag.Bool("record", true, "record the proxy's runs in a SQLite state dir, as the daemon does")
	cpuprof = flag.String("cpuprofile", "", "write a CPU profile of the proxied runs to this file")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "proxyoverhead:", err)
		os.Exit(1)
	}
}

// sample is one turn: time to the end of its answer, and to its first body byte.
type sample struct {
	total, ttfb time.Duration
	stream      bool
}

func run() error {
	e := testkit.NewEngine(testkit.Config{Models: []string{"m1"}, Slots: *conc + 16,
		PrefillOverhead: 20 * time.Millisecond, DecodePerToken: time.Millisecond, DefaultMaxTokens: 16})
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
	opts := proxy.Options{Upstreams: []proxy.Upstream{{Name: "fake", BaseURL: base, Model: "m1"}},
		Scheduler: scheduler.NewExecutor(scheduler.Config{}, nil)}
	if *record {
		st, err := storage.Open(context.Background(), dir)
		if err != nil {
			return err
		}
		defer st.Close()
		opts.Store = st
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
	measure(client, base, 1, 2)
	measure(client, proxied, 1, 2)

	type row struct{ direct, viaProxy []sample }
	var results []row
	var prof *os.File
	if *cpuprof != "" {
		if prof, err = os.Create(*cpuprof); err != nil {
			return err
		}
	}
	for i := 0; i < *runs; i++ {
		d := measure(client, base, *conc, *turns)
		if prof != nil {
			pprof.StartCPUProfile(prof)
		}
		v := measure(client, proxied, *conc, *turns)
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
	fmt.Printf("luft proxy overhead on loopback: %d concurrent agents × %d turns, %d runs; median [min–max] over runs\n",
		*conc, *turns, *runs)
	fmt.Printf("engine: first chunk after 20 ms, answer after 36 ms; proxy records runs: %v\n\n", *record)
	fmt.Printf("%-26s %-28s %-28s %-28s\n", "", "direct", "via proxy", "added by the proxy")
	for _, s := range stats {
		var d, v, a []time.Duration
		for _, r := range results {
			dd, vv := s.get(r.direct), s.get(r.viaProxy)
			d, v, a = append(d, dd), append(v, vv), append(a, vv-dd)
		}
		fmt.Printf("%-26s %-28s %-28s %-28s\n", s.name, spread(d), spread(v), spread(a))
	}
	return nil
}

// measure runs conc agents of n turns each against base and returns every turn.
func measure(client *http.Client, base string, conc, n int) []sample {
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
	ttfb := time.Since(t0)
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return sample{}, err
	}
	if resp.StatusCode != 200 {
		return sample{}, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return sample{total: time.Since(t0), ttfb: ttfb, stream: stream}, nil
}

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
