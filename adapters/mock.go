package adapters

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/luft-run/luft/agent"
)

// The environment variables of the mock backend (SPEC §6).
const (
	EnvMockLatencyMS = "LUFT_MOCK_LATENCY_MS"
	EnvMockFail      = "LUFT_MOCK_FAIL"
)

// MockModel is the model name the mock reports when the request names none.
const MockModel = "mock-1"

// MockConfig configures the mock backend.
type MockConfig struct {
	// LatencyMS delays every call, honouring cancellation.
	LatencyMS int
	// Fail injects failures: "" none, "error" every call, "hang" every call blocks until
	// its context is done, or a rate such as "0.3": that fraction of distinct requests
	// fail, chosen by hashing the request, so a request that fails always fails (retries
	// included) and one that succeeds always succeeds.
	Fail string
	// Prices in USD per million tokens; when both are zero, results carry no cost.
	PriceInPerMTok, PriceOutPerMTok float64
}

// ParseMockEnv reads LUFT_MOCK_LATENCY_MS and LUFT_MOCK_FAIL through getenv (os.Getenv in
// production, a map in tests). Prices are not read here; they come from configuration.
func ParseMockEnv(getenv func(string) string) (MockConfig, error) {
	var cfg MockConfig
	if s := strings.TrimSpace(getenv(EnvMockLatencyMS)); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return MockConfig{}, fmt.Errorf("%s=%q: want a whole number of milliseconds >= 0, such as 250", EnvMockLatencyMS, s)
		}
		cfg.LatencyMS = n
	}
	cfg.Fail = strings.TrimSpace(getenv(EnvMockFail))
	if _, err := parseFail(cfg.Fail); err != nil {
		return MockConfig{}, fmt.Errorf("%s=%q: %v", EnvMockFail, cfg.Fail, err)
	}
	return cfg, nil
}

type failKind int

const (
	failNone failKind = iota
	failAlways
	failHang
	failRate
)

type failMode struct {
	kind failKind
	rate float64
}

func parseFail(s string) (failMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return failMode{kind: failNone}, nil
	case "error":
		return failMode{kind: failAlways}, nil
	case "hang":
		return failMode{kind: failHang}, nil
	}
	r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || r < 0 || r > 1 || math.IsNaN(r) {
		return failMode{}, fmt.Errorf(`want "" (no failures), "error" (every call fails), "hang" (every call blocks until cancelled) or a failure rate from 0 to 1 such as 0.3`)
	}
	if r == 0 {
		return failMode{kind: failNone}, nil
	}
	return failMode{kind: failRate, rate: r}, nil
}

// Mock is the offline, deterministic backend: the same request always gives the same
// result. Without a schema it answers "mock: <start of the prompt>"; with one it answers a
// valid instance of the schema seeded by the prompt. It is safe for concurrent use.
type Mock struct {
	cfg     MockConfig
	fail    failMode
	failErr error // a bad cfg.Fail, reported by every call since NewMock cannot fail
	schemas schemaCache
}

// NewMock returns a mock backend. An invalid cfg.Fail makes every call return an error
// naming it; use ParseMockEnv to catch that at startup.
func NewMock(cfg MockConfig) *Mock {
	m := &Mock{cfg: cfg}
	m.fail, m.failErr = parseFail(cfg.Fail)
	return m
}

// ID implements Backend.
func (m *Mock) ID() string { return "mock" }

// Run implements Backend.
//
// Injected failures ("error", or a rate hit) come back as a non-nil error, the way a
// transport failure would, together with a Result whose Status is error; the runtime
// retries them like any failed call. "hang" returns ctx.Err() once ctx is done.
func (m *Mock) Run(ctx context.Context, req agent.Request, call Call) (agent.Result, error) {
	if err := ctx.Err(); err != nil {
		return agent.Result{}, err
	}
	if m.failErr != nil {
		return agent.Result{}, fmt.Errorf("mock: invalid failure mode %q: %v", m.cfg.Fail, m.failErr)
	}
	var res agent.Result
	err := call.Do(ctx, TurnCost{Input: EstimateTokens(req.System) + EstimateTokens(req.Prompt), MaxOutput: req.MaxTokens},
		func(ctx context.Context) TurnReport {
			var err error
			res, err = m.turn(ctx, req)
			return TurnReport{Usage: res.Usage, Err: err}
		})
	return res, err
}

// turn is the mock's one model turn.
func (m *Mock) turn(ctx context.Context, req agent.Request) (agent.Result, error) {
	if m.fail.kind == failHang {
		<-ctx.Done()
		return agent.Result{}, ctx.Err()
	}
	if err := wait(ctx, time.Duration(m.cfg.LatencyMS)*time.Millisecond); err != nil {
		return agent.Result{}, err
	}

	model := req.Model
	if model == "" {
		model = MockModel
	}
	if m.fail.kind == failAlways || (m.fail.kind == failRate && failFraction(req) < m.fail.rate) {
		err := fmt.Errorf("mock: injected failure (%s=%s)", EnvMockFail, m.cfg.Fail)
		return agent.Result{
			Status: agent.StatusError, Error: err.Error(), Attempts: 1, Backend: m.ID(), Model: model,
		}, err
	}

	session, continued := sessionID(req, "mock")
	var (
		output     any
		text       string
		schemaText string
	)
	if req.Schema != nil {
		var err error
		output, text, schemaText, err = m.schemas.example(req)
		if err != nil {
			return agent.Result{}, fmt.Errorf("mock: cannot answer with the request's schema: %w", err)
		}
	} else {
		if continued {
			text = fmt.Sprintf("mock (continuing session %s): %s", session, snippet(req.Prompt, 60))
		} else {
			text = "mock: " + snippet(req.Prompt, 60)
		}
		output = text
	}
	usage := estimateUsage(req, schemaText, text)
	return agent.Result{
		Status:    agent.StatusOK,
		Output:    output,
		Text:      text,
		Usage:     usage,
		Cost:      priceOf(usage, m.cfg.PriceInPerMTok, m.cfg.PriceOutPerMTok),
		SessionID: session,
		Attempts:  1,
		Backend:   m.ID(),
		Model:     model,
	}, nil
}

// failFraction maps a request to a number in [0, 1) that does not change between attempts,
// so a failure rate picks the same requests every time.
func failFraction(req agent.Request) float64 {
	sum := sha256.Sum256([]byte("luft-mock-fail\x00" + req.Hash()))
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
}

// DefaultModel is the model of calls that name none (the scheduler's lane).
func (m *Mock) DefaultModel() string { return MockModel }
