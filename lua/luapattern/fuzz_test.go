package luapattern

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/yuin/gopher-lua/pm"
)

// backRef finds a back-reference in a pattern.
var backRef = regexp.MustCompile(`%[1-9]`)

// fuzzMaxSteps bounds one fuzzed search: enough for any small subject and pattern that
// does not backtrack catastrophically, small enough to keep an input under a millisecond.
const fuzzMaxSteps = 200_000

// FuzzFind checks the matcher on any pattern and subject: it never panics, a step budget
// and a cancelled context always stop it (a finished search took fewer steps than the
// first context check), the lazy Matcher finds what Find finds, and where the search
// finished within the budget the results are gopher-lua's pm.Find's — the same matches
// and captures, or the same error — except where the package documents a difference
// (captures nested deeper than maxNesting) or pm itself crashes.
func FuzzFind(f *testing.F) {
	for _, c := range findCases {
		f.Add(c.pat, c.src, uint8(c.offset), int8(c.limit))
	}
	for _, p := range []string{
		catastrophic, "%", "%b", "%bx", "[", "[^", "[a-", "[%", "(", ")", "(()", "%1", "(a)%2", "%0", "(%1)",
		"^$", "$^", "[]", "[^]]", "[a-%d]", "%f", "a-", "-", "^*", "((((((((((a))))))))))", "(.-)%1$", "%b%%",
	} {
		f.Add(p, "a(b)c%%[x]aa", uint8(0), int8(-1))
	}
	f.Fuzz(func(t *testing.T, pat, src string, offset uint8, limit int8) {
		if len(pat) > 64 || len(src) > 256 {
			return // the comparison is on small inputs; the budget covers big ones
		}
		ctx := context.Background()
		got, err := FindOpts{MaxSteps: fuzzMaxSteps}.Find(ctx, pat, []byte(src), int(offset), int(limit))
		var perr *Error
		switch {
		case err == nil, errors.As(err, &perr):
		case errors.Is(err, ErrTooComplex):
			return // pm would take as long or longer: nothing to compare
		default:
			t.Fatalf("Find(%q, %q): unexpected error %T: %v", pat, src, err, err)
		}
		if err == nil && limit < 0 {
			checkMatcher(t, pat, src, int(offset), got)
		}
		checkStopped(t, pat, src, int(offset))
		if strings.Count(pat, "(") > maxNesting {
			return // refused here, where pm may recurse without bound
		}
		if backRef.MatchString(pat) && (strings.Contains(pat, "()") || (perr != nil && perr.Message == "invalid capture index")) {
			return // back-references to position or open captures follow Lua 5.1, not pm
		}
		want, crashed, wantErr := pmFind(pat, src, int(offset), int(limit))
		if crashed != "" {
			return // a bug of pm's (e.g. an index out of range) that this package does not share
		}
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("Find(%q, %q, %d, %d): err = %v, pm: %v", pat, src, offset, limit, err, wantErr)
		}
		if err == nil {
			if g, w := dump(got), dumpPM(want); g != w {
				t.Fatalf("Find(%q, %q, %d, %d):\n got %s\n pm  %s", pat, src, offset, limit, g, w)
			}
		}
	})
}

// checkMatcher asserts that the lazy Matcher finds the matches Find found.
func checkMatcher(t *testing.T, pat, src string, offset int, want []*MatchData) {
	t.Helper()
	p, err := Compile(pat)
	if err != nil {
		t.Fatalf("Compile(%q) failed after Find succeeded: %v", pat, err)
	}
	mt := p.Matcher(src, offset, FindOpts{MaxSteps: fuzzMaxSteps})
	var all []*MatchData
	for {
		md, err := mt.Next(context.Background())
		if err != nil {
			t.Fatalf("Matcher(%q, %q).Next: %v", pat, src, err)
		}
		if md == nil {
			break
		}
		all = append(all, md)
	}
	if g, w := dump(all), dump(want); g != w {
		t.Fatalf("Matcher(%q, %q):\n got %s\nFind %s", pat, src, g, w)
	}
}

// checkStopped runs the search under a context that is already cancelled: it either
// finishes before the first context check or stops with a *StoppedError.
func checkStopped(t *testing.T, pat, src string, offset int) {
	t.Helper()
	p, err := Compile(pat)
	if err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	mt := p.Matcher(src, offset, FindOpts{})
	for {
		md, err := mt.Next(ctx)
		var se *StoppedError
		switch {
		case err == nil && md == nil:
			if mt.Steps() >= checkEvery {
				t.Fatalf("Matcher(%q, %q) ran %d steps under a cancelled context", pat, src, mt.Steps())
			}
			return
		case err == nil:
			continue
		case errors.As(err, &se) && errors.Is(err, context.Canceled):
			return
		case errors.As(err, new(*Error)):
			return // a pattern error found while matching (an invalid capture index)
		default:
			t.Fatalf("Matcher(%q, %q) under a cancelled context: %T %v", pat, src, err, err)
		}
	}
}

// pmFind runs gopher-lua's matcher; crashed describes a panic other than pm's *Error.
func pmFind(pat, src string, offset, limit int) (ms []*pm.MatchData, crashed string, err error) {
	defer func() {
		if v := recover(); v != nil {
			crashed = fmt.Sprint(v)
		}
	}()
	ms, err = pm.Find(pat, []byte(src), offset, limit)
	return ms, "", err
}
