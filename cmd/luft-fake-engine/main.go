// Command luft-fake-engine serves the test kit's fake engine on a loopback address:
// replicas and slots, modelled prefill/decode latency, a prefix cache, and rate limits
// that answer 429 with real headers. It speaks OpenAI's chat completions
// (/v1/chat/completions) and Responses API (/v1/responses) and Anthropic's Messages API
// (/v1/messages, /v1/messages/count_tokens). Backend tests and benchmarks point
// OPENAI_BASE_URL at the URL it prints, or ANTHROPIC_BASE_URL at that URL without /v1.
//
//	luft-fake-engine --listen 127.0.0.1:0 --replicas 2 --slots 4 --tpm 20000 --rpm 60 --log requests.jsonl
//
// --provider picks a provider model (the test kit's Provider): classic (the default),
// openai, strict, anthropic (with --itpm and --otpm), fixed-window or silent.
//
//	luft-fake-engine --provider anthropic --rpm 50 --itpm 30000 --otpm 8000 --lengths-median 60
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
	cfg, listen, logPath, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			return err
		}
		defer f.Close()
		cfg.Log = f
	}
	srv := testkit.NewServer(testkit.NewEngine(cfg))
	url, err := srv.Start(listen)
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

// parseFlags reads the command line into the engine's configuration, the address to
// listen on and the log path.
func parseFlags(args []string, stderr io.Writer) (cfg testkit.Config, listen, logPath string, err error) {
	fs := flag.NewFlagSet("luft-fake-engine", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listenF := fs.String("listen", "127.0.0.1:0", "loopback address to serve on")
	replicas := fs.Int("replicas", 1, "engine replicas")
	slots := fs.Int("slots", 4, "concurrent requests per replica")
	tpm := fs.Int("tpm", 0, "tokens per minute (0 = unlimited)")
	rpm := fs.Int("rpm", 0, "requests per minute (0 = unlimited)")
	window := fs.String("window", "continuous", "rate-limit buckets: continuous or fixed (provider classic)")
	anthropic := fs.Bool("anthropic-headers", false, "also send anthropic-ratelimit-* headers (provider classic)")
	provider := fs.String("provider", "classic", "provider model: classic, openai, strict, anthropic, fixed-window or silent")
	itpm := fs.Int("itpm", 0, "input tokens per minute (provider anthropic; 0 = --tpm)")
	otpm := fs.Int("otpm", 0, "output tokens per minute (provider anthropic; 0 = --tpm / 4)")
	quantum := fs.Duration("quantum", 0, "short window the quantized providers also enforce limits over (0 = 1s, negative = none)")
	maxOutput := fs.Int("max-output", 0, "the model's max output, reserved for a request without max_tokens (openai, anthropic)")
	median := fs.Int("lengths-median", 0, "draw heavy-tailed completion lengths with this median (0 = max_tokens or 32)")
	seed := fs.Uint64("lengths-seed", 1, "seed of the completion lengths")
	prefill := fs.Duration("prefill-per-token", 0, "prefill time per uncached prompt token (e.g. 200us)")
	decode := fs.Duration("decode-per-token", 0, "decode time per output token (e.g. 20ms)")
	logF := fs.String("log", "", "write the ground-truth log of every request to this JSONL file")
	if err := fs.Parse(args); err != nil {
		return cfg, "", "", err
	}
	w, err := testkit.ParseWindow(*window)
	if err != nil {
		return cfg, "", "", fmt.Errorf("--window: %w", err)
	}
	p, err := testkit.ParseProvider(*provider)
	if err != nil {
		return cfg, "", "", fmt.Errorf("--provider: %w", err)
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"--tpm", *tpm}, {"--rpm", *rpm}, {"--itpm", *itpm}, {"--otpm", *otpm}, {"--max-output", *maxOutput}, {"--lengths-median", *median}} {
		if v.n < 0 {
			return cfg, "", "", fmt.Errorf("%s %d: want 0 or more", v.name, v.n)
		}
	}
	cfg = testkit.Config{
		Replicas: *replicas, Slots: *slots, PrefillPerToken: *prefill, DecodePerToken: *decode,
		Limits: testkit.Limits{TPM: *tpm, RPM: *rpm, Window: w, Anthropic: *anthropic,
			Provider: p, ITPM: *itpm, OTPM: *otpm, Quantum: *quantum, MaxOutput: *maxOutput},
	}
	if *median > 0 {
		cfg.Lengths = testkit.Lengths{Median: *median, Seed: *seed}
	}
	return cfg, *listenF, *logF, nil
}
