package luapattern

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/yuin/gopher-lua/pm"
)

// catastrophic backtracks for ~n^4 steps: far longer than any test may run.
const catastrophic = "(.-)(.-)(.-)(.-)b"

var catastrophicSubject = []byte(strings.Repeat("a", 3000))

type findCase struct {
	pat           string
	src           string
	offset, limit int
}

var findCases = []findCase{
	{"l+", "hello world", 0, -1},
	{"o", "hello world", 5, -1},
	{"o", "hello world", 5, 1},
	{"%w+", "one two  three", 0, -1},
	{"%a+", "ab12cd", 0, 2},
	{"(%w+)=(%w+)", "a=1, b=2, c=3", 0, -1},
	{"()", "abc", 0, -1},
	{"()a()", "banana", 0, -1},
	{"", "ab", 0, -1},
	{"", "", 0, -1},
	{"x*", "axxb", 0, -1},
	{"^a", "aaa", 0, -1},
	{"^a", "baa", 0, -1},
	{"^(h)(e)", "hello", 0, -1},
	{"a$", "aba", 0, -1},
	{"^abc$", "abc", 0, -1},
	{"^$", "", 0, -1},
	{"a$b", "a$b", 0, -1},
	{"%d+%.?%d*", "pi 3.14 and 42.", 0, -1},
	{"[%a_][%w_]*", "local x_1 = y2", 0, -1},
	{"[^%s]+", " a bb  ccc ", 0, -1},
	{"[a-c]+", "xxabcabdyc", 0, -1},
	{"[]]", "a]b", 0, -1},
	{"[a-]", "x-a", 0, -1},
	{"[%]]", "]]", 0, -1},
	{"%b()", "f(a(b)c) (d", 0, -1},
	{"%b{}", "{{}", 0, -1},
	{"%f[%w]%w+", "THE (quick) fox f", 0, -1},
	{"(a)%1", "aaxaa", 0, -1},
	{"(%w+) %1", "hello hello world world", 0, -1},
	{"a-b", "aaab", 0, -1},
	{"(a-)b", "xaab", 0, -1},
	{"a?b", "abbab", 0, -1},
	{".-%.", "a.b.c", 0, -1},
	{"%s*(.-)%s*$", "  trim me  ", 0, 1},
	{"%u%l+", "Hello World", 0, -1},
	{"%x+", "0xDEADbeefZ", 0, -1},
	{"%p+", "a,b;c!", 0, -1},
	{"%c", "a\tb\nc", 0, -1},
	{"%z", "a\x00b", 0, -1},
	{"%S+", "a \x00b", 0, -1},
	{"(%d)(%d)(%d)", "123456789", 0, -1},
	{"(h)(e)(l)(l)(o)", "hello", 0, -1},
	{"((a)(b))", "abab", 0, -1},
	{"a", "aaa", 0, 0},
	{"b", "aaa", 0, 0},
	{"a", "aaa", 10, -1},
	{"x", "", 0, -1},
	{"%w+", "héllo wörld", 0, -1},
	{"((((((((((a))))))))))", "a", 0, -1},
	// Errors.
	{"(", "a", 0, -1},
	{"%", "a", 0, -1},
	{"[a", "a", 0, -1},
	{"a)", "a", 0, -1},
	{"%0", "a", 0, -1},
	{"%1", "a", 0, -1},
	{"(a%1)", "aa", 0, -1},
	{"a*", strings.Repeat("a", 1100000), 0, 1},
}

func TestFindMatchesPM(t *testing.T) {
	ctx := t.Context()
	for _, c := range findCases {
		name := fmt.Sprintf("%q in %.20q from %d limit %d", c.pat, c.src, c.offset, c.limit)
		want, wantErr := pm.Find(c.pat, []byte(c.src), c.offset, c.limit)
		got, gotErr := Find(ctx, c.pat, []byte(c.src), c.offset, c.limit)
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Errorf("%s: err = %v, pm: %v", name, gotErr, wantErr)
			continue
		}
		if wantErr != nil {
			var e *Error
			if !errors.As(gotErr, &e) {
				t.Errorf("%s: err %T is not an *Error", name, gotErr)
			}
			continue
		}
		if g, w := dump(got), dumpPM(want); g != w {
			t.Errorf("%s:\n got %s\nwant %s", name, g, w)
		}
		// The lazy Matcher finds the same matches as Find with no limit.
		if c.limit < 0 {
			pat, err := Compile(c.pat)
			if err != nil {
				t.Fatal(err)
			}
			mt := pat.Matcher(c.src, c.offset, FindOpts{})
			var all []*MatchData
			for {
				md, err := mt.Next(ctx)
				if err != nil {
					t.Fatalf("%s: Next: %v", name, err)
				}
				if md == nil {
					break
				}
				all = append(all, md)
			}
			if g, w := dump(all), dumpPM(want); g != w {
				t.Errorf("%s: Matcher:\n got %s\nwant %s", name, g, w)
			}
			if md, err := mt.Next(ctx); md != nil || err != nil {
				t.Errorf("%s: Next after the end = %v, %v", name, md, err)
			}
		}
	}
}

