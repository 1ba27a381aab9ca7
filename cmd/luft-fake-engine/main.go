// Command luft-fake-engine serves the test kit's fake OpenAI-compatible engine on a
// loopback address: replicas and slots, modelled prefill/decode latency, a prefix cache,
// and rate limits that answer 429 with real headers. Backend tests and benchmarks point
// OPENAI_BASE_URL at the URL it prints.
//
//	luft-fake-engine --listen 127.0.0.1:0 --replicas 2 --slots 4 --tpm 20000 --rpm 60 --log requests.jsonl
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/luft-run/luft/internal/testkit"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "luft-fake-engine:", err)
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("luft-fake-engine", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "loopback address to serve on")
	replicas := fs.Int("replicas", 1, "engine replicas")
	slots := fs.Int("slots", 4, "concurrent requests per replica")
	tpm := fs.Int("tpm", 0, "tokens per minute (0 = unlimited)")
	rpm := fs.Int("rpm", 0, "requests per minute (0 = unlimited)")
	window := fs.String("window", "continuous", "rate-limit buckets: continuous or fixed")
	anthropic := fs.Bool("anthropic-headers", false, "also send anthropic-ratelimit-* headers")
	prefill := fs.Duration("prefill-per-token", 0, "prefill time per uncached prompt token (e.g. 200us)")
	decode := fs.Duration("decode-per-token", 0, "decode time per output token (e.g. 20ms)")
	logPath := fs.String("log", "", "write the ground-truth log of every request to this JSONL file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	w, err := testkit.ParseWindow(*window)
	if err != nil {
		return fmt.Errorf("--window: %w", err)
	}
	cfg := testkit.Config{
		Replicas: *replicas, Slots: *slots, PrefillPerToken: *prefill, DecodePerToken: *decode,
		Limits: testkit.Limits{TPM: *tpm, RPM: *rpm, Window: w, Anthropic: *anthropic},
	}
	if *logPath != "" {
		f, err := os.Create(*logPath)
		if err != nil {
			return err
		}
		defer f.Close()
		cfg.Log = f
	}
	srv := testkit.NewServer(testkit.NewEngine(cfg))
	url, err := srv.Start(*listen)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, url)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shut)
}
