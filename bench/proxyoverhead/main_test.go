package main

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/proxy"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

func TestWithinCountsOverlapsOnce(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, int64(ms)*int64(time.Millisecond)) }
	ss := []span{{at(0), at(10)}, {at(5), at(15)}, {at(30), at(40)}}
	if got := within(ss, at(2), at(35)); got != 18*time.Millisecond {
		t.Fatalf("within = %v, want 18ms (2–15 and 30–35)", got)
	}
	if got := within(ss, at(16), at(29)); got != 0 {
		t.Fatalf("within a gap = %v, want 0", got)
	}
}

// Every turn through a timed proxy carries its stamps in order: arrival, upstream send,
// the upstream answer, the client's first byte (streams) and the handler's return.
func TestTurnsAreStampedOnTheProxysPath(t *testing.T) {
	e := testkit.NewEngine(testkit.Config{Models: []string{"m1"}, Slots: 8,
		PrefillOverhead: time.Millisecond, DecodePerToken: time.Millisecond, DefaultMaxTokens: 4})
	srv := testkit.NewServer(e)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	u, _ := url.Parse(base)
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	rp.FlushInterval = -1
	rp.Transport = &clock{next: transport(2)}
	tg, stop, err := serve("reverse proxy", rp)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	client := &http.Client{Transport: transport(2)}
	ss := measure(client, tg, 2, 3, 0, "test")
	if len(ss) != 6 {
		t.Fatalf("%d turns measured, want 6", len(ss))
	}
	streams := 0
	for _, s := range ss {
		if !s.onPath || s.in <= 0 || s.outEnd <= 0 || s.in+s.outEnd > s.total {
			t.Fatalf("turn not stamped in order: %+v", s)
		}
		if s.stream {
			streams++
			if s.outFirst <= 0 || s.in+s.outFirst > s.ttfb {
				t.Fatalf("stream's first byte not stamped in order: %+v", s)
			}
		}
		if s.storeIn != 0 || s.storeOut != 0 {
			t.Fatalf("a proxy without a store waited for one: %+v", s)
		}
	}
	if streams != 3 {
		t.Fatalf("%d streams, want 3", streams)
	}
}

// Through luft's proxy recording its runs, every turn's end waits for its store's
// commit, and the bench sees that wait on the turn (the store's writes carry the
// request's context).
func TestLuftsStoreWaitsAreSeenOnTheTurn(t *testing.T) {
	e := testkit.NewEngine(testkit.Config{Models: []string{"m1"}, Slots: 8,
		PrefillOverhead: time.Millisecond, DecodePerToken: time.Millisecond, DefaultMaxTokens: 4})
	srv := testkit.NewServer(e)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := t.TempDir()
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sched := scheduler.NewExecutor(scheduler.Config{}, nil)
	svc, err := runtime.New(runtime.Options{Store: timedStore{st}, StateDir: dir, Backends: adapters.NewRegistry("mock"),
		Scheduler: sched, Caller: "proxy"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(proxy.Options{Upstreams: []proxy.Upstream{{Name: "fake", BaseURL: base, Model: "m1"}},
		Scheduler: sched, Transport: &clock{next: transport(2)}, Service: svc})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tg, stop, err := serve("luft", p)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ss := measure(&http.Client{Transport: transport(2)}, tg, 2, 3, 0, "test")
	if len(ss) != 6 {
		t.Fatalf("%d turns measured, want 6", len(ss))
	}
	for _, s := range ss {
		if !s.onPath || s.storeOut <= 0 || s.storeOut > s.outEnd {
			t.Fatalf("turn's wait for its agent_done not seen: %+v", s)
		}
		if s.firstOfRun && (s.storeIn <= 0 || s.storeIn > s.in) {
			t.Fatalf("first turn's wait for its run's record not seen: %+v", s)
		}
	}
}