func dump(ms []*MatchData) string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteString("[")
		for i := 0; i < m.CaptureLength(); i++ {
			fmt.Fprintf(&b, "%d/%v ", m.Capture(i), m.IsPosCapture(i))
		}
		b.WriteString("]")
	}
	return fmt.Sprintf("%d:%s", len(ms), b.String())
}

func dumpPM(ms []*pm.MatchData) string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteString("[")
		for i := 0; i < m.CaptureLength(); i++ {
			fmt.Fprintf(&b, "%d/%v ", m.Capture(i), m.IsPosCapture(i))
		}
		b.WriteString("]")
	}
	return fmt.Sprintf("%d:%s", len(ms), b.String())
}

// countingCtx is a context whose Err starts failing after `after` calls. It lets a test
// stop the matcher at a known point without sleeping.
type countingCtx struct {
	context.Context
	after int64
	calls atomic.Int64
}

func (c *countingCtx) Err() error {
	if c.calls.Add(1) > c.after {
		return context.Canceled
	}
	return nil
}

func (c *countingCtx) Done() <-chan struct{} { return nil }

func TestFindStopsWhenCancelledBeforehand(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	ms, err := Find(ctx, catastrophic, catastrophicSubject, 0, 1)
	if ms != nil || !errors.Is(err, ErrStopped) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Find = %v, %v", ms, err)
	}
	var se *StoppedError
	if !errors.As(err, &se) || se.Cause != context.Canceled {
		t.Fatalf("err = %#v", err)
	}
	if !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("message = %q", err.Error())
	}
}

func TestFindStopsWithCause(t *testing.T) {
	cause := errors.New("run timed out")
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(cause)
	_, err := Find(ctx, catastrophic, catastrophicSubject, 0, -1)
	if !errors.Is(err, cause) || !errors.Is(err, ErrStopped) {
		t.Fatalf("err = %v", err)
	}

	dctx, dcancel := context.WithDeadline(t.Context(), time.Unix(0, 0))
	defer dcancel()
	_, err = Find(dctx, catastrophic, catastrophicSubject, 0, -1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
}

func TestFindStopsAfterNChecks(t *testing.T) {
	for _, n := range []int64{0, 1, 5, 50} {
		ctx := &countingCtx{Context: context.Background(), after: n}
		pat, err := Compile(catastrophic)
		if err != nil {
			t.Fatal(err)
		}
		mt := pat.Matcher(string(catastrophicSubject), 0, FindOpts{})
		md, err := mt.Next(ctx)
		if md != nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("n=%d: Next = %v, %v", n, md, err)
		}
		// n+1 looks, plus possibly one by context.Cause to get the cause.
		if got := ctx.calls.Load(); got < n+1 || got > n+2 {
			t.Fatalf("n=%d: Err called %d times", n, got)
		}
		// One look at the context every 4096 steps.
		if steps := mt.Steps(); steps < (n+1)*checkEvery || steps > (n+1)*checkEvery+checkEvery {
			t.Fatalf("n=%d: stopped after %d steps", n, steps)
		}
		// The error sticks.
		if _, err2 := mt.Next(context.Background()); err2 != err {
			t.Fatalf("second Next = %v", err2)
		}
	}
}

// startedCtx wraps a real context and reports the first time the matcher looks at it,
// so another goroutine can cancel a match known to be running.
type startedCtx struct {
	context.Context
	once    sync.Once
	started chan struct{}
}

func (c *startedCtx) Err() error {
	c.once.Do(func() { close(c.started) })
	return c.Context.Err()
}

func TestFindStopsWhenCancelledFromAnotherGoroutine(t *testing.T) {
	base, cancel := context.WithCancel(t.Context())
	ctx := &startedCtx{Context: base, started: make(chan struct{})}
	go func() {
		<-ctx.started
		cancel()
	}()
	_, err := Find(ctx, catastrophic, catastrophicSubject, 0, -1)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrStopped) {
		t.Fatalf("err = %v", err)
	}
}

func TestBraceScanIsCounted(t *testing.T) {
	// Every start position scans to the end: quadratic in one instruction per position.
	src := []byte(strings.Repeat("(", 200000))
	ctx := &countingCtx{Context: context.Background(), after: 3}
	_, err := Find(ctx, "%b()", src, 0, -1)
	if !errors.Is(err, ErrStopped) {
		t.Fatalf("err = %v", err)
	}
	// Back-references too.
	ctx = &countingCtx{Context: context.Background(), after: 3}
	_, err = Find(ctx, "(.*)%1%1x", []byte(strings.Repeat("a", 20000)), 0, -1)
	if !errors.Is(err, ErrStopped) {
		t.Fatalf("err = %v", err)
	}
}

func TestStepBudget(t *testing.T) {
	_, err := FindOpts{MaxSteps: 100000}.Find(t.Context(), catastrophic, catastrophicSubject, 0, -1)
	if !errors.Is(err, ErrTooComplex) || errors.Is(err, ErrStopped) {
		t.Fatalf("err = %v", err)
	}
	pat, _ := Compile(catastrophic)
	mt := pat.Matcher(string(catastrophicSubject), 0, FindOpts{MaxSteps: 10})
	if _, err := mt.Next(t.Context()); !errors.Is(err, ErrTooComplex) || mt.Steps() != 11 {
		t.Fatalf("err = %v after %d steps", err, mt.Steps())
	}
	// A budget large enough changes nothing.
	ms, err := FindOpts{MaxSteps: 1000}.Find(t.Context(), "%w+", []byte("ab cd ef"), 0, -1)
	if err != nil || len(ms) != 3 {
		t.Fatalf("Find = %v, %v", dump(ms), err)
	}
	// The budget covers all the searches of one Matcher.
	pat, _ = Compile("a")
	mt = pat.Matcher(strings.Repeat("a", 100), 0, FindOpts{MaxSteps: 50})
	n := 0
	for {
		md, err := mt.Next(t.Context())
		if err != nil {
			if !errors.Is(err, ErrTooComplex) {
				t.Fatal(err)
			}
			break
		}
		if md == nil {
			t.Fatal("budget never exceeded")
		}
		n++
	}
	if n == 0 || n >= 100 {
		t.Fatalf("%d matches before the budget ran out", n)
	}
}

func TestNestingLimit(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("(", n) + "a" + strings.Repeat(")", n) }
	ms, err := Find(t.Context(), deep(maxNesting), []byte("xa"), 0, -1)
	want, _ := pm.Find(deep(maxNesting), []byte("xa"), 0, -1)
	if err != nil || dump(ms) != dumpPM(want) {
		t.Fatalf("Find = %v, %v", dump(ms), err)
	}
	_, err = Compile(deep(maxNesting + 1))
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(err.Error(), "nested too deeply") {
		t.Fatalf("err = %v", err)
	}
	// A pattern far too deep for the goroutine stack is refused, not a crash.
	if _, err := Compile(deep(10 << 20)); err == nil {
		t.Fatal("no error")
	}
}

// Back-references to a capture that is still open or to a position capture: Lua 5.1 raises
// "invalid capture index" for the first and never matches the second. gopher-lua's pm
// reads stale positions there and panicked with an index out of range on "()%1" and on
// "(()%1)" from the second start position.
func TestBackReferencesLikeLua51(t *testing.T) {
	cases := []struct {
		pat, src string
		matches  int
		err      string
	}{
		{"()%1", "0", 0, ""},
		{"()%1", "", 0, ""},
		{"()a%1", "aa", 0, ""},
		{"(a%1)", "aa", 0, "invalid capture index"},
		{"(()%1)", "xy", 0, "invalid capture index"},
		{"(.-%1)", "xaa", 0, "invalid capture index"},
		{"(a)%1", "aa", 1, ""},
	}
	for _, c := range cases {
		ms, err := Find(t.Context(), c.pat, []byte(c.src), 0, -1)
		if c.err != "" {
			var e *Error
			if !errors.As(err, &e) || e.Message != c.err {
				t.Errorf("Find(%q, %q) = %v, want the error %q", c.pat, c.src, err, c.err)
			}
			continue
		}
		if err != nil || len(ms) != c.matches {
			t.Errorf("Find(%q, %q) = %d matches, %v; want %d", c.pat, c.src, len(ms), err, c.matches)
		}
	}
}
